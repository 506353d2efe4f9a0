"""What an episode's monitor counts and keeps of the graph it observes, and the row it makes of them (no ROS).

The episode monitor (`episode._Monitor`) converts each message it receives to plain values and hands them
here; this module decides what they mean for the episode's row:

* counts of observations, plans, chunks, trajectories, bridge commands and refusals;
* limit violations: every `/trajectory` checked against the bridge's own limits (`check_trajectory`; a
  malformed one counts too), the measured arm joints against their URDF position limits (within
  `STATE_POSITION_SLACK`) and velocity limits (times `STATE_VELOCITY_FACTOR`); the first one is kept as text;
* the ground truth the success criterion reads (`EpisodeSignals`: sim time, reward, success flag, odometry
  distance, safety faults);
* what the nodes' diagnostics say: the simulator's `safety` faults (each distinct one once, however often it
  is republished), the bridge's protective stop and its own count of refused commands (an arm bridge's
  `commands` status; the driving bridge's `plans` status counts its rejected and its stale plans), the
  stitcher's counters (the largest seen: they only grow);
* the largest distance of an arm joint from where it was first measured (did the robot move at all).

Thread-safe: the monitor's executor calls it from several threads.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from plan_stack.eval.episodes.criterion import EpisodeSignals, criterion_of
from plan_stack.trajectory.checks import check_trajectory
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import Limits

__all__ = ["EpisodeTally", "STATE_POSITION_SLACK", "STATE_VELOCITY_FACTOR", "STITCHER_COUNTERS"]

#: Slack on the measured joint state before it counts as outside its URDF limit (rad, rad/s factor).
STATE_POSITION_SLACK = 0.01
STATE_VELOCITY_FACTOR = 1.1
#: The stitcher's diagnostic counters copied into the row as `stitcher_<name>` (None: never reported):
#: chunks it rejected (e.g. arm samples beyond the position range), reference samples it clamped (grippers
#: past their end stops), and how often it stitched onto what the bridge executes after a refusal.
STITCHER_COUNTERS = ("rejected", "clamped_samples", "reanchored", "failed")
#: Characters of a node's message kept in the row (the first rejection, fault, protective stop).
_TEXT_CHARS = 300


@dataclasses.dataclass(frozen=True)
class _StateLimits:
    """The arm joints' position and velocity limits (grippers are not checked)."""

    names: list[str]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray

    @classmethod
    def of(cls, lim: Limits) -> _StateLimits:
        arms = [i for i, n in enumerate(lim.joint_names) if not n.endswith("_gripper")]
        return cls([lim.joint_names[i] for i in arms], lim.q_min[arms], lim.q_max[arms], lim.v_max[arms])


