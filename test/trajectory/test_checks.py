"""trajectory.checks: every rule reports its error code and names what broke."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.trajectory.checks import (
    INVALID_GOAL,
    INVALID_JOINTS,
    OLD_HEADER_TIMESTAMP,
    LimitsError,
    check_trajectory,
)
from plan_stack.trajectory.core import Reference, Trajectory
from plan_stack.trajectory.limits import Limits, limits_from_urdf

NAMES = ("j1", "j2")
LIMITS = Limits.for_joints(NAMES, np.array([-1.0, -2.0]), np.array([1.0, 2.0]), np.array([1.0, 2.0]),
                           np.array([4.0, 8.0]))
REST = Reference(np.zeros(2), np.zeros(2), np.zeros(2), False)


def check(times, pos, vel=None, acc=None, names=NAMES, stamp=0.0, now=10.0, initial=REST):
    t = Trajectory(names, stamp, np.array(times, float), np.array(pos, float),
                   None if vel is None else np.array(vel, float), None if acc is None else np.array(acc, float))
    return check_trajectory(t, NAMES, LIMITS, now, initial, jump_tolerance=0.01)


def test_valid_trajectory_passes():
    v = check([1.0, 2.0], [[0.3, 0.3], [0.5, 0.5]], [[0.3, 0.3], [0, 0]], [[0, 0], [0, 0]])
    assert v.ok, v.message


@pytest.mark.parametrize("names, code, text", [
    (("j1", "j1"), INVALID_JOINTS, "duplicate"),
    (("j1", "x"), INVALID_JOINTS, "unknown joint"),
    (("j1",), INVALID_JOINTS, "missing joint"),
])
def test_names(names, code, text):
    pos = [[0.1] * len(names)]
    v = check([1.0], pos, names=names)
    assert (v.ok, v.error_code) == (False, code) and text in v.message


@pytest.mark.parametrize("times, pos, vel, text", [
    ([1.0, 1.0], [[0, 0], [0.1, 0.1]], None, "strictly increasing"),
    ([1.0, 0.5], [[0, 0], [0.1, 0.1]], None, "strictly increasing"),
    ([-0.1], [[0, 0]], None, "negative"),
    ([1.0], [[math.nan, 0]], None, "non-finite"),
    ([math.inf], [[0, 0]], None, "non-finite"),
    ([1.0], [[0, 0]], [[0, math.nan]], "non-finite"),
    ([1.0], [[1.5, 0]], None, "outside"),
    ([1.0], [[0.5, 0]], [[1.5, 0]], "velocities: |j1|"),
    ([0.1], [[0.5, 0]], None, "velocity"),  # 5 units/s implied by the linear segment
])
def test_timing_finiteness_and_limits(times, pos, vel, text):
    v = check(times, pos, vel)
    assert not v.ok and v.error_code == INVALID_GOAL and text in v.message, v.message


def test_interpolated_acceleration_is_checked():
    # Quintic rest-to-rest 0.1 rad in 0.25 s: 0.75 rad/s (< 1) but 5.77*0.1/0.0625 = 9.2 rad/s^2 (> 4).
    v = check([0.25], [[0.1, 0.0]], [[0, 0]], [[0, 0]])
    assert not v.ok and "acceleration" in v.message and "j1" in v.message
    assert check([1.5], [[0.2, 0.0]], [[0, 0]], [[0, 0]]).ok


def test_quintic_overshoot_beyond_position_limit_is_caught():
    v = check([1.0, 2.0], [[0.99, 0], [0.99, 0]], [[0.5, 0], [0, 0]], [[0, 0], [0, 0]])
    assert not v.ok and "interpolated" in v.message


def test_point_due_now_far_from_reference_is_a_jump():
    v = check([0.0], [[0.5, 0.0]])
    assert not v.ok and "due now" in v.message
    assert check([0.0], [[0.005, 0.0]]).ok


def test_stale_trajectory_is_old_header_timestamp():
    v = check([1.0], [[0.1, 0.1]], stamp=5.0, now=10.0)
    assert v.error_code == OLD_HEADER_TIMESTAMP


def test_limits_from_urdf(tmp_path):
    urdf = tmp_path / "r.urdf"
    urdf.write_text("""<robot name="r">
      <joint name="a" type="revolute"><limit lower="-1" upper="2" velocity="3" effort="1"/></joint>
      <joint name="b" type="continuous"><limit velocity="4" effort="1"/></joint>
      <joint name="f" type="fixed"/></robot>""")
    lim = limits_from_urdf(str(urdf))
    assert lim == {"a": (-1.0, 2.0, 3.0), "b": (-math.inf, math.inf, 4.0)}
    urdf.write_text('<robot name="r"><joint name="a" type="revolute"/></robot>')
    with pytest.raises(LimitsError, match="^urdf: joint 'a'"):
        limits_from_urdf(str(urdf))
    with pytest.raises(LimitsError, match="^urdf: cannot read"):
        limits_from_urdf(str(tmp_path / "missing.urdf"))


def test_joint_limits_validate_themselves():
    with pytest.raises(LimitsError, match="^velocity: expected 2 values"):
        Limits.for_joints(NAMES, np.zeros(2), np.ones(2), np.ones(3), np.ones(2))
    with pytest.raises(LimitsError, match="^lower:"):
        Limits.for_joints(NAMES, np.ones(2), np.zeros(2), np.ones(2), np.ones(2))


def test_result_codes_are_the_action_s_codes():
    pytest.importorskip("rclpy")
    from plan_stack.action import ExecuteTrajectory
    from plan_stack.trajectory.checks import ResultCode

    for code in ResultCode:
        assert getattr(ExecuteTrajectory.Result, code.name) == code


# --- the vectorised check against the rules written out sample by sample ----------------------------------

def _rule(message: str) -> tuple[str, bool, list[str]]:
    """What a limit verdict's message names: the field, knot or interpolated curve, the joints."""
    import re

    return message.split(":")[0], "interpolated" in message, re.findall(r"\bj\d\b", message)


