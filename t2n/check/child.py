"""One way to run part of t2n in a child process, with one timeout and one crash policy.

An engine can abort the whole process on a panic (tract, nnef-tools' interpreter) and a
user's model can hang, so every child program of the package starts through
:func:`run_child` (the tract and nnef-tools runners, the pulse runner, tract's cost model,
manifest entries, LLM generation) or, for a long-lived child, :func:`command`:

* the child is ``python -m MODULE ARGS``, started in a private working folder (stray modules
  in the user's folder cannot shadow numpy or tract) and finding t2n through PYTHONPATH;
* exit code 0 is success, :data:`REFUSED` means the child caught an engine error and
  reported it (its own message); any other code, a signal, or no end within ``timeout``
  seconds (the child is then killed) is a crash, described by :meth:`ChildRun.crash_text`:
  the engine's panic lines, else the last lines it wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

REFUSED = 3  # the child reported an engine error itself


def command(module: str, args: list[str], workdir: str | None,
            pythonpath: tuple[str, ...] = ()) -> tuple[list[str], dict]:
    """The command and ``subprocess`` keywords of a child running ``python -m module``."""
    import t2n

    env = dict(os.environ, RUST_BACKTRACE="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(t2n.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        [root, *pythonpath, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, "-m", module, *args], dict(env=env, cwd=workdir)


@dataclass
class ChildRun:
    """How a child ended: its exit code (None: killed at the timeout) and what it wrote."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timeout: float | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def refused(self) -> bool:
        return self.returncode == REFUSED

    @property
    def crashed(self) -> bool:
        return self.returncode not in (0, REFUSED)

    def crash_text(self) -> str:
        """``did not finish within N s`` or ``crashed (exit code N | signal N): ...``."""
        if self.returncode is None:
            return f"did not finish within {self.timeout:.0f} s"
        how = f"signal {-self.returncode}" if self.returncode < 0 \
            else f"exit code {self.returncode}"
        return f"crashed ({how}): {summarise(self.stderr)}"


def run_child(module: str, args: list[str], *, workdir: str | None,
              timeout: float | None, pythonpath: tuple[str, ...] = ()) -> ChildRun:
    """Run ``python -m module args`` to its end (or ``timeout`` seconds; None: no limit)."""
    cmd, kw = command(module, args, workdir, pythonpath)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, **kw)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) \
            else (e.stderr or "")
        return ChildRun(None, "", err, time.perf_counter() - t0, timeout)
    return ChildRun(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0, timeout)


def summarise(stderr: str) -> str:
    """An engine's panic lines, else the last lines of ``stderr``, on one line."""
    lines = [ln.rstrip() for ln in stderr.strip().splitlines() if ln.strip()]
    panics = [ln for ln in lines if "panicked at" in ln or "assertion" in ln]
    keep = panics[:3] if panics else lines[-12:]
    return " | ".join(keep)[:3000] if keep else "(no message)"
