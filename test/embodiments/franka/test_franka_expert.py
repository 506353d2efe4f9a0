"""Scripted pick-and-place: succeeds on seeded episodes, stays within the bridge's limits, fails when it should."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.franka.bridge import FrankaBridgeConfig, load_limits
from plan_stack.embodiments.franka.expert import ExpertConfig, IKError, run_episode, solve_ik
from plan_stack.embodiments.franka.model import READY_POSE
from plan_stack.embodiments.franka.sim import FrankaSim
from plan_stack.embodiments.validation import check_trajectory
from plan_stack.trajectory.core import Reference


@pytest.fixture(scope="module")
def sim():
    return FrankaSim(offscreen_size=(32, 24))


def test_expert_succeeds_on_seeded_episodes_within_bridge_limits(sim):
    cfg = FrankaBridgeConfig()
    limits = load_limits(cfg)
    start = np.concatenate([READY_POSE, [0.08]])
    rest = Reference(start, np.zeros(8), np.zeros(8), False)
    wins = 0
    for seed in range(10):
        ep = run_episode(sim, seed)
        wins += ep.success
        verdict = check_trajectory(ep.trajectory, cfg.joint_names, limits, 0.0, rest)
        assert verdict.ok, verdict.message
        assert ep.labels[2] == "grasp" and ep.tcp_path.shape[1] == 3
    assert wins >= 9, wins


def test_without_closing_the_gripper_the_cube_stays(sim):
    ep = run_episode(sim, 0, ExpertConfig(closed_width_m=0.08))
    assert not ep.success
    assert np.linalg.norm(sim.cube_pose()[:2] - sim.target_xy()) > 0.1


def test_unreachable_pose_raises(sim):
    import mujoco

    data = mujoco.MjData(sim.model)
    with pytest.raises(IKError, match="^pose"):
        solve_ik(sim, data, np.array([2.0, 0.0, 0.2]), np.eye(3), np.array(READY_POSE), iterations=50)
