"""Run an NNEF archive in tract, in a separate process.

tract aborts the whole process on a Rust panic, so t2n never loads an archive in its own
process: :func:`run_in_tract` has ``python -m t2n.check.tract_runner`` load the archive and
run it on an ``.npz`` of inputs, and reads back an ``.npz`` of outputs.
:func:`run_sets_in_tract` runs several input sets (a check's example and fresh inputs) with
one load of the archive. The child is the process's shared one (:data:`SHARED`, which an
export starts before it captures the model, :func:`prestart`, and which leaves after
``IDLE`` seconds without work); a call made while another thread uses it gets a child of its
own. This module imports neither torch nor t2n's engine, so the child starts fast.

Exit codes of the child: 0 every set ran (each set's outputs, or tract's refusal of those
inputs in ``OUT.npz.err``); 3 tract refused the archive (the message is on stderr);
anything else (a negative code for a signal) is a crash. ``--serve``: a long-lived child
answering one archive per request (:class:`TractWorker`, :mod:`t2n.check.served`).
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

from t2n.check.child import REFUSED as LOAD_OR_RUN_ERROR
from t2n.check.child import run_child, summarise
from t2n.check.runner_io import TractRunError, only, read_sets, write_sets
from t2n.check.served import ServedRunner, SharedRunner, serve


def run_in_tract(archive: str, inputs: list[np.ndarray],
                 timeout: float | None = 600) -> list[np.ndarray]:
    """Outputs of the archive on ``inputs`` (positional), computed by tract in a child."""
    return only(run_sets_in_tract(archive, [inputs], timeout))


def run_sets_in_tract(archive: str, sets: list[list[np.ndarray]],
                      timeout: float | None = 600) -> list:
    """Outputs of the archive on each input set, tract loading the archive ONCE in one
    child: per set, its list of outputs or the :class:`TractRunError` tract raised on it
    (a refusal of those inputs). A load error or a crash raises; a crash names the set."""
    return SHARED.run_sets(archive, sets, timeout, lambda: run_sets_in_child(
        "t2n.check.tract_runner", "tract", archive, sets, timeout))


def load_in_tract(archive: str, timeout: float | None = 600) -> None:
    """Load ``archive`` in tract as a user would (parse, declutter, optimise into a
    runnable plan) without running it, in a child; raises :class:`TractRunError` with
    tract's message when tract refuses or crashes on it. What every tract export proves
    before it is accepted (:mod:`t2n.check.load`)."""
    run_sets_in_tract(archive, [], timeout)


def prestart(timeout: float | None = 600) -> None:
    """Start the process's shared tract child (:data:`SHARED`) now, so its start overlaps
    the export's capture (an export that proves or checks its archive in tract calls it)."""
    SHARED.prestart(timeout)


def run_in_child(module: str, engine: str, archive: str, inputs: list[np.ndarray] | None,
                 timeout: float | None = 600) -> list[np.ndarray] | None:
    """Run ``python -m module ARCHIVE IN.npz OUT.npz`` (a runner with this module's exit
    codes) and return the outputs; ``engine`` names it in error messages. ``inputs=None``
    loads the archive without running it (no input set) and returns None."""
    if inputs is None:
        run_sets_in_child(module, engine, archive, [], timeout)
        return None
    return only(run_sets_in_child(module, engine, archive, [inputs], timeout))


def run_sets_in_child(module: str, engine: str, archive: str, sets: list[list[np.ndarray]],
                      timeout: float | None = 600) -> list:
    """``python -m module ARCHIVE IN0.npz OUT0.npz [IN1.npz OUT1.npz ...]``: one child, one
    load, every set run in order (see :func:`run_sets_in_tract`); no set: load only."""
    with tempfile.TemporaryDirectory(prefix="t2n-run-") as d:
        pairs = write_sets(d, sets)
        run = run_child(module, [os.path.abspath(archive), *[p for pair in pairs for p in pair]],
                        workdir=d, timeout=timeout)
        if run.returncode is None:
            raise TractRunError(f"{engine} {run.crash_text()}", crashed=True)
        if run.refused:
            raise TractRunError(summarise(run.stderr), crashed=False)
        return read_sets(pairs, engine, None if run.ok else f"{engine} {run.crash_text()}")


class TractWorker(ServedRunner):
    """One long-lived tract child serving many runs (test suites, conformance sweeps):
    :class:`t2n.check.served.ServedRunner` on this module."""

    def __init__(self, timeout: float = 300):
        super().__init__("t2n.check.tract_runner", "tract", timeout)


IDLE = 60.0  # seconds the shared child waits for the next archive before it exits
SHARED = SharedRunner("t2n.check.tract_runner", "tract", IDLE)


def _run_sets(tract, archive: str, pairs: list[tuple[str, str]]) -> str | None:
    """Load the archive once and run it on each ``(IN.npz, OUT.npz)`` pair in order: the
    outputs go to OUT, a refusal of those inputs to ``OUT.err``. Returns None, or tract's
    message when it refused the archive itself."""
    try:
        runnable = _loader(tract, declares_transformers(archive)).load(archive).into_runnable()
    except Exception as e:  # tract.TractError and friends
        return _message(e)
    for inp, out in pairs:
        try:
            with np.load(inp, allow_pickle=False) as z:
                inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
            arrays = [r.to_numpy() for r in runnable.run(inputs)]
        except Exception as e:
            with open(out + ".err", "w") as f:
                f.write(_message(e))
            continue
        np.savez(out, *arrays)
    return None


_LOADERS: dict = {}


def _loader(tract, transformers: bool):
    """tract's NNEF loader, with the ``tract_transformers`` registry when the archive
    declares it (stateful caches, :mod:`t2n.passes.stateful_cache`). Made once per child:
    ``tract.nnef()`` registers every op (12 ms), more than loading a small archive."""
    if transformers not in _LOADERS:
        nnef = tract.nnef()
        _LOADERS[transformers] = nnef.with_tract_transformers() if transformers else nnef
    return _LOADERS[transformers]


def declares_transformers(archive: str) -> bool:
    """Whether graph.nnef's header asks for tract's ``tract_transformers`` registry (the
    writer puts graph.nnef first in a tar, so only its first member is read)."""
    import tarfile

    try:
        if os.path.isdir(archive):
            with open(os.path.join(archive, "graph.nnef"), "rb") as f:
                head = f.read(4096)
        else:
            with tarfile.open(archive, "r|*") as t:
                m = t.next()
                head = t.extractfile(m).read(4096) if m and m.name.endswith("graph.nnef") \
                    else b""
    except (OSError, tarfile.TarError):
        return False
    return b"extension tract_registry tract_transformers;" in head


def _message(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if len(lines) > 6:  # keep the context and the root cause of tract's error chain
        lines = lines[:1] + ["..."] + lines[-4:]
    return " | ".join(lines) or type(e).__name__


def _main(argv: list[str]) -> int:
    import tract

    if argv[:1] == ["--serve"]:
        return serve(lambda archive, pairs: _run_sets(tract, archive, pairs),
                     *map(float, argv[1:]))
    archive, *files = argv
    err = _run_sets(tract, archive, list(zip(files[::2], files[1::2])))
    if err is not None:
        sys.stderr.write(err + "\n")
        return LOAD_OR_RUN_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
