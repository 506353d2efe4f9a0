"""Trajectory checks: nothing invalid becomes motion.

No ROS imports; every bridge (ALOHA, Franka) and the stitcher use it. A goal is checked in
this order and the first broken rule is reported with a FollowJointTrajectory
error code and a message naming the joint, point and limit:

1. joint names: no duplicates, no unknown joint, none missing (INVALID_JOINTS);
2. at least one point; every number finite; per-point array sizes match;
   `time_from_start` strictly increasing and non-negative (INVALID_GOAL);
3. the reference curve the controller will follow (the same interpolation
   as `joint_trajectory`, starting from the present reference state) stays
   inside position limits and, sampled densely, inside velocity limits, and
   for cubic/quintic curves inside acceleration limits, and jerk limits where
   they are finite (INVALID_GOAL). A
   position-only (linear) trajectory has unbounded acceleration at its knots
   by construction, so only its velocity is checked; send velocities (and
   accelerations) for acceleration-limited motion.

Limits come from the URDF (position, velocity) and the robot config
(acceleration, optional tighter velocity); `trajectory.limits.limits_from_urdf` parses them.
The result codes are FollowJointTrajectory's (`ResultCode`): a `Verdict` carries one, so they live here.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

import numpy as np

from plan_stack.trajectory.core import KnotSamples, Reference, Trajectory, knots_from
from plan_stack.trajectory.limits import Limits, LimitsError

__all__ = [
    "ResultCode", "SUCCESSFUL", "INVALID_GOAL", "INVALID_JOINTS", "OLD_HEADER_TIMESTAMP", "GOAL_TOLERANCE_VIOLATED",
    "Limits", "Verdict", "LimitsError", "check_trajectory", "stop_trajectory",
]

class ResultCode(enum.IntEnum):
    """control_msgs/FollowJointTrajectory result codes (ExecuteTrajectory.Result mirrors them)."""

    SUCCESSFUL = 0
    INVALID_GOAL = -1
    INVALID_JOINTS = -2
    OLD_HEADER_TIMESTAMP = -3
    PATH_TOLERANCE_VIOLATED = -4
    GOAL_TOLERANCE_VIOLATED = -5


SUCCESSFUL = ResultCode.SUCCESSFUL
INVALID_GOAL = ResultCode.INVALID_GOAL
INVALID_JOINTS = ResultCode.INVALID_JOINTS
OLD_HEADER_TIMESTAMP = ResultCode.OLD_HEADER_TIMESTAMP
PATH_TOLERANCE_VIOLATED = ResultCode.PATH_TOLERANCE_VIOLATED
GOAL_TOLERANCE_VIOLATED = ResultCode.GOAL_TOLERANCE_VIOLATED


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Result of a check: `ok`, or the error code and a message saying what broke."""

    ok: bool
    error_code: ResultCode = ResultCode.SUCCESSFUL
    message: str = ""
    #: the refusal concerns the interpolated curve only: names, numbers, timing and every point passed
    curve: bool = False


_OK = Verdict(True)


def _fmt_point(i: int) -> str:
    return f"point {i}"


def _names_verdict(names: Sequence[str], expected_names: Sequence[str]) -> Verdict | None:
    """INVALID_JOINTS when the goal's joints are not exactly the expected set (duplicates, unknown, missing)."""
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        return Verdict(False, INVALID_JOINTS, f"joint_names: duplicate joint(s) {dupes}")
    unknown = [n for n in names if n not in expected_names]
    if unknown:
        return Verdict(False, INVALID_JOINTS,
                       f"joint_names: unknown joint(s) {unknown} (expected {list(expected_names)})")
    missing = [n for n in expected_names if n not in names]
    if missing:
        return Verdict(False, INVALID_JOINTS, f"joint_names: missing joint(s) {missing}")
    return None


