"""validation: every rule reports its error code and names what broke."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.embodiments.validation import (
    INVALID_GOAL,
    INVALID_JOINTS,
    OLD_HEADER_TIMESTAMP,
    LimitsError,
    check_trajectory,
    limits_from_urdf,
)
from plan_stack.trajectory.core import Reference, Trajectory
from plan_stack.trajectory.limits import Limits

NAMES = ("j1", "j2")
LIMITS = Limits.for_joints(NAMES, np.array([-1.0, -2.0]), np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([4.0, 8.0]))
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
    from plan_stack.embodiments.validation import ResultCode

    for code in ResultCode:
        assert getattr(ExecuteTrajectory.Result, code.name) == code
