"""Scripted pick-and-place: succeeds on seeded episodes, stays within the bridge's limits, fails when it should."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.franka.bridge import FrankaBridgeConfig, load_limits
from plan_stack.embodiments.franka.expert import ExpertConfig, IKError, run_episode, solve_ik
from plan_stack.embodiments.franka.model import READY_POSE
from plan_stack.embodiments.franka.sim import FrankaSim
from plan_stack.trajectory.checks import check_trajectory
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


def test_a_recovery_demonstration_misses_beside_the_cube_then_places_it(sim):
    """`miss_m`: the first close grips nothing (fingers shut to the command, cube unmoved), then the
    expert reopens, picks the cube and places it, within the bridge's limits."""
    from plan_stack.embodiments.franka.expert import MISS_LABELS, missed_grasp_offset, plan_pick_place
    from plan_stack.embodiments.franka.model import DEFAULT_JOINT_NAMES
    from plan_stack.trajectory.core import TrajectoryFollower

    cfg, names = ExpertConfig(), (*DEFAULT_JOINT_NAMES, "fr3_gripper")
    limits = load_limits(FrankaBridgeConfig())
    rest = Reference(np.concatenate([READY_POSE, [0.08]]), np.zeros(8), np.zeros(8), False)
    for seed in (400000, 400003):
        sim.reset(seed=seed)
        cube0 = sim.cube_pose()[:3]
        offset = missed_grasp_offset(sim, cfg, seed, 0.035)
        assert 0.035 <= np.linalg.norm(offset) <= 0.0525 + 1e-9
        traj, labels = plan_pick_place(sim, cfg, names, miss_offset_xy=offset)
        assert tuple(labels[:5]) == MISS_LABELS and labels[5] == "approach"
        assert check_trajectory(traj, names, limits, 0.0, rest).ok
        follower = TrajectoryFollower(names, rest.positions)
        follower.set_trajectory(traj, sim.time_s)
        reopened_at = traj.times_s[labels.index("miss_reopen")]
        goal, narrowest = 0.08, 0.08
        while sim.time_s < reopened_at:  # the expert's own loop (run_episode) through the missed close
            ref = follower.sample(sim.time_s)
            sim.set_command(ref.positions[:7])
            if abs(ref.positions[7] - goal) > 0.002:
                goal = float(ref.positions[7])
                sim.move_gripper(goal, max(abs(float(ref.velocities[7])), 0.01))
            sim.step()
            narrowest = min(narrowest, sim.gripper_width())
        assert narrowest < 0.035  # narrower than the 4 cm cube: nothing between the fingers
        assert np.linalg.norm(sim.cube_pose()[:3] - cube0) < 0.005
        assert run_episode(sim, seed, miss_m=0.035).success
    with pytest.raises(ValueError, match="distance_m"):
        missed_grasp_offset(sim, cfg, 0, 0.0)