def check_trajectory(
    traj: Trajectory,
    expected_names: Sequence[str],
    limits: Limits,
    now_s: float,
    initial: Reference | None = None,
    jump_tolerance: float = 1e-3,
    tolerance: float = 1e-6,
    samples_per_segment: int = 16,
) -> Verdict:
    """Check a goal against names, timing, finiteness and limits (see module doc).

    `traj` keeps the goal's joint order; `limits` are in `expected_names`
    order. `initial` is the reference state the controller is at now; with it,
    the segment from there to the first point is checked too, and a first
    point at time 0 must start within `jump_tolerance` of it. `tolerance` is
    the relative slack on velocity/acceleration limits (numerical noise only).

    Cost: the stitcher runs this on every trajectory it emits, so the common case (joints in the expected
    order, nothing violated) takes a handful of array operations: the interpolated curve's extremes come from
    one matrix product over all segments and joints (`KnotSamples`); samples are laid out in time order only
    to name the first violation.
    """
    names = list(traj.joint_names)
    expected = tuple(expected_names)
    same_order = traj.joint_names == expected and len(set(expected)) == len(expected)
    if not same_order:
        bad_names = _names_verdict(names, expected)
        if bad_names is not None:
            return bad_names
    t = traj.times_s
    for field in ("times_s", "positions", "velocities", "accelerations"):
        arr = getattr(traj, field)
        # a finite sum means every value is finite (NaN and inf propagate); the element test only otherwise
        if arr is not None and not math.isfinite(float(np.add.reduce(arr, axis=None))) \
                and not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(np.atleast_2d(arr.T).T))[0]
            return Verdict(False, INVALID_GOAL, f"{field}: non-finite value at {_fmt_point(int(bad[0]))}")
    if not math.isfinite(traj.stamp_s):
        return Verdict(False, INVALID_GOAL, "header.stamp: non-finite")
    if t[0] < 0:
        return Verdict(False, INVALID_GOAL, "time_from_start: negative time at point 0")
    steps = t[1:] - t[:-1]
    if (steps <= 0).any():
        i = int(np.argmax(steps <= 0)) + 1
        return Verdict(False, INVALID_GOAL,
                       f"time_from_start: not strictly increasing at {_fmt_point(i)} ({t[i - 1]:.6g} -> {t[i]:.6g} s)")

    if same_order:
        pos, vel, acc = traj.positions, traj.velocities, traj.accelerations
    else:
        order = [names.index(n) for n in expected]
        pos = traj.positions[:, order]
        vel = None if traj.velocities is None else traj.velocities[:, order]
        acc = None if traj.accelerations is None else traj.accelerations[:, order]
    lo, hi = limits.q_min, limits.q_max
    outside = (pos < lo - tolerance) | (pos > hi + tolerance)
    if outside.any():  # the first point (then joint) outside, as a loop over the points would find it
        i, j = (int(x) for x in np.argwhere(outside)[0])
        return Verdict(False, INVALID_GOAL,
                       f"positions: {expected[j]} = {pos[i, j]:.6g} at {_fmt_point(i)} "
                       f"is outside [{lo[j]:.6g}, {hi[j]:.6g}]")
    for label, arr, lim in (("velocities", vel, limits.v_max), ("accelerations", acc, limits.a_max)):
        if arr is None:
            continue
        over = np.abs(arr) > lim * (1 + tolerance)
        if over.any():
            i, j = (int(x) for x in np.argwhere(over)[0])
            return Verdict(False, INVALID_GOAL,
                           f"{label}: |{expected[j]}| = {abs(arr[i, j]):.6g} at {_fmt_point(i)} "
                           f"exceeds the limit {lim[j]:.6g}")

    start = traj.start_s(now_s)
    if start + t[-1] < now_s - 1e-9:
        return Verdict(False, OLD_HEADER_TIMESTAMP,
                       f"header.stamp: the trajectory ended {now_s - start - t[-1]:.3f} s ago; "
                       "stale commands are not replayed")
    if initial is not None and start + t[-1] <= now_s + 1e-9:
        # Nothing left in the future: the controller would jump to the last point.
        jump = np.abs(pos[-1] - initial.positions)
        if np.any(jump > jump_tolerance):
            j = int(np.argmax(jump))
            return Verdict(False, INVALID_GOAL,
                           f"positions: the last point is due now but {expected[j]} is {jump[j]:.6g} away from "
                           f"the present reference (> {jump_tolerance}); give it time_from_start > 0")
    ordered = traj if same_order else Trajectory(expected, traj.stamp_s, t, pos, vel, acc)
    times, kp, kv, ka = knots_from(ordered, start, initial, max(now_s, start) if initial is not None else start)
    if len(times) > 1 and ((times[1:] - times[:-1]) <= 0).any():
        return Verdict(False, INVALID_GOAL, "time_from_start: knot times must be strictly increasing")
    mode = ordered.interpolation
    jerk_limited = limits.has_jerk_limits and mode != "linear"
    # jerk inside each segment (cubic: constant; quintic: quadratic); cubic knots jump in acceleration
    curve = KnotSamples(times, kp, kv, ka, mode, samples_per_segment, 4 if jerk_limited else 3)
    mins, maxs = curve.extremes()
    if (mins[0] < lo - tolerance).any() or (maxs[0] > hi + tolerance).any():
        q_s = curve.dense(0)
        j = int(np.argwhere((q_s < lo - tolerance) | (q_s > hi + tolerance))[0][1])
        return Verdict(False, INVALID_GOAL,
                       f"positions: the interpolated {mode} curve leaves [{lo[j]:.6g}, {hi[j]:.6g}] on {expected[j]}",
                       curve=True)
    checks: list[tuple[str, int, np.ndarray]] = [("velocity", 1, limits.v_max)]
    if mode != "linear":
        checks.append(("acceleration", 2, limits.a_max))
    if jerk_limited:
        checks.append(("jerk", 3, limits.j_max))
    for label, k, lim in checks:
        bound = lim * (1 + tolerance)
        if not (np.maximum(maxs[k], -mins[k]) > bound).any():  # NaN extremes compare false, as ever
            continue
        arr = np.abs(curve.dense(k))
        hits = np.argwhere(arr > bound)
        j = int(hits[0][1])  # the first sample in time, then the first joint
        peak = float(arr[:, j].max())
        return Verdict(False, INVALID_GOAL,
                       f"{label}: the interpolated {mode} curve reaches {peak:.6g} on {expected[j]}, "
                       f"above the limit {lim[j]:.6g}", curve=True)
    return _OK


