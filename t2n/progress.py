"""A bytes-written progress bar for long exports, shown on a terminal only.

Writing a multi-gigabyte archive takes seconds to minutes; a bar tells the user the export is
alive. It stays out of the way otherwise: nothing is drawn before the export has run
``delay`` seconds (most exports finish first), nothing when stderr is not a terminal, in CI
(the ``CI`` environment variable that CI services set), or when the user asked for quiet.

The writer drives it through its ``progress`` callback: ``start(total_bytes)`` once, then
``progress(n)`` after every slice of ``n`` bytes written. Only this module's imports are
paid for by ``import t2n.api``: it must stay light.
"""

from __future__ import annotations

import os
import sys
import time

DELAY = 2.0  # seconds of export before the bar may appear
_REDRAW = 0.1  # seconds between redraws
_WIDTH = 28


def wanted(stream=None) -> bool:
    """Auto mode: a bar only on an interactive terminal outside CI."""
    stream = sys.stderr if stream is None else stream
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def for_export(option=None, quiet: bool = False, started: float | None = None):
    """The ``progress`` callback for an export, from the user's options.

    ``option``: None = automatic (terminal, not CI), True = always draw on stderr, False = never,
    or a callable given the bytes written (and ``start(total)`` if it has that method).
    ``quiet=True`` silences the automatic bar and an explicit True alike.
    """
    if callable(option) and not isinstance(option, bool):
        return option
    if option is not None and not isinstance(option, bool):
        from t2n.errors import UsageError

        raise UsageError(f"progress must be None, True, False or a callable, not {option!r}")
    if quiet or option is False:
        return None
    if option is None and not wanted():
        return None
    return Bar(started=started)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 10e9 else f"{n / 1e9:,.2f} GB"


class Bar:
    """``[#####.....]  41%  160.0/400.0 MB  52 MB/s`` redrawn in place on ``stream``."""

    def __init__(self, stream=None, delay: float | None = None, started: float | None = None,
                 clock=time.perf_counter):
        self.stream = sys.stderr if stream is None else stream
        self.delay = DELAY if delay is None else delay
        self.clock = clock
        self.started = clock() if started is None else started
        self.total = 0
        self.done = 0
        self.shown = False
        self._write_start = None
        self._last = float("-inf")
        self._drawn = -1

    def start(self, total: int) -> None:
        self.total = max(0, int(total))
        self.done = 0
        self._write_start = self.clock()

    def __call__(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if now - self.started < self.delay or now - self._last < _REDRAW:
            return
        self._last = now
        self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(1.0, self.done / self.total) if self.total else 0.0
        fill = int(frac * _WIDTH)
        began = self._write_start if self._write_start is not None else self.started
        rate = self.done / max(now - began, 1e-9)
        line = (f"\rt2n: writing [{'#' * fill}{'.' * (_WIDTH - fill)}] {frac:4.0%}  "
                f"{_mb(self.done)}/{_mb(self.total)}  {rate / 1e6:,.0f} MB/s")
        self.stream.write(line)
        self.stream.flush()
        self.shown = True
        self._drawn = self.done

    def close(self) -> None:
        """End the bar's line (only if one was drawn)."""
        if self.shown:
            if self._drawn != self.done:
                self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False
