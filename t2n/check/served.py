"""A long-lived runner child serving many archives: one interpreter start for many runs.

A runner child started per call (:func:`t2n.check.tract_runner.run_sets_in_child`) pays
Python, numpy and its engine's import every time: about 0.3 s for tract, 2-3 s for
nnef-tools (torch). A caller with many archives (a test session, a conformance sweep)
keeps one child instead: :class:`ServedRunner` starts ``python -m MODULE --serve`` through
:func:`t2n.check.child.command` and sends it one request per archive, a line
``ARCHIVE<TAB>IN0.npz<TAB>OUT0.npz...`` (the per-call child's arguments); the child answers
``ok`` (each set's outputs or refusal is in its files, :mod:`t2n.check.runner_io`) or
``err MESSAGE`` (the engine refused the archive: the per-call child's exit code 3).

The guarantees of the per-call child hold per request: a child that dies or does not
answer within ``timeout`` seconds (it is then killed) fails only that request, with the
per-call child's crash text, and the next request starts a fresh child; a child that died
between requests is replaced before the request is sent. The runner's own state is its
module's: each request names its archive, which the runner loads from scratch. With
``idle``, the child exits (code 0) after that many seconds without a request; a request
that meets such an exit is sent again to a fresh child. :class:`SharedRunner` is the one
served child a process's exports share (the nnef-tools runner's).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import subprocess
import sys
import tempfile
import threading
from typing import Callable

import numpy as np

from t2n.check.child import ChildRun, command
from t2n.check.runner_io import TractRunError, only, read_sets, write_sets


class ServedRunner:
    """One long-lived ``python -m module --serve`` child; ``engine`` names it in errors."""

    def __init__(self, module: str, engine: str, timeout: float | None = 300,
                 idle: float | None = None):
        self.module = module
        self.engine = engine
        self.timeout = timeout
        self.idle = idle  # the child exits after this many seconds without a request
        self._proc = None
        self._dir = tempfile.TemporaryDirectory(prefix="t2n-worker-")
        self._stderr = os.path.join(self._dir.name, "stderr.txt")

    def load(self, archive: str) -> None:
        """Load (parse) the archive without running it: the per-call child with no set."""
        self.run_sets(archive, [])

    def run(self, archive: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return only(self.run_sets(archive, [inputs]))

    def run_sets(self, archive: str, sets: list[list[np.ndarray]]) -> list:
        """Each set's outputs or refusal (:func:`t2n.check.runner_io.read_sets`), the
        archive loaded once; the engine's refusal of the archive, a crash or a hang raise
        :class:`TractRunError`."""
        for name in os.listdir(self._dir.name):
            if name.startswith(("inputs", "outputs")):
                os.remove(os.path.join(self._dir.name, name))
        pairs = write_sets(self._dir.name, sets)
        request = "\t".join([os.path.abspath(archive), *[p for pair in pairs for p in pair]])
        for attempt in range(2):
            mark = self._send(request + "\n")
            ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout)
            if not ready:  # a hung run: killed, the next request gets a fresh child
                self._proc.kill()
                self._proc.wait()
                self._proc = None
                raise TractRunError(f"{self.engine} " + ChildRun(None, "", "", 0.0, self.timeout)
                                    .crash_text(), crashed=True)
            line = self._proc.stdout.readline()
            if line or self._proc.wait() != 0 or attempt:
                break
            self._proc = None  # it left idle as the request came: again, in a fresh child
        if not line:  # the child died on this archive
            return read_sets(pairs, self.engine, f"{self.engine} {self._ended(mark)}")
        if line.startswith("ok"):
            return read_sets(pairs, self.engine, None)
        raise TractRunError(line[4:].strip(), crashed=False)

    def _send(self, request: str) -> int:
        """Send the request to a live child (a fresh one if there is none, or if the last
        one ended since its previous answer); returns where its stderr for it begins."""
        for _ in range(2):
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            mark = os.path.getsize(self._stderr)
            try:
                self._proc.stdin.write(request)
                self._proc.stdin.flush()
                return mark
            except OSError:  # it ended before reading the request: not this archive's doing
                self._proc.wait()
                self._proc = None
        raise TractRunError(f"{self.engine} child exits at start: {self._ended_text()}",
                            crashed=True)

    def start(self) -> None:
        """Start the child unless a live one waits already."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def _start(self) -> None:
        idle = [] if self.idle is None else [str(self.idle)]
        cmd, kw = command(self.module, ["--serve", *idle], self._dir.name)
        with open(self._stderr, "ab") as err:  # appended: each request reads its own part
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=err, text=True, **kw)

    def _ended(self, mark: int) -> str:
        """The crash text of the child that just died (its stderr since ``mark``)."""
        code = self._proc.wait()
        self._proc = None
        with open(self._stderr, errors="replace") as f:
            f.seek(mark)
            return ChildRun(code, "", f.read(), 0.0, self.timeout).crash_text()

    def _ended_text(self) -> str:
        with open(self._stderr, errors="replace") as f:
            return f.read()[-2000:].strip() or "(no message)"

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._dir.cleanup()


def serve(run_sets: Callable[[str, list[tuple[str, str]]], str | None],
          idle: float | None = None) -> int:
    """The child's side: answer each request line on stdin with ``run_sets(archive,
    [(IN, OUT), ...])`` (None, or the engine's refusal of the archive), until stdin closes
    or no request came for ``idle`` seconds (exit code 0 both). Whatever the engine prints
    goes to stderr, so it cannot corrupt an answer."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    while select.select([sys.stdin], [], [], idle)[0]:
        line = sys.stdin.readline()
        if not line:
            break
        archive, *files = line.rstrip("\n").split("\t")
        err = run_sets(archive, list(zip(files[::2], files[1::2])))
        answers.write("ok\n" if err is None else "err " + err.replace("\n", " ") + "\n")
        answers.flush()
    return 0


class SharedRunner:
    """The process's one :class:`ServedRunner` of a runner module, for callers that do not
    hold a worker (every export): started at the first call, its child leaving after
    ``idle`` seconds without a request (so an export leaves no process behind for long)
    and closed at exit. A call made while another thread uses it, or in a forked
    process, runs ``per_call()`` instead (a child of its own, as without sharing)."""

    def __init__(self, module: str, engine: str, idle: float):
        self.module, self.engine, self.idle = module, engine, idle
        self._runner: ServedRunner | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def run_sets(self, archive: str, sets, timeout: float | None, per_call: Callable[[], list]):
        with self._held(timeout) as runner:
            return per_call() if runner is None else runner.run_sets(archive, sets)

    def prestart(self, timeout: float | None) -> None:
        """Start the child now, unless it runs already: an export calls this before it
        captures the model, so the child's interpreter and engine import (0.3 s for tract,
        2-3 s for nnef-tools) overlap the capture instead of following the write."""
        with self._held(timeout) as runner:
            if runner is not None:
                runner.start()

    @contextlib.contextmanager
    def _held(self, timeout: float | None):
        """The served runner (made at the first use), held by this thread; None while
        another thread holds it, or in a forked process."""
        if os.getpid() != self._pid or not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._runner is None:
                self._runner = ServedRunner(self.module, self.engine, timeout, self.idle)
                atexit.register(self.close)
            self._runner.timeout = timeout
            yield self._runner
        finally:
            self._lock.release()

    def close(self) -> None:
        if self._runner is not None and os.getpid() == self._pid:
            self._runner.close()
        self._runner = None
