"""The ``weights`` pass: apply the export's weight format (``weights="f16"`` / ``"q4_0"``).

It runs last, on the final graph, and only decides: :func:`t2n.write.weight_formats.plan` records
how each variable is stored in ``session.storage`` (and adjusts the consumers a block layout
needs); the writer applies it while streaming the tensors. The report lists what was
compressed (``ExportResult.extras["weights"]``).
"""

from __future__ import annotations

from t2n.write import weight_formats
from t2n.passes import GraphPass
from t2n.session import ExportSession


def run(g, session: ExportSession) -> None:
    if not session.weights.compresses:
        return
    p = weight_formats.plan(g, session)
    extras = session.extras
    extras["weights"] = p.as_dict()
    extras.setdefault("report_lines", []).extend(p.report_lines())


PASS = GraphPass("weights", run)
