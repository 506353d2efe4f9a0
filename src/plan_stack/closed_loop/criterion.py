"""Episode success, per robot (no ROS imports).

The criteria read only privileged ground truth the simulators publish, never
the stack's own outputs:

* ALOHA (`transfer_cube`, `insertion`): the staged task reward reaches its
  maximum, 4 (ACT's criterion: the cube held by the left gripper off the
  table; the peg touching the pin), at any time of the episode.
* Franka pick-and-place: the simulator's `success` flag (cube released inside
  the target) is seen true at any time.
* Driving: the episode lasted at least `drive_required_s` of sim time and the
  simulator's safety check (collision or road departure) never fired.

Zero limit violations is a separate gate of every run, not part of success.
"""
from __future__ import annotations

import dataclasses

__all__ = ["ALOHA_MAX_REWARD", "DRIVE_REQUIRED_S", "EpisodeSignals", "Verdict", "judge", "done_early"]

ALOHA_MAX_REWARD = 4
DRIVE_REQUIRED_S = 60.0
ROBOTS = ("aloha", "franka", "drive")


@dataclasses.dataclass
class EpisodeSignals:
    """What the episode monitor saw of the ground truth."""

    sim_time_s: float = 0.0
    max_reward: int | None = None  # ALOHA: highest staged reward seen (None: none received)
    success_flag: bool | None = None  # Franka: any `success` true (None: none received)
    safety_faults: int = 0  # driving: collision / road-departure reports


@dataclasses.dataclass(frozen=True)
class Verdict:
    success: bool
    reason: str


def judge(robot: str, s: EpisodeSignals, drive_required_s: float = DRIVE_REQUIRED_S) -> Verdict:
    """Success or failure of one episode, with the reason in words."""
    if robot == "aloha":
        if s.max_reward is None:
            return Verdict(False, "no ground-truth reward received")
        ok = s.max_reward >= ALOHA_MAX_REWARD
        return Verdict(ok, f"max reward {s.max_reward}/{ALOHA_MAX_REWARD}")
    if robot == "franka":
        if s.success_flag is None:
            return Verdict(False, "no ground-truth success flag received")
        return Verdict(bool(s.success_flag), "cube placed in the target" if s.success_flag else "cube not placed")
    if robot == "drive":
        if s.safety_faults:
            return Verdict(False, f"{s.safety_faults} collision / road-departure report(s)")
        if s.sim_time_s < drive_required_s:
            return Verdict(False, f"drove {s.sim_time_s:.1f} s of the required {drive_required_s:.0f} s")
        return Verdict(True, f"{s.sim_time_s:.1f} s without collision or road departure")
    raise ValueError(f"robot: {robot!r} is not one of {ROBOTS}")


def done_early(robot: str, s: EpisodeSignals) -> bool:
    """The outcome cannot change any more: stop the episode (solved arm task, or a driving fault)."""
    if robot == "aloha":
        return s.max_reward is not None and s.max_reward >= ALOHA_MAX_REWARD
    if robot == "franka":
        return bool(s.success_flag)
    return s.safety_faults > 0
