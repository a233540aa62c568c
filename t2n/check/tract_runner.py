"""Run an NNEF archive in tract, in a separate process.

tract aborts the whole process on a Rust panic, so t2n never loads an archive in its own
process: :func:`run_in_tract` starts ``python -m t2n.check.tract_runner`` with the archive and an
``.npz`` of inputs, and reads back an ``.npz`` of outputs. :func:`run_sets_in_tract` runs
several input sets (a check's example and fresh inputs) with one load of the archive. This
module imports neither torch nor t2n's engine, so the child starts fast.

Exit codes of the child: 0 every set ran (each set's outputs, or tract's refusal of those
inputs in ``OUT.npz.err``); 3 tract refused the archive (the message is on stderr);
anything else (a negative code for a signal) is a crash.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile

import numpy as np

from t2n.check.child import REFUSED as LOAD_OR_RUN_ERROR
from t2n.check.child import command, run_child, summarise


class TractRunError(Exception):
    def __init__(self, message: str, crashed: bool):
        self.crashed = crashed
        super().__init__(message)


def run_in_tract(archive: str, inputs: list[np.ndarray],
                 timeout: float | None = 600) -> list[np.ndarray]:
    """Outputs of the archive on ``inputs`` (positional), computed by tract in a child."""
    return _only(run_sets_in_tract(archive, [inputs], timeout))


def run_sets_in_tract(archive: str, sets: list[list[np.ndarray]],
                      timeout: float | None = 600) -> list:
    """Outputs of the archive on each input set, tract loading the archive ONCE in one
    child: per set, its list of outputs or the :class:`TractRunError` tract raised on it
    (a refusal of those inputs). A load error or a crash raises; a crash names the set."""
    return run_sets_in_child("t2n.check.tract_runner", "tract", archive, sets, timeout)


def load_in_tract(archive: str, timeout: float | None = 600) -> None:
    """Load ``archive`` in tract as a user would (parse, declutter, optimise into a
    runnable plan) without running it, in a child; raises :class:`TractRunError` with
    tract's message when tract refuses or crashes on it. What every tract export proves
    before it is accepted (:mod:`t2n.check.load`)."""
    run_in_child("t2n.check.tract_runner", "tract", archive, None, timeout)


def run_in_child(module: str, engine: str, archive: str, inputs: list[np.ndarray] | None,
                 timeout: float | None = 600) -> list[np.ndarray] | None:
    """Run ``python -m module ARCHIVE IN.npz OUT.npz`` (a runner with this module's exit
    codes) and return the outputs; ``engine`` names it in error messages. ``inputs=None``
    loads the archive without running it (no input set) and returns None."""
    if inputs is None:
        run_sets_in_child(module, engine, archive, [], timeout)
        return None
    return _only(run_sets_in_child(module, engine, archive, [inputs], timeout))


def _only(results: list) -> list[np.ndarray]:
    if isinstance(results[0], TractRunError):
        raise results[0]
    return results[0]


def run_sets_in_child(module: str, engine: str, archive: str, sets: list[list[np.ndarray]],
                      timeout: float | None = 600) -> list:
    """``python -m module ARCHIVE IN0.npz OUT0.npz [IN1.npz OUT1.npz ...]``: one child, one
    load, every set run in order (see :func:`run_sets_in_tract`); no set: load only."""
    with tempfile.TemporaryDirectory(prefix="t2n-run-") as d:
        pairs = _write_sets(d, sets)
        run = run_child(module, [os.path.abspath(archive), *[p for pair in pairs for p in pair]],
                        workdir=d, timeout=timeout)
        if run.returncode is None:
            raise TractRunError(f"{engine} {run.crash_text()}", crashed=True)
        if run.refused:
            raise TractRunError(summarise(run.stderr), crashed=False)
        return _read_sets(pairs, engine, None if run.ok else f"{engine} {run.crash_text()}")


def _write_sets(folder: str, sets) -> list[tuple[str, str]]:
    pairs = []
    for k, inputs in enumerate(sets):
        inp, out = os.path.join(folder, f"inputs{k}.npz"), os.path.join(folder, f"outputs{k}.npz")
        np.savez(inp, *[np.asarray(a) for a in inputs])
        pairs.append((inp, out))
    return pairs


def _read_sets(pairs, engine: str, crash: str | None) -> list:
    """Each set's outputs or refusal; the first set with neither is where the child
    crashed (``crash``: its message), and a crash is raised naming that set."""
    results = []
    for k, (_, out) in enumerate(pairs):
        if os.path.exists(out):
            with np.load(out, allow_pickle=False) as z:
                results.append([z[f"arr_{i}"] for i in range(len(z.files))])
        elif os.path.exists(out + ".err"):
            with open(out + ".err") as f:
                results.append(TractRunError(f.read().strip(), crashed=False))
        else:
            e = TractRunError(crash or f"{engine} wrote no outputs", crashed=True)
            e.set_index = k
            raise e
    return results


class TractWorker:
    """One long-lived tract child serving many runs (test suites, conformance sweeps).

    Saves the child start-up per run; a crash is reported for the run that caused it and
    the next run starts a fresh child.
    """

    def __init__(self, timeout: float = 300):
        self.timeout = timeout
        self._proc = None
        self._dir = tempfile.TemporaryDirectory(prefix="t2n-worker-")

    def _start(self):
        self._stderr = open(os.path.join(self._dir.name, "stderr.txt"), "w+")
        cmd, kw = command("t2n.check.tract_runner", ["--serve"], self._dir.name)
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True, **kw)

    def load(self, archive: str) -> None:
        """Load the archive into a runnable plan without running it (as :func:`load_in_tract`)."""
        self.run_sets(archive, [])

    def run(self, archive: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return _only(self.run_sets(archive, [inputs]))

    def run_sets(self, archive: str, sets: list[list[np.ndarray]]) -> list:
        """:func:`run_sets_in_tract` in this worker: one load for every set."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        for name in os.listdir(self._dir.name):
            if name.startswith(("inputs", "outputs")):
                os.remove(os.path.join(self._dir.name, name))
        pairs = _write_sets(self._dir.name, sets)
        self._proc.stdin.write("\t".join([os.path.abspath(archive),
                                          *[p for pair in pairs for p in pair]]) + "\n")
        self._proc.stdin.flush()
        ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout)
        if not ready:  # a hung run: the next one gets a fresh child
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            raise TractRunError(f"tract did not finish within {self.timeout:.0f} s",
                                crashed=True)
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            self._stderr.seek(0)
            msg = summarise(self._stderr.read())
            self._stderr.close()
            code = self._proc.returncode
            self._proc = None
            return _read_sets(pairs, "tract", f"tract crashed (exit code {code}): {msg}")
        if line.startswith("ok"):
            return _read_sets(pairs, "tract", None)
        raise TractRunError(line[4:].strip(), crashed=False)

    def close(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=10)
        self._proc = None
        self._dir.cleanup()


def _run_sets(tract, archive: str, pairs: list[tuple[str, str]]) -> str | None:
    """Load the archive once and run it on each ``(IN.npz, OUT.npz)`` pair in order: the
    outputs go to OUT, a refusal of those inputs to ``OUT.err``. Returns None, or tract's
    message when it refused the archive itself."""
    try:
        nnef = tract.nnef()
        if declares_transformers(archive):  # stateful caches (t2n.passes.stateful_cache)
            nnef = nnef.with_tract_transformers()
        runnable = nnef.load(archive).into_runnable()
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

    if argv == ["--serve"]:
        for line in sys.stdin:
            archive, *files = line.rstrip("\n").split("\t")
            err = _run_sets(tract, archive, list(zip(files[::2], files[1::2])))
            sys.stdout.write("ok\n" if err is None else "err " + err.replace("\n", " ") + "\n")
            sys.stdout.flush()
        return 0
    archive, *files = argv
    err = _run_sets(tract, archive, list(zip(files[::2], files[1::2])))
    if err is not None:
        sys.stderr.write(err + "\n")
        return LOAD_OR_RUN_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
