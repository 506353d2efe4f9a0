"""Pacing a simulator to the stack it drives (no ROS imports).

A simulator that runs on the wall clock leaves a slow machine's planner
seconds of sim time behind: its plans arrive stale and the closed loop
measures the machine's load, not the stack. `StackPacer` holds sim time
within a *lead* of the stack's latest answers instead: one gate per answer
stream (e.g. action chunks, plans), each answer carrying the stamp of the
observation it was computed from. Sim time may pass `stamp + lead` of no
gate. The simulator then runs as fast as the slowest gate allows (and never
faster than its real-time factor), so every node sees the same sim-time
latencies whatever the load.

Start-up: before a gate has answered once, its stamp counts as 0 (the
simulator waits at `lead` until the stack answers; the simulator node starts
its clock only once the stack's topics are matched, so the first frames are
not lost to discovery). A gate that keeps the simulator waiting for more
than `timeout_s` of wall time is *bypassed* (the simulator runs unpaced by
it) until it answers again, so a stack that stops answering (or lost the
frames it would answer) cannot freeze the robot's world; `bypassed` says
which.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

from plan_stack.config import param

__all__ = ["PacingConfig", "RealTimePace", "StackPacer"]


@dataclasses.dataclass(frozen=True)
class PacingConfig:
    """The simulator parameters that pace it to the stack (0 = off); every simulator's config extends it."""

    pace_chunk_lead_s: float = param("sim time stays within this lead (s) of the newest action_chunk's observation "
                                     "stamp (0 = not paced to chunks)", 0.0, min=0.0, max=60.0, read_only=True)
    pace_plan_lead_s: float = param("sim time stays within this lead (s) of the newest plan's observation stamp "
                                    "(0 = not paced to plans)", 0.0, min=0.0, max=60.0, read_only=True)
    max_catch_up_s: float = param("a simulator that fell behind its real-time factor by up to this much (wall s) "
                                  "catches up; further behind, it re-anchors its pace instead: a burst of sim time "
                                  "would age every command in flight by as much", 0.05, min=0.0, max=10.0,
                                  read_only=True)
    pace_timeout_s: float = param("a paced answer stream silent this long (wall s) after its first answer is no "
                                  "longer waited for, until it answers again", 10.0, min=0.1, max=3600.0,
                                  read_only=True)


class RealTimePace:
    """Sim time paced to `real_time_factor` x wall time (0 = as fast as possible).

    A simulator that falls behind (a slow step, a render, a loaded machine) catches up by at most
    `max_catch_up_s` of wall time; further behind, it re-anchors instead. Catching up is a burst of sim time
    run faster than the factor, and every command then in flight between the stack's processes ages by as
    much sim time while it is delivered: a 0.5 s burst turned trajectories sent with a 0.1 s lead into
    joins 0.3 s in the past (docs/decisions/0013-planner-own-process-and-priorities.md).
    """

    def __init__(self, real_time_factor: float, max_catch_up_s: float, sim_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if real_time_factor < 0 or max_catch_up_s < 0:
            raise ValueError("real_time_factor and max_catch_up_s must be >= 0")
        self.max_catch_up_s = float(max_catch_up_s)
        self._clock = clock
        self.rtf = float(real_time_factor)
        self.reanchor(sim_s)

    def reanchor(self, sim_s: float, real_time_factor: float | None = None) -> None:
        """Pace anew from sim time `sim_s` now (after a wait, a reset or a new factor): nothing to catch up."""
        if real_time_factor is not None:
            if real_time_factor < 0:
                raise ValueError("real_time_factor must be >= 0")
            self.rtf = float(real_time_factor)
        self._wall0, self._sim0 = self._clock(), float(sim_s)

    def after_step(self, sim_s: float) -> float:
        """Wall seconds to sleep before the next step, sim time now being `sim_s` (re-anchors when too far behind)."""
        if self.rtf <= 0:
            return 0.0
        ahead = (sim_s - self._sim0) / self.rtf - (self._clock() - self._wall0)
        if ahead > 0:
            return ahead
        if ahead < -self.max_catch_up_s:
            self.reanchor(sim_s)
        return 0.0


class StackPacer:
    """Sim-time limit from the latest answer stamps of a few gates (thread-safe)."""

    def __init__(self, names: Sequence[str], leads_s: Sequence[float], timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if len(names) != len(leads_s):
            raise ValueError("names and leads_s must have the same length")
        if any(lead <= 0 for lead in leads_s) or timeout_s <= 0:
            raise ValueError("leads and the timeout must be positive")
        self.names = tuple(names)
        self.leads_s = tuple(float(x) for x in leads_s)
        self.timeout_s = float(timeout_s)
        self._clock = clock
        self._stamp = [0.0] * len(names)
        self._answered = [False] * len(names)
        self._bypassed = [False] * len(names)
        self._cond = threading.Condition()
        self.waited_s = 0.0  # total wall time spent waiting for the stack

    def ack(self, name: str, stamp_s: float) -> None:
        """The stack answered on gate `name` for the observation stamped `stamp_s` (sim s)."""
        i = self.names.index(name)
        with self._cond:
            self._answered[i] = True
            self._bypassed[i] = False
            self._stamp[i] = max(self._stamp[i], float(stamp_s))
            self._cond.notify_all()

    def reset(self) -> None:
        """Forget every answer (sim time restarted)."""
        with self._cond:
            self._stamp = [0.0] * len(self.names)
            self._answered = [False] * len(self.names)
            self._bypassed = [False] * len(self.names)
            self._cond.notify_all()

    def limit_s(self) -> float:
        """Sim time the simulator may not reach: min over paced gates of stamp + lead."""
        with self._cond:
            return self._limit()

    def _limit(self) -> float:
        limits = [s + lead for s, lead, b in zip(self._stamp, self.leads_s, self._bypassed) if not b]
        return min(limits) if limits else float("inf")

    @property
    def bypassed(self) -> tuple[str, ...]:
        with self._cond:
            return tuple(n for n, b in zip(self.names, self._bypassed) if b)

    def wait(self, t_s: float, running: Callable[[], bool], poll_s: float = 0.1) -> bool:
        """Block until sim time `t_s` is below the limit; False if `running()` turned false meanwhile.

        Gates that have answered and then stay silent past `timeout_s` are bypassed (see module doc).
        """
        begin = start = self._clock()
        with self._cond:
            while t_s >= self._limit():
                if not running():
                    return False
                now = self._clock()
                if now - start > self.timeout_s:
                    for i, (s, lead) in enumerate(zip(self._stamp, self.leads_s)):
                        if not self._bypassed[i] and t_s >= s + lead:
                            self._bypassed[i] = True
                    start = now
                    continue
                self._cond.wait(poll_s)
            self.waited_s += self._clock() - begin
        return True