def _reference_check(traj, expected, limits, now_s, initial, jump_tolerance=1e-3, tol=1e-6, S=16):
    """The check's rules in the plainest form: loops over joints and points, the curve from `spline_from`
    (per-segment polynomial coefficients) sampled with `Spline.dense` / `dense_jerk`, every sample compared.
    Returns (ok, error_code, message)."""
    from plan_stack.trajectory.checks import INVALID_GOAL, INVALID_JOINTS, OLD_HEADER_TIMESTAMP
    from plan_stack.trajectory.core import TrajectoryError, spline_from

    names = list(traj.joint_names)
    for n in names:
        if names.count(n) > 1:
            return False, INVALID_JOINTS, "duplicate"
    if any(n not in expected for n in names):
        return False, INVALID_JOINTS, "unknown"
    if any(n not in names for n in expected):
        return False, INVALID_JOINTS, "missing"
    for arr in (traj.times_s, traj.positions, traj.velocities, traj.accelerations):
        if arr is not None and not np.isfinite(arr).all():
            return False, INVALID_GOAL, "non-finite"
    t = traj.times_s
    if t[0] < 0 or any(b <= a for a, b in zip(t, t[1:])):
        return False, INVALID_GOAL, "times"
    tr = traj.reordered(expected)
    for i in range(len(t)):
        for j in range(len(expected)):
            if not limits.q_min[j] - tol <= tr.positions[i, j] <= limits.q_max[j] + tol:
                return False, INVALID_GOAL, f"positions: {expected[j]} at point {i} is outside"
    for label, arr, lim in (("velocities", tr.velocities, limits.v_max), ("accelerations", tr.accelerations,
                                                                          limits.a_max)):
        for i in range(len(t)) if arr is not None else ():
            for j in range(len(expected)):
                if abs(arr[i, j]) > lim[j] * (1 + tol):
                    return False, INVALID_GOAL, f"{label}: |{expected[j]}| at point {i} exceeds the limit"
    start = tr.start_s(now_s)
    if start + t[-1] < now_s - 1e-9:
        return False, OLD_HEADER_TIMESTAMP, "stale"
    if initial is not None and start + t[-1] <= now_s + 1e-9:
        jump = np.abs(tr.positions[-1] - initial.positions)
        if (jump > jump_tolerance).any():
            return False, INVALID_GOAL, "jump"
    try:
        spline = spline_from(tr, start, initial, max(now_s, start) if initial is not None else start)
    except TrajectoryError:
        return False, INVALID_GOAL, "knots"
    q, v, a = spline.dense(S)
    for row in q:
        for j in range(len(expected)):
            if not limits.q_min[j] - tol <= row[j] <= limits.q_max[j] + tol:
                return False, INVALID_GOAL, f"positions: the interpolated {spline.mode} curve leaves on {expected[j]}"
    checks = [("velocity", v, limits.v_max)]
    if spline.mode != "linear":
        checks.append(("acceleration", a, limits.a_max))
        if limits.has_jerk_limits:
            checks.append(("jerk", spline.dense_jerk(S), limits.j_max))
    for label, arr, lim in checks:
        for row in arr:
            for j in range(len(expected)):
                if abs(row[j]) > lim[j] * (1 + tol):
                    return (False, INVALID_GOAL,
                            f"{label}: the interpolated {spline.mode} curve reaches on {expected[j]}, above the limit")
    return True, 0, ""


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), mode=st.sampled_from(["linear", "cubic", "quintic"]),
       jerk=st.booleans(), with_initial=st.booleans(), shuffle=st.booleans(), stamped=st.booleans())
