"""Episode success (no ROS imports): the criteria, and which robot uses which.

Each robot's profile (`plan_stack.robots`) names its criterion kind in
`episode.success_criterion`; the kinds are in `CRITERIA`. The
criteria read only privileged ground truth the simulators publish, never
the stack's own outputs:

* `staged_reward` (ALOHA, `transfer_cube` and `insertion`): the staged task
  reward reaches its maximum, 4 (ACT's criterion: the cube held by the left gripper off the
  table; the peg touching the pin), at any time of the episode.
* `success_flag` (Franka pick-and-place): the simulator's `success` flag (cube released inside
  the target) is seen true at any time.
* `safe_driving` (driving): the episode lasted at least `required_s` (60 s) of sim time, the
  simulator's safety check (collision or road departure) never fired, and the car covered at least
  `min_distance_m` (240 m, half the scripted driver's distance; the simulator's own odometry).

Zero limit violations is a separate gate of every run, not part of success.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from plan_stack.robots import profile

__all__ = ["ALOHA_MAX_REWARD", "DRIVE_REQUIRED_S", "DRIVE_MIN_DISTANCE_M",
           "CRITERIA", "Criterion", "StagedReward", "SuccessFlag",
           "SafeDriving", "EpisodeSignals", "Verdict", "criterion_of", "judge", "done_early"]

ALOHA_MAX_REWARD = 4
DRIVE_REQUIRED_S = 60.0
#: safe driving must also get somewhere: half of what the scripted driver covers in 60 s at its 8 m/s (a car
#: that never leaves its start, e.g. because the bridge refuses every plan, drives safely but does not drive)
DRIVE_MIN_DISTANCE_M = 240.0


@dataclasses.dataclass
class EpisodeSignals:
    """What the episode monitor saw of the ground truth."""

    sim_time_s: float = 0.0
    max_reward: int | None = None  # staged reward: highest seen (None: none received)
    success_flag: bool | None = None  # success flag: any `success` true (None: none received)
    safety_faults: int = 0  # safe driving: collision / road-departure reports
    distance_m: float = 0.0  # safe driving: path length of the ego (odometry)


@dataclasses.dataclass(frozen=True)
class Verdict:
    success: bool
    reason: str


class Criterion:
    """One kind of success criterion: the verdict, whether the outcome is settled, extra row fields."""

    kind = ""

    def judge(self, s: EpisodeSignals) -> Verdict:
        raise NotImplementedError

    def done_early(self, s: EpisodeSignals) -> bool:
        """The outcome cannot change any more: the episode may stop."""
        raise NotImplementedError

    def row(self, s: EpisodeSignals) -> dict[str, Any]:
        """Fields of the episode's JSON row that only this criterion has."""
        return {}


@dataclasses.dataclass(frozen=True)
class StagedReward(Criterion):
    """The staged task reward reaches `max_reward` at any time (`/ground_truth/reward`)."""

    max_reward: int = ALOHA_MAX_REWARD
    kind = "staged_reward"

    def judge(self, s: EpisodeSignals) -> Verdict:
        if s.max_reward is None:
            return Verdict(False, "no ground-truth reward received")
        return Verdict(s.max_reward >= self.max_reward, f"max reward {s.max_reward}/{self.max_reward}")

    def done_early(self, s: EpisodeSignals) -> bool:
        return s.max_reward is not None and s.max_reward >= self.max_reward

    def row(self, s: EpisodeSignals) -> dict[str, Any]:
        return {"max_reward": s.max_reward}


@dataclasses.dataclass(frozen=True)
class SuccessFlag(Criterion):
    """The simulator's `success` flag is seen true at any time (`/ground_truth/success`)."""

    kind = "success_flag"

    def judge(self, s: EpisodeSignals) -> Verdict:
        if s.success_flag is None:
            return Verdict(False, "no ground-truth success flag received")
        return Verdict(bool(s.success_flag), "cube placed in the target" if s.success_flag else "cube not placed")

    def done_early(self, s: EpisodeSignals) -> bool:
        return bool(s.success_flag)


@dataclasses.dataclass(frozen=True)
class SafeDriving(Criterion):
    """At least `required_s` of sim time without a safety fault (ERROR `<sim>: safety` diagnostics), over
    at least `min_distance_m` (odometry path length)."""

    required_s: float = DRIVE_REQUIRED_S
    min_distance_m: float = DRIVE_MIN_DISTANCE_M
    kind = "safe_driving"

    def judge(self, s: EpisodeSignals) -> Verdict:
        if s.safety_faults:
            return Verdict(False, f"{s.safety_faults} collision / road-departure report(s)")
        if s.sim_time_s < self.required_s:
            return Verdict(False, f"drove {s.sim_time_s:.1f} s of the required {self.required_s:.0f} s")
        # scaled with the required time, so a shortened episode (`drive_required_s`) asks for as much speed
        needed = self.min_distance_m * self.required_s / DRIVE_REQUIRED_S
        if s.distance_m < needed:
            return Verdict(False, f"covered {s.distance_m:.0f} m in {s.sim_time_s:.1f} s, less than the "
                                  f"required {needed:.0f} m")
        return Verdict(True, f"{s.sim_time_s:.1f} s and {s.distance_m:.0f} m without collision or road departure")

    def row(self, s: EpisodeSignals) -> dict[str, Any]:
        return {"distance_m": round(s.distance_m, 1)}

    def done_early(self, s: EpisodeSignals) -> bool:
        return s.safety_faults > 0


#: criterion kind -> criterion (a robot's profile names its kind)
CRITERIA: dict[str, Criterion] = {c.kind: c for c in (StagedReward(), SuccessFlag(), SafeDriving())}


def criterion_of(robot: str) -> Criterion:
    """The success criterion of `robot` (ConfigError, a ValueError, for an unknown robot or kind)."""
    from plan_stack.config import ConfigError

    kind = profile(robot).episode.success_criterion
    if kind not in CRITERIA:
        raise ConfigError(f"robot: {robot}'s success_criterion {kind!r} is not one of {sorted(CRITERIA)}")
    return CRITERIA[kind]


def judge(robot: str, s: EpisodeSignals, drive_required_s: float | None = None) -> Verdict:
    """Success or failure of one episode, with the reason in words (`drive_required_s` overrides the
    duration a safe-driving criterion asks for)."""
    crit = criterion_of(robot)
    if drive_required_s is not None and isinstance(crit, SafeDriving):
        crit = dataclasses.replace(crit, required_s=drive_required_s)
    return crit.judge(s)


def done_early(robot: str, s: EpisodeSignals) -> bool:
    """The outcome cannot change any more: stop the episode (solved arm task, or a driving fault)."""
    return criterion_of(robot).done_early(s)
