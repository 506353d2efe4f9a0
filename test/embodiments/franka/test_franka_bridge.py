"""Franka bridge logic: URDF limits (incl. acceleration and jerk), validation reuse, gripper moves."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.embodiments.franka.bridge import FrankaBridgeConfig, gripper_move, load_limits
from plan_stack.embodiments.franka.model import READY_POSE
from plan_stack.trajectory.checks import INVALID_GOAL, INVALID_JOINTS, LimitsError, check_trajectory
from plan_stack.trajectory.core import Reference, Trajectory

CFG = FrankaBridgeConfig()
LIMITS = load_limits(CFG)
START = np.array([*READY_POSE, 0.08])
REST = Reference(START, np.zeros(8), np.zeros(8), False)


def _goal(delta, duration, quintic=True):
    q1 = START + np.asarray(delta, dtype=float)
    z = np.zeros((1, 8))
    return Trajectory(CFG.joint_names, 0.0, np.array([duration]), q1[None], z if quintic else None,
                      z if quintic else None)


def test_limits_are_the_published_panda_values():
    assert LIMITS.q_max[3] == pytest.approx(-0.0698) and LIMITS.q_min[5] == pytest.approx(-0.0175)
    assert LIMITS.v_max[:7] == pytest.approx([2.175] * 4 + [2.61] * 3)
    assert LIMITS.a_max[:7] == pytest.approx([15, 7.5, 10, 12.5, 15, 20, 20])
    assert LIMITS.j_max[:7] == pytest.approx([7500, 3750, 5000, 6250, 7500, 10000, 10000])
    assert (LIMITS.q_min[7], LIMITS.q_max[7], LIMITS.v_max[7]) == (0.0, 0.08, 0.1)
    scaled = load_limits(FrankaBridgeConfig(velocity_scale=0.5, jerk_scale=0.1))
    assert scaled.v_max[0] == pytest.approx(1.0875) and scaled.j_max[1] == pytest.approx(375.0)


def test_config_rules():
    with pytest.raises(ConfigError, match="^joint_names"):
        FrankaBridgeConfig(joint_names=("a",) * 8)
    with pytest.raises(LimitsError, match="^urdf_path"):
        load_limits(FrankaBridgeConfig(urdf_path="/nonexistent.urdf"))
    with pytest.raises(LimitsError, match="^urdf_path: joint 'x1'"):
        load_limits(FrankaBridgeConfig(urdf_joint_names=("x1",) + CFG.urdf_joint_names[1:]))


def test_the_franka_bridge_tracks_at_the_present_and_leaves_the_gripper_to_moves():
    settings = CFG.settings()
    assert settings.track_at_measurement_stamp is False and settings.stop_lead_s == 0.0
    tracked, tolerance = CFG.goal_checks()
    assert tracked.tolist() == [True] * 7 + [False]
    assert tolerance.tolist() == [CFG.goal_tolerance] * 7 + [np.inf]
    assert CFG.state_joint_names == (*CFG.arm_joints, *CFG.finger_joint_names)
    stack = CFG.joint_to_stack(np.array([*READY_POSE, 0.03, 0.04]))  # width = the two fingers' sum
    assert stack.tolist()[:7] == list(READY_POSE) and stack[7] == pytest.approx(0.07)
    assert CFG.limits().j_max[0] == LIMITS.j_max[0]


def test_validation_accepts_a_slow_move_and_names_each_broken_limit():
    ok = check_trajectory(_goal([0.3, 0.2, 0, -0.2, 0, 0.2, 0.3, -0.04], 2.0), CFG.joint_names, LIMITS, 0.0, REST)
    assert ok.ok, ok.message
    fast = check_trajectory(_goal([1.5, 0, 0, 0, 0, 0, 0, 0], 0.8), CFG.joint_names, LIMITS, 0.0, REST)
    assert not fast.ok and fast.error_code == INVALID_GOAL and "fr3_joint1" in fast.message
    assert fast.message.startswith(("velocity", "acceleration"))
    out = check_trajectory(_goal([0, 0, 0, 2.3, 0, 0, 0, 0], 5.0), CFG.joint_names, LIMITS, 0.0, REST)
    assert not out.ok and out.message.startswith("positions: fr3_joint4")
    grip = check_trajectory(_goal([0] * 7 + [-0.08], 0.2), CFG.joint_names, LIMITS, 0.0, REST)
    assert not grip.ok and "fr3_gripper" in grip.message  # 0.08 m in 0.2 s is above 0.1 m/s
    names = check_trajectory(dataclass_replace_names(_goal([0] * 8, 1.0)), CFG.joint_names, LIMITS, 0.0, REST)
    assert names.error_code == INVALID_JOINTS


def dataclass_replace_names(traj):
    import dataclasses

    return dataclasses.replace(traj, joint_names=(*CFG.joint_names[:7], "panda_gripper"))


def test_jerk_limit_is_checked_only_when_given():
    # 0.1 rad on joint 2 in 0.4 s (quintic rest to rest): peak |v| 0.47, |a| 3.6, |jerk| 60 h / T^3 = 93.75
    traj = _goal([0, 0.1, 0, 0, 0, 0, 0, 0], 0.4)
    assert check_trajectory(traj, CFG.joint_names, LIMITS, 0.0, REST).ok
    tight = load_limits(FrankaBridgeConfig(jerk_scale=0.02))  # joint 2: 75 rad/s^3
    v = check_trajectory(traj, CFG.joint_names, tight, 0.0, REST)
    assert not v.ok and v.message.startswith("jerk") and "fr3_joint2" in v.message
    assert float(v.message.split("reaches ")[1].split()[0]) == pytest.approx(93.75, rel=0.01)
    import dataclasses

    no_jerk = dataclasses.replace(tight, j_max=np.full(8, np.inf))  # infinite: no jerk limit
    assert check_trajectory(traj, CFG.joint_names, no_jerk, 0.0, REST).ok


def test_gripper_moves_follow_the_reference_with_a_deadband():
    assert gripper_move(0.079, -0.05, 0.08, CFG) is None  # within the 2 mm deadband
    assert gripper_move(0.07, -0.05, 0.08, CFG) == (0.07, 0.05)
    assert gripper_move(0.02, 0.0, 0.08, CFG) == (0.02, CFG.gripper_min_speed)
    assert gripper_move(-0.01, -1.0, None, CFG) == (0.0, 0.1)
