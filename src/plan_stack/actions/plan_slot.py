"""The plan features the chunker conditions on, without ROS: the newest, checked, and how far from an
observation they may be stamped.

The planner publishes features [tokens, width] for each plan, stamped with the observation it planned
from; the chunker conditions every chunk on the newest. Features that cannot be used are refused and empty
the slot, so no chunk is computed from older ones meanwhile: a wrong shape or width, non-finite values, a
stamp more than `max_plan_age_s` ahead of the node clock (a wrong clock, or from before a simulator reset).
An observation is answered only with features stamped within `max_plan_age_s` of it, either way.

Thread-safe: the plan callback offers, the observation callback takes and the clock-reset callback drops,
each possibly on its own executor thread.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import numpy as np

__all__ = ["NoPlan", "PlanSlot"]


@dataclasses.dataclass(frozen=True)
class NoPlan:
    """Why an observation gets no plan features (and so no chunk)."""

    reason: str
    #: features are there, but stamped more than max_plan_age_s from the observation (their age in s, observation
    #: stamp minus plan stamp); None: there are none
    age_s: float | None = None
    #: none yet: the planner has sent none since start-up or since the slot was cleared (a clock reset); no fault
    waiting: bool = False


class PlanSlot:
    """The newest usable plan features of width `width` (the head's condition width)."""

    def __init__(self, width: int, max_plan_age_s: float) -> None:
        self.width = int(width)
        self.max_plan_age_s = float(max_plan_age_s)
        self._lock = threading.Lock()
        self._plan: tuple[float, np.ndarray] | None = None  # (plan stamp s, [K, W])
        self._problem = "no plan features received yet"
        self._waiting = True  # empty because none came yet (start-up, a clock reset), not because some were refused

    @property
    def problem(self) -> str:
        """Why the slot is empty ("" when it holds features)."""
        with self._lock:
            return self._problem

    @property
    def plan(self) -> tuple[float, np.ndarray] | None:
        """(plan stamp s, features [K, W]) held now, or None."""
        with self._lock:
            return self._plan

    def offer(self, shape: Sequence[int], data: Sequence[float] | np.ndarray, stamp_s: float, now_s: float) -> str:
        """New features (`data` flat, of `shape`) stamped `stamp_s`, arriving at node time `now_s`: kept, and ""
        returned, or refused with the reason (and the slot emptied with it)."""
        shape = tuple(shape)
        data = np.asarray(data, dtype=np.float32)
        reason = ""
        if len(shape) != 2 or shape[0] < 1 or shape[1] != self.width or data.size != shape[0] * shape[1]:
            reason = (f"plan features of shape {list(shape)} with {data.size} values; expected "
                      f"[tokens >= 1, {self.width}]")
        elif not np.all(np.isfinite(data)):
            reason = "plan features contain non-finite values"
        elif stamp_s - now_s > self.max_plan_age_s:  # stamped in the future: a wrong clock, or from before a reset
            reason = (f"plan features stamped {stamp_s - now_s:.3f} s ahead of the node clock (max_plan_age_s "
                      f"{self.max_plan_age_s})")
        if reason:
            self.drop(reason)
            return reason
        with self._lock:
            self._plan = (stamp_s, data.reshape(shape))
            self._problem = ""
            self._waiting = False
        return ""

    def drop(self, reason: str, waiting: bool = False) -> None:
        """Empty the slot (refused features, a clock reset); `reason` is what observations are told. `waiting`:
        no fault, new features are merely to come (a clock reset)."""
        with self._lock:
            self._plan = None
            self._problem = reason
            self._waiting = waiting

    def take(self, t_query_s: float) -> np.ndarray | NoPlan:
        """The features [K, W] for an observation stamped `t_query_s`, or why there are none for it."""
        with self._lock:
            plan, problem, waiting = self._plan, self._problem, self._waiting
        if plan is None:
            return NoPlan(problem or "no plan features", waiting=waiting)
        age = t_query_s - plan[0]
        if abs(age) > self.max_plan_age_s:
            when = f"{age:.3f} s old at" if age > 0 else f"stamped {-age:.3f} s after"
            return NoPlan(f"plan features are {when} the observation (max_plan_age_s {self.max_plan_age_s})", age)
        return plan[1]
