"""Repeated log lines: the first of a run of identical messages is logged at once, its repeats are counted
and summarised at most every `period_s`.

Why: after a fault that lasts (a protective stop, a refused stream), a node refuses every new input for the
same reason, twice a second, until an operator acts. One line per refusal buries the cause and everything
after it in the console; rclpy's `throttle_duration_sec` would hide a *different* reason arriving within the
period. Here a new message is always logged at once, and no repeat goes uncounted. Diagnostics still report
each event (`Diagnostics.report(..., now=True)`); this only shapes the console log.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Default: a repeating message is said again, with its count, at most this often (s of wall time).
REPEAT_LOG_PERIOD_S = 10.0


class RepeatFilter:
    """Decides what to log for one call site: `text = f(message)`, None while it repeats within the period.
    Thread-safe (a node's callbacks may run on several executor threads)."""

    def __init__(self, period_s: float = REPEAT_LOG_PERIOD_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s: expected > 0, got {period_s}")
        self.period_s = float(period_s)
        self._clock = clock
        self._last: str | None = None
        self._said_at = 0.0
        self._repeats = 0
        self._lock = threading.Lock()

    def __call__(self, message: str, key: str | None = None) -> str | None:
        """`message` to log now, or None while it repeats. `key`: what makes two messages the same (default the
        message itself), for messages that carry a changing figure (an age, a count)."""
        with self._lock:
            return self._decide(message, message if key is None else key, self._clock())

    def _decide(self, message: str, key: str, now: float) -> str | None:
        if key != self._last:
            note = "" if not self._repeats else f" (the message before repeated {self._repeats} more time(s))"
            self._last, self._said_at, self._repeats = key, now, 0
            return message + note
        self._repeats += 1
        if now - self._said_at < self.period_s:
            return None
        text = f"{message} (again: {self._repeats} time(s) in the last {now - self._said_at:.0f} s)"
        self._said_at, self._repeats = now, 0
        return text

    def reset(self) -> None:
        """Forget the last message (the fault was cleared): its next occurrence is logged at once."""
        with self._lock:
            self._last, self._repeats = None, 0
