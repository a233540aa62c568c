"""Seconds per export phase (capture, walk, each pass, write, check).

``ExportResult.phase_seconds`` and ``t2n export --json`` give them, and
``python -m bench.export_bench`` prints them per model, so a slower export shows which phase
grew. A phase nested in another (type completion inside the capture) is counted once: the
outer phase's figure excludes it, and the figures add up to the export's time.

The export opens a :class:`Stopwatch` with :func:`timing`; stages deeper in the pipeline
mark their phases with :func:`phase`, which does nothing outside an export (a pass run from
a test), so no stage has to carry the stopwatch through its arguments.
"""

from __future__ import annotations

import contextlib
import contextvars
import time

_ACTIVE: contextvars.ContextVar["Stopwatch | None"] = contextvars.ContextVar(
    "t2n_stopwatch", default=None)


class Stopwatch:
    """Exclusive seconds per phase name, in the order the phases first ran."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # per open phase: seconds of the phases nested in it

    @contextlib.contextmanager
    def phase(self, name: str):
        self._inner.append(0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            inner = self._inner.pop()
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - inner
            if self._inner:
                self._inner[-1] += spent


@contextlib.contextmanager
def timing(watch: Stopwatch):
    """Make ``watch`` the one :func:`phase` reports to, for the duration of an export."""
    token = _ACTIVE.set(watch)
    try:
        yield watch
    finally:
        _ACTIVE.reset(token)


def phase(name: str):
    """A context manager timing ``name`` on the export's stopwatch (none: does nothing)."""
    watch = _ACTIVE.get()
    return watch.phase(name) if watch is not None else contextlib.nullcontext()


def timed(name: str):
    """Decorate a stage's entry function so that each call is timed as phase ``name``."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            with phase(name):
                return fn(*args, **kwargs)
        return call
    return wrap


def timed_export(fn):
    """Decorate ``t2n.export``: a fresh stopwatch per call, its figures on the result."""
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with timing(Stopwatch()) as watch:
            result = fn(*args, **kwargs)
        result.phase_seconds = dict(watch.seconds)
        return result
    return call
