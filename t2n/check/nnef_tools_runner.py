"""Run a standard (Khronos) NNEF archive with the reference tools, in a separate process.

The check of ``target="khronos"`` must not lean on tract: the archive is parsed and
validated by the Khronos parser (``nnef.load_graph``, which also infers every shape) and
executed by nnef-tools' PyTorch interpreter. Like :mod:`t2n.check.tract_runner`, the work happens
in a child (``python -m t2n.check.nnef_tools_runner ARCHIVE IN.npz OUT.npz``) with the same exit
codes: 0 each set ran (its outputs, or the tools' refusal in ``OUT.npz.err``), 3 the parser
refused the archive (message on stderr). ``--serve [IDLE]`` is the long-lived form
(:mod:`t2n.check.served`): the child imports torch and nnef-tools once (2-3 s) for many
archives, each still unpacked into its own folder and parsed afresh. A process's exports
share one such child (:data:`SHARED`; it exits after :data:`IDLE` seconds without an
archive, and a call from a second thread meanwhile gets a per-call child), so consecutive
Khronos proofs and checks pay the start once.
"""

from __future__ import annotations

import os
import sys
import tarfile
import tempfile

import numpy as np

from t2n.check.runner_io import only
from t2n.check.served import ServedRunner, SharedRunner, serve
from t2n.check.tract_runner import LOAD_OR_RUN_ERROR, run_sets_in_child

IDLE = 60.0  # seconds the shared child waits for the next archive before it exits


def run_in_nnef_tools(archive: str, inputs: list[np.ndarray],
                      timeout: float | None = 600) -> list[np.ndarray]:
    """Outputs of a standard archive on ``inputs``, computed by nnef-tools' interpreter."""
    return only(run_sets_in_nnef_tools(archive, [inputs], timeout))


def run_sets_in_nnef_tools(archive: str, sets: list[list[np.ndarray]],
                           timeout: float | None = 600) -> list:
    """Each set's outputs (or refusal), as :func:`t2n.check.tract_runner.run_sets_in_tract`
    does for tract, in the process's shared nnef-tools child (:data:`SHARED`)."""
    return SHARED.run_sets(archive, sets, timeout, lambda: run_sets_in_child(
        "t2n.check.nnef_tools_runner", "nnef-tools", archive, sets, timeout))


def parse_in_nnef_tools(archive: str, timeout: float | None = 600) -> None:
    """Parse ``archive`` with the Khronos parser (``nnef.load_graph`` and its shape
    inference) in a child, without running it; raises ``TractRunError`` with the parser's
    message when it refuses. What every Khronos export proves before it is accepted."""
    run_sets_in_nnef_tools(archive, [], timeout)


def prestart(timeout: float | None = 600) -> None:
    """Start the process's shared nnef-tools child (:data:`SHARED`) now, so its start (the
    import of torch and nnef-tools) overlaps the export's capture."""
    SHARED.prestart(timeout)


class NnefToolsWorker(ServedRunner):
    """A long-lived nnef-tools child of the caller's own (exports share :data:`SHARED`)."""

    def __init__(self, timeout: float | None = 600, idle: float | None = None):
        super().__init__("t2n.check.nnef_tools_runner", "nnef-tools", timeout, idle)


SHARED = SharedRunner("t2n.check.nnef_tools_runner", "nnef-tools", IDLE)


def _folder(archive: str, scratch: str) -> str:
    """The archive as a folder (the reference tools read folders; tar/tgz are unpacked)."""
    if os.path.isdir(archive):
        return archive
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(scratch, filter="data")
    return scratch


def _run(archive: str, inp: str = "", out: str = "") -> str | None:
    """Parse the archive, and run it on ``inp`` unless ``inp`` is empty."""
    try:
        import nnef

        with tempfile.TemporaryDirectory(prefix="t2n-khr-") as scratch:
            folder = _folder(archive, scratch)
            graph = nnef.load_graph(folder)
            nnef.infer_shapes(graph)
            if not inp:
                return None
            from nnef_tools.interpreter.pytorch import Interpreter

            with np.load(inp, allow_pickle=False) as z:
                inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
            results = Interpreter(graph, device="cpu")(inputs)
            arrays = [np.asarray(results[name]) for name in graph.outputs]
    except Exception as e:  # nnef.Error from the parser, interpreter errors
        return f"{type(e).__name__}: {e}".replace("\n", " | ")
    np.savez(out, *arrays)
    return None


def _run_sets(archive: str, pairs: list[tuple[str, str]]) -> str | None:
    """Parse the archive, then run each ``(IN.npz, OUT.npz)`` set (a refusal of a set goes
    to ``OUT.err``); returns the parser's refusal of the archive, or None."""
    err = _run(archive)  # the parser's refusal is the archive's, not a set's
    if err is not None:
        return err
    for inp, out in pairs:
        err = _run(archive, inp, out)
        if err is not None:
            with open(out + ".err", "w") as f:
                f.write(err)
    return None


def _main(argv: list[str]) -> int:
    import warnings

    warnings.simplefilter("ignore")  # the interpreter's deprecation chatter is not ours
    if argv[:1] == ["--serve"]:
        return serve(_run_sets, *map(float, argv[1:]))
    archive, *files = argv
    err = _run_sets(archive, list(zip(files[::2], files[1::2])))
    if err is not None:
        sys.stderr.write(err + "\n")
        return LOAD_OR_RUN_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
