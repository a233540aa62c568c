"""Run an NNEF archive in tract, in a separate process.

tract aborts the whole process on a Rust panic, so t2n never loads an archive in its own
process: :func:`run_in_tract` starts ``python -m t2n.tract_runner`` with the archive and an
``.npz`` of inputs, and reads back an ``.npz`` of outputs. This module imports neither torch
nor t2n's engine, so the child starts fast.

Exit codes of the child: 0 outputs written; 3 tract refused the archive or the inputs (the
message is on stderr); anything else (a negative code for a signal) is a crash.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile

import numpy as np

LOAD_OR_RUN_ERROR = 3


class TractRunError(Exception):
    def __init__(self, message: str, crashed: bool):
        self.crashed = crashed
        super().__init__(message)


def _child(args: list[str], workdir: str, module: str = "t2n.tract_runner"):
    """The command and environment of a runner child. It starts in ``workdir`` (a private
    temporary folder) so that stray modules in the user's current folder cannot shadow
    numpy or tract, and it finds t2n itself through PYTHONPATH."""
    env = dict(os.environ, RUST_BACKTRACE="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return [sys.executable, "-m", module, *args], dict(env=env, cwd=workdir)


def run_in_tract(archive: str, inputs: list[np.ndarray],
                 timeout: float | None = 600) -> list[np.ndarray]:
    """Outputs of the archive on ``inputs`` (positional), computed by tract in a child."""
    return run_in_child("t2n.tract_runner", "tract", archive, inputs, timeout)


def load_in_tract(archive: str, timeout: float | None = 600) -> None:
    """Load ``archive`` in tract as a user would (parse, declutter, optimise into a
    runnable plan) without running it, in a child; raises :class:`TractRunError` with
    tract's message when tract refuses or crashes on it. What every tract export proves
    before it is accepted (:mod:`t2n.load_check`)."""
    run_in_child("t2n.tract_runner", "tract", archive, None, timeout)


def run_in_child(module: str, engine: str, archive: str, inputs: list[np.ndarray] | None,
                 timeout: float | None = 600) -> list[np.ndarray] | None:
    """Run ``python -m module ARCHIVE IN.npz OUT.npz`` (a runner with this module's exit
    codes) and return the outputs; ``engine`` names it in error messages. ``inputs=None``
    runs ``python -m module --load ARCHIVE``: load only, returns None."""
    with tempfile.TemporaryDirectory(prefix="t2n-run-") as d:
        inp = os.path.join(d, "inputs.npz")
        out = os.path.join(d, "outputs.npz")
        if inputs is None:
            cmd, kw = _child(["--load", os.path.abspath(archive)], d, module)
        else:
            np.savez(inp, *[np.asarray(a) for a in inputs])
            cmd, kw = _child([os.path.abspath(archive), inp, out], d, module)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL, **kw)
        except subprocess.TimeoutExpired:
            raise TractRunError(f"{engine} did not finish within {timeout:.0f} s",
                                crashed=True) from None
        if p.returncode == 0:
            if inputs is None:
                return None
            with np.load(out, allow_pickle=False) as z:
                return [z[f"arr_{i}"] for i in range(len(z.files))]
        msg = _summarise(p.stderr)
        if p.returncode == LOAD_OR_RUN_ERROR:
            raise TractRunError(msg, crashed=False)
        raise TractRunError(f"{engine} crashed (exit code {p.returncode}): {msg}",
                            crashed=True)


def _summarise(stderr: str) -> str:
    lines = [ln.rstrip() for ln in stderr.strip().splitlines() if ln.strip()]
    panics = [ln for ln in lines if "panicked at" in ln or "assertion" in ln]
    keep = panics[:3] if panics else lines[-12:]
    return " | ".join(keep)[:3000] if keep else "(no message)"


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
        cmd, kw = _child(["--serve"], self._dir.name)
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True, **kw)

    def load(self, archive: str) -> None:
        """Load the archive into a runnable plan without running it (as :func:`load_in_tract`)."""
        self.run(archive, None)

    def run(self, archive: str, inputs: list[np.ndarray] | None) -> list[np.ndarray] | None:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        inp = os.path.join(self._dir.name, "in.npz") if inputs is not None else ""
        out = os.path.join(self._dir.name, "out.npz")
        if inputs is not None:
            np.savez(inp, *[np.asarray(a) for a in inputs])
        self._proc.stdin.write(f"{os.path.abspath(archive)}\t{inp}\t{out}\n")
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
            msg = _summarise(self._stderr.read())
            code = self._proc.returncode
            self._proc = None
            raise TractRunError(f"tract crashed (exit code {code}): {msg}", crashed=True)
        if line.startswith("ok"):
            if inputs is None:
                return None
            with np.load(out, allow_pickle=False) as z:
                return [z[f"arr_{i}"] for i in range(len(z.files))]
        raise TractRunError(line[4:].strip(), crashed=False)

    def close(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=10)
        self._proc = None
        self._dir.cleanup()


def _run_one(tract, archive: str, inp: str, out: str) -> str | None:
    """Run one archive (load it only when ``inp`` is empty); None on success, else tract's
    message (a refusal, not a crash)."""
    try:
        model = tract.nnef().load(archive)
        runnable = model.into_runnable()
        if not inp:
            return None
        with np.load(inp, allow_pickle=False) as z:
            inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
        results = runnable.run(inputs)
        arrays = [r.to_numpy() for r in results]
    except Exception as e:  # tract.TractError and friends
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        if len(lines) > 6:  # keep the context and the root cause of tract's error chain
            lines = lines[:1] + ["..."] + lines[-4:]
        return " | ".join(lines) or type(e).__name__
    np.savez(out, *arrays)
    return None


def _main(argv: list[str]) -> int:
    import tract

    if argv == ["--serve"]:
        for line in sys.stdin:
            archive, inp, out = line.rstrip("\n").split("\t")
            err = _run_one(tract, archive, inp, out)
            sys.stdout.write("ok\n" if err is None else "err " + err.replace("\n", " ") + "\n")
            sys.stdout.flush()
        return 0
    archive, inp, out = argv if argv[0] != "--load" else (argv[1], "", "")
    err = _run_one(tract, archive, inp, out)
    if err is not None:
        sys.stderr.write(err + "\n")
        return LOAD_OR_RUN_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
