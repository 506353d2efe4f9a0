"""Per-stream health: rate, age, counts, drops by reason, timeout.

What the operator of *FluxVLA Engine: A One-Stop VLA Engineering Platform for Embodied
Intelligence* monitors (its runner/operator split: availability, freshness,
update rate, missing/stale inputs reported explicitly), kept ROS-free so the
rules are unit-tested; the node turns `Health` into diagnostics. Times are
seconds on the caller's clock (the node clock, so sim time works: a paused
simulator does not time out).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Any

__all__ = ["Level", "Health", "StreamMonitor"]


class Level(enum.IntEnum):
    OK = 0
    WARN = 1
    ERROR = 2


@dataclasses.dataclass(frozen=True)
class Health:
    level: Level
    message: str
    values: dict[str, Any]  # diagnostic key -> value (published as text)


class StreamMonitor:
    """Counters and timeout state of one input stream.

    A stream is timed out when nothing (valid or not) arrived for longer
    than `timeout_s`, or when it never sent anything `timeout_s` after
    `start(now)`; it recovers with its next valid message. A bad input
    (malformed, non-finite, clock-inconsistent) turns the status to WARN
    until the next `health()` call after a clean period.
    """

    def __init__(self, name: str, timeout_s: float, rate_window_s: float = 2.0) -> None:
        self.name = name
        self.timeout_s = float(timeout_s)
        self._window_s = float(rate_window_s)
        self._arrivals: collections.deque[float] = collections.deque()
        self.received = 0
        self.used = 0  # frames that went into a published Observation
        self.drops: collections.Counter[str] = collections.Counter()
        self.last_arrival_s: float | None = None
        self.last_valid_s: float | None = None
        self.last_stamp_s: float | None = None
        self._start_s: float | None = None
        self._warning: str | None = None  # latest bad-input reason since the last health()

    def start(self, now_s: float) -> None:
        """Begin the silence clock (a stream that never speaks times out too)."""
        self._start_s = now_s

    def reset_clock(self, now_s: float) -> None:
        """After a clock reset: forget arrival times taken on the old time line."""
        self._arrivals.clear()
        self.last_arrival_s = self.last_valid_s = None
        self._start_s = now_s

    def arrived(self, now_s: float) -> None:
        self.received += 1
        self.last_arrival_s = now_s
        self._arrivals.append(now_s)
        while self._arrivals and self._arrivals[0] < now_s - self._window_s:
            self._arrivals.popleft()

    def valid(self, now_s: float, stamp_s: float) -> None:
        self.last_valid_s = now_s
        self.last_stamp_s = stamp_s

    def dropped(self, reason: str, bad_input: str | None = None) -> None:
        """Count a drop; `bad_input` (the explanation) also raises a WARN."""
        self.drops[reason] += 1
        if bad_input is not None:
            self._warning = bad_input

    def rate_hz(self, now_s: float) -> float:
        recent = [t for t in self._arrivals if t >= now_s - self._window_s]
        if len(recent) < 2:
            return 0.0
        span = recent[-1] - recent[0]
        return (len(recent) - 1) / span if span > 0 else 0.0

    def silent_s(self, now_s: float) -> float:
        """Time since the last valid message (or since `start`)."""
        ref = self.last_valid_s if self.last_valid_s is not None else self._start_s
        return 0.0 if ref is None else max(0.0, now_s - ref)

    def timed_out(self, now_s: float) -> bool:
        return self.silent_s(now_s) > self.timeout_s

    def health(self, now_s: float) -> Health:
        """Current level with a message; consumes the pending bad-input warning.

        `age_s` is the time since the last valid message arrived; `stamp_age_s`
        is clock − its stamp (how old the newest data is).
        """
        age = "" if self.last_valid_s is None else f"{now_s - self.last_valid_s:.3f}"
        values = {
            "rate_hz": f"{self.rate_hz(now_s):.2f}",
            "age_s": age,
            # clock - stamp of the newest valid message: transport + driver latency
            "stamp_age_s": "" if self.last_stamp_s is None else f"{now_s - self.last_stamp_s:.3f}",
            "received": str(self.received),
            "used": str(self.used),
            "dropped": str(sum(self.drops.values())),
            **{f"dropped_{k}": str(v) for k, v in sorted(self.drops.items())},
        }
        if self.timed_out(now_s):
            what = "no message yet" if self.last_valid_s is None else "no valid message"
            level, message = Level.ERROR, f"{what} for {self.silent_s(now_s):.2f} s (timeout {self.timeout_s:g} s)"
        elif self._warning is not None:
            level, message = Level.WARN, f"dropped bad input: {self._warning}"
        else:
            level, message = Level.OK, "ok"
        self._warning = None
        return Health(level, message, values)