class EpisodeTally:
    """One episode's bookkeeping. `sim` and `bridge` are the simulator's and the bridge's node names; `limits`
    the bridge's joint limits in stack units (None: the bridge is not joint space, e.g. driving, where the
    bridge's own DriveTrajectory answers are the trajectories); `check_joint_states`: whether the measured
    joint states are checked against them."""

    def __init__(self, robot: str, sim: str, bridge: str, limits: Limits | None, check_joint_states: bool,
                 driving: bool) -> None:
        self.robot, self.sim, self.bridge = robot, sim, bridge
        self.limits, self.driving = limits, driving
        self._state_limits = _StateLimits.of(limits) if limits is not None and check_joint_states else None
        self._lock = threading.Lock()
        self.sig = EpisodeSignals()
        self.counts = dict(observations=0, plans=0, plan_features=0, chunks=0, trajectories=0, bridge_commands=0,
                           bridge_rejections=0, trajectory_limit_violations=0, state_limit_violations=0)
        self.first_violation: str | None = None
        self.first_rejection: str | None = None
        self.safety_reports: list[str] = []  # distinct ERROR `<sim>: safety` messages (collisions), in order
        self.protective_stop: str | None = None  # the bridge's first ERROR `<bridge>: protective_stop` message
        self.stitcher_counts: dict[str, int] = {}  # the stitcher's own counters, from its newest diagnostics
        self.bridge_refused = 0  # the bridge's own count of refused commands (`commands`) or rejected plans (`plans`)
        self.bridge_stale: int | None = None  # the driving bridge's count of stale plans (None: never reported)
        self.q_first: np.ndarray | None = None  # first measured arm joints
        self.travel_joint: str | None = None
        self.travel = 0.0  # largest distance of an arm joint from its first measured position (rad)
        self.last_xy: np.ndarray | None = None  # driving: the newest odometry position

    # --- what the monitor saw ---------------------------------------------------------------

    def count(self, key: str, k: int = 1) -> None:
        with self._lock:
            self.counts[key] += k

    def clock(self, t_s: float) -> None:
        """A /clock message: sim time (never goes back here)."""
        with self._lock:
            self.sig.sim_time_s = max(self.sig.sim_time_s, t_s)

    def trajectory(self, read: Callable[[], Trajectory]) -> None:
        """A /trajectory message; `read()` converts it (raising for a malformed one: a violation too)."""
        self.count("trajectories")
        if self.limits is None:
            return
        try:
            traj = read()
            verdict = check_trajectory(traj, self.limits.joint_names, self.limits, now_s=traj.stamp_s)
            ok, why = verdict.ok, verdict.message
        except Exception as exc:  # a malformed trajectory is a violation too
            ok, why = False, str(exc)
        if not ok:
            self.count("trajectory_limit_violations")
            with self._lock:
                self.first_violation = self.first_violation or f"trajectory: {why}"

    def odometry(self, x: float, y: float) -> None:
        """Driving: the ego's position; the path length adds up (a non-finite position is skipped)."""
        xy = np.array([x, y])
        if not np.all(np.isfinite(xy)):
            return
        with self._lock:
            if self.last_xy is not None:
                self.sig.distance_m += float(np.linalg.norm(xy - self.last_xy))
            self.last_xy = xy

    def joint_state(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float],
                    stamp_s: float) -> None:
        """A joint_states message (joint units): arm travel, and the arm joints against their URDF limits."""
        lim = self._state_limits
        if lim is None:
            return
        names = list(names)
        try:
            idx = [names.index(j) for j in lim.names]
        except ValueError:
            return
        q = np.asarray(position, dtype=float)[idx]
        with self._lock:
            if self.q_first is None:
                self.q_first = q.copy()
            d = np.abs(q - self.q_first)
            if float(np.max(d)) > self.travel:
                self.travel, self.travel_joint = float(np.max(d)), lim.names[int(np.argmax(d))]
        bad = (q < lim.lower - STATE_POSITION_SLACK) | (q > lim.upper + STATE_POSITION_SLACK)
        v = None
        if len(velocity) == len(names):
            v = np.abs(np.asarray(velocity, dtype=float)[idx])
            bad |= v > lim.velocity * STATE_VELOCITY_FACTOR
        if np.any(bad):
            j = int(np.flatnonzero(bad)[0])
            self.count("state_limit_violations")
            speed = "" if v is None else f", {v[j]:.3f} rad/s (limit {lim.velocity[j]:.3f})"
            with self._lock:
                self.first_violation = self.first_violation or (
                    f"joint_states: {lim.names[j]} at {q[j]:.4f} rad{speed}, sim time "
                    f"{stamp_s:.3f} s: outside its URDF limits or too fast")

    def log(self, node: str, text: str) -> None:
        """A /rosout line: the bridge's `rejected ...` lines are counted, the first kept."""
        if node.endswith(self.bridge) and "rejected" in text:
            self.count("bridge_rejections")
            with self._lock:
                self.first_rejection = self.first_rejection or text[:_TEXT_CHARS]

    def reward(self, reward: int) -> None:
        with self._lock:
            self.sig.max_reward = max(self.sig.max_reward or 0, int(reward))

    def success(self, flag: bool) -> None:
        with self._lock:
            self.sig.success_flag = bool(self.sig.success_flag) or bool(flag)

    def diagnostic(self, name: str, error: bool, message: str, values: Iterable[tuple[str, str]]) -> None:
        """One /diagnostics status (`error`: its level is ERROR; `values`: its key/value pairs)."""
        if name.startswith(f"{self.sim}: safety") and error:
            with self._lock:  # the periodic republication of a fault already counted is not a new one
                if message not in self.safety_reports:
                    self.safety_reports.append(message)
                    self.sig.safety_faults = len(self.safety_reports)
        elif name == f"{self.bridge}: protective_stop" and error:
            with self._lock:
                self.protective_stop = self.protective_stop or message[:_TEXT_CHARS]
        elif name == f"{self.bridge}: commands":
            refused = next((int(v) for k, v in values if k == "refused" and v.isdigit()), 0)
            with self._lock:  # the bridge logs one line per run of repeated refusals; it counts every one
                self.bridge_refused = max(self.bridge_refused, refused)
        elif name == f"{self.bridge}: plans":  # the driving bridge: plans by outcome, counted since it started
            found = {k: int(v) for k, v in values if k in ("rejected", "stale") and v.isdigit()}
            with self._lock:
                self.bridge_refused = max(self.bridge_refused, found.get("rejected", 0))
                if "stale" in found:
                    self.bridge_stale = max(self.bridge_stale or 0, found["stale"])
        elif name.startswith("stitcher: "):
            found = {k: int(v) for k, v in values if k in STITCHER_COUNTERS and v.isdigit()}
            with self._lock:
                for key, value in found.items():  # counters only grow: keep the largest seen
                    self.stitcher_counts[key] = max(value, self.stitcher_counts.get(key, 0))

    # --- the row --------------------------------------------------------------------------

    def signals(self) -> EpisodeSignals:
        """A copy of the ground truth seen so far (for the success criterion and progress)."""
        with self._lock:
            return dataclasses.replace(self.sig)

    def row(self) -> dict[str, Any]:
        """The episode row's monitor fields, in the row's order, ending with the success criterion's own."""
        with self._lock:
            counts = dict(self.counts)
            counts["bridge_rejections"] = max(counts["bridge_rejections"], self.bridge_refused)
            first_violation, first_rejection = self.first_violation, self.first_rejection
            sig = dataclasses.replace(self.sig)
        out: dict[str, Any] = dict(counts)
        out["limit_violations"] = counts["trajectory_limit_violations"] + counts["state_limit_violations"]
        # driving: every DriveTrajectory is the bridge's own output (a refused plan publishes none)
        out["bridge_accepted"] = counts["trajectories"] - (0 if self.driving else counts["bridge_rejections"])
        with self._lock:
            out["bridge_stale"] = self.bridge_stale  # plans the driving bridge dropped as stale (None: not reported)
        out["joint_travel_rad"] = round(self.travel, 4)
        out["joint_travel_joint"] = self.travel_joint
        out["first_violation"] = first_violation
        out["first_rejection"] = first_rejection
        with self._lock:
            out["safety_faults"] = len(self.safety_reports)  # ALOHA: arm collisions; driving: collision/departure
            out["first_safety_fault"] = self.safety_reports[0][:_TEXT_CHARS] if self.safety_reports else None
            out["protective_stop"] = self.protective_stop  # the bridge held the arms: a collision (ALOHA)
            out.update({f"stitcher_{k}": self.stitcher_counts.get(k) for k in STITCHER_COUNTERS})
        out.update(criterion_of(self.robot).row(sig))
        return out