def test_verdicts_match_the_sample_by_sample_rules(seed, mode, jerk, with_initial, shuffle, stamped):
    """Random trajectories (1-6 points, 1-4 joints, every interpolation, joints in any order, joined from a
    present reference or not, with or without jerk limits) around the limits: the vectorised check and the
    rules written out sample by sample agree on the verdict, the code and what the message names."""
    rng = np.random.default_rng(seed)
    D, n = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    names = tuple(f"j{i}" for i in range(D))
    times = rng.uniform(0.0, 0.2) + np.cumsum(rng.uniform(0.01, 0.3, n)) - 0.005
    v_knots = rng.uniform(-1.5, 1.5, (n, D))  # a roughly consistent motion, so that many curves pass
    steps = np.diff(times, prepend=times[0])[:, None] * v_knots + rng.normal(0.0, 0.02, (n, D))
    pos = rng.uniform(-0.6, 0.6, D) + np.cumsum(steps, axis=0)
    vel = None if mode == "linear" else v_knots
    acc = rng.uniform(-10.0, 10.0, (n, D)) if mode == "quintic" else None
    lim = Limits.for_joints(names, rng.uniform(-2.0, -0.8, D), rng.uniform(0.8, 2.0, D), rng.uniform(1.0, 6.0, D),
                            rng.uniform(10.0, 200.0, D), rng.uniform(100.0, 5000.0, D) if jerk else np.full(D, np.inf))
    order = rng.permutation(D) if shuffle else np.arange(D)
    cols = lambda x: None if x is None else x[:, order]  # noqa: E731
    traj = Trajectory(tuple(names[i] for i in order), 5.0 if stamped else 0.0, times, pos[:, order], cols(vel),
                      cols(acc))
    now = 5.0 + rng.uniform(-0.1, 0.3)
    initial = Reference(pos[0] + rng.normal(0.0, 0.05, D), rng.uniform(-1, 1, D), rng.uniform(-5, 5, D), True) \
        if with_initial else None
    got = check_trajectory(traj, names, lim, now, initial)
    want = _reference_check(traj, names, lim, now, initial)
    assert (got.ok, int(got.error_code)) == (want[0], int(want[1])), (got.message, want[2])
    if not got.ok and ":" in want[2]:  # a limit: the same rule (field, knot or curve) on the same joint
        assert _rule(got.message) == _rule(want[2]), (got.message, want[2])
