"""The ``weights`` pass: apply the export's weight format (``weights="f16"`` / ``"q4_0"``).

It runs last, on the final graph, and only decides: :func:`t2n.write.weight_formats.plan` records
how each variable is stored in ``Graph.storage`` (and adjusts the consumers a block layout
needs); the writer applies it while streaming the tensors. The report lists what was
compressed (``ExportResult.extras["weights"]``).
"""

from __future__ import annotations

from t2n.write import weight_formats
from t2n.passes import GraphPass, PassContext


def run(g, ctx: PassContext) -> None:
    fmt = weight_formats.check_format(ctx.options.get("weights"))
    if fmt == "f32":
        return
    p = weight_formats.plan(g, fmt, ctx.model)
    extras = g.__dict__.setdefault("extras", {})
    extras["weights"] = p.as_dict()
    extras.setdefault("report_lines", []).extend(p.report_lines())


PASS = GraphPass("weights", run, options=("weights",))