def stop_trajectory(ref: Reference, limits: Limits, scale: float = 0.8, points: int = 8) -> Trajectory:
    """Decelerate every joint from `ref` to rest, synchronised, within `scale` x the acceleration limits.

    All joints stop together after T = max_j |v_j| / (scale * a_max_j); each
    decelerates uniformly (|a_j| = |v_j| / T <= scale * a_max_j), so the stop
    distance is v_j T / 2. Points carry positions and velocities: cubic
    interpolation reproduces a constant-deceleration profile exactly, also
    on the first segment from `ref` (whatever its acceleration was), so the
    reference's |acceleration| never exceeds scale x the limit. Times are
    relative (stamp 0 = now); a joint set already at rest yields one hold point.
    """
    q, v = ref.positions, ref.velocities
    a_stop = scale * limits.a_max
    duration = float(np.max(np.abs(v) / a_stop))
    if duration < 1e-3:
        return Trajectory(limits.joint_names, 0.0, np.array([1e-3]), q[None, :].copy(), np.zeros((1, len(q))))
    t = np.linspace(duration / points, duration, points)
    decel = -v / duration
    pos = q + v * t[:, None] + 0.5 * decel * t[:, None] ** 2
    vel = v + decel * t[:, None]
    vel[-1] = 0.0
    pos = np.clip(pos, limits.q_min, limits.q_max)
    return Trajectory(limits.joint_names, 0.0, t, pos, vel)
