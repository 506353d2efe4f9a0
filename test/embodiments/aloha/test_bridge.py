"""bridge library: URDF limits in stack units, controller split, stopping profile."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.embodiments.aloha.bridge import (
    AlohaBridgeConfig,
    find_urdf,
    load_limits,
    split_for_controllers,
)
from plan_stack.embodiments.aloha.model import JOINT_NAMES, gripper_to_joint, load_model
from plan_stack.trajectory.checks import LimitsError, stop_trajectory
from plan_stack.trajectory.core import Reference, Spline, Trajectory


def test_urdf_limits_match_the_simulated_robot():
    lim = load_limits(AlohaBridgeConfig())
    m = load_model()
    for i, name in enumerate(JOINT_NAMES):
        if name.endswith("gripper"):
            assert (lim.q_min[i], lim.q_max[i]) == (0.0, 1.0)
            continue
        arm, joint = name.split("_", 1)
        lo, hi = m.jnt_range[m.joint(f"vx300s_{arm}/{joint}").id]
        assert np.isclose(lim.q_min[i], lo) and np.isclose(lim.q_max[i], hi), name
        assert np.isclose(lim.v_max[i], np.pi)


def test_config_checks():
    with pytest.raises(ConfigError, match="^acceleration_limits: expected 1 or 14"):
        AlohaBridgeConfig(acceleration_limits=(1.0, 2.0))
    with pytest.raises(ConfigError, match="^joint_names:"):
        AlohaBridgeConfig(joint_names=("a",))
    with pytest.raises(ConfigError, match="^velocity_scale:"):
        AlohaBridgeConfig(velocity_scale=2.0)
    with pytest.raises(LimitsError, match="^urdf_path: no such file"):
        find_urdf("/nonexistent.urdf")
    assert load_limits(AlohaBridgeConfig(acceleration_limits=3.0)).a_max.tolist() == [3.0] * 14


def test_the_aloha_bridge_stops_ahead_and_holds_grippers_to_their_own_tolerance():
    cfg = AlohaBridgeConfig(command_latency_s=0.05, goal_tolerance=0.1, gripper_goal_tolerance=0.7)
    settings = cfg.settings()
    assert settings.stop_lead_s == 0.05 and settings.track_at_measurement_stamp
    grip = np.array([n.endswith("_gripper") for n in JOINT_NAMES])
    tracked, tolerance = cfg.goal_checks()
    assert tracked.tolist() == (~grip).tolist()
    assert tolerance.tolist() == np.where(grip, 0.7, 0.1).tolist()
    assert cfg.state_joint_names == JOINT_NAMES and cfg.limits().a_max.shape == (14,)


def test_measured_finger_metres_become_normalised_grippers():
    grip = [i for i, n in enumerate(JOINT_NAMES) if n.endswith("_gripper")]
    q = np.full(14, 0.3)
    q[grip] = gripper_to_joint(np.array([0.0, 1.0]))  # closed and open, in finger metres
    stack = AlohaBridgeConfig().joint_to_stack(q.copy())
    assert stack[grip] == pytest.approx([0.0, 1.0]) and np.all(np.delete(stack, grip) == 0.3)


def test_split_maps_grippers_to_finger_metres():
    pos = np.zeros((2, 14))
    pos[:, 6] = [0.0, 1.0]
    pos[1, 0] = 0.4
    vel = np.zeros((2, 14))
    vel[:, 13] = 1.0
    parts = split_for_controllers(Trajectory(JOINT_NAMES, 3.0, np.array([0.5, 1.0]), pos, vel))
    assert set(parts) == {"left_arm", "left_gripper", "right_arm", "right_gripper"}
    assert parts["left_arm"].joint_names[0] == "left_waist" and parts["left_arm"].positions[1, 0] == 0.4
    assert np.allclose(parts["left_gripper"].positions[:, 0], [0.021, 0.057])  # clipped to the finger travel
    assert np.allclose(parts["right_gripper"].velocities, 0.058 - 0.01844)
    assert all(p.stamp_s == 3.0 for p in parts.values())


def test_stop_trajectory_decelerates_within_limits_and_ends_at_rest():
    lim = load_limits(AlohaBridgeConfig())
    v = np.zeros(14)
    v[0], v[8] = 1.5, -0.8
    ref = Reference(np.zeros(14), v, np.full(14, 3.0), True)  # was still accelerating
    stop = stop_trajectory(ref, lim, scale=0.8)
    assert stop.interpolation == "cubic"
    spline = Spline(np.concatenate([[0.0], stop.times_s]), np.vstack([ref.positions, stop.positions]),
                    np.vstack([v, stop.velocities]), None, "cubic")
    q, vel, acc = spline.dense(32)
    assert np.all(np.abs(acc) <= 0.8 * lim.a_max * 1.001)
    assert np.allclose(stop.velocities[-1], 0) and np.allclose(spline.sample(10.0).velocities, 0)
    assert np.isclose(stop.positions[-1, 0], 1.5**2 / (2 * 0.8 * lim.a_max[0]), rtol=0.05)
    rest = stop_trajectory(Reference(np.ones(14), np.zeros(14), np.zeros(14), False), lim)
    assert len(rest.times_s) == 1 and np.allclose(rest.positions[0], 1.0)
