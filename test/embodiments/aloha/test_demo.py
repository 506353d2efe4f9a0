"""demo helpers: the expert's trajectory, smoothed and retimed, is one the bridge accepts."""
from __future__ import annotations

import numpy as np

from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits
from plan_stack.embodiments.aloha.demo import LEAD_IN_S, expert_trajectory, retime
from plan_stack.embodiments.validation import check_trajectory
from plan_stack.trajectory.core import Reference


def test_expert_trajectory_passes_bridge_validation_from_the_start_pose():
    limits = load_limits(AlohaBridgeConfig())
    episode, traj = expert_trajectory("transfer_cube", 1, limits)  # seed 1 has a fast wrist flip
    assert traj.interpolation == "cubic" and traj.times_s[0] == LEAD_IN_S
    start = episode.commands[0].copy()
    start[[6, 13]] = 0.1  # the sim's start gripper opening
    rest = Reference(start, np.zeros(14), np.zeros(14), False)
    verdict = check_trajectory(traj, limits.joint_names, limits, now_s=5.0, initial=rest)
    assert verdict.ok, verdict.message
    assert traj.times_s[-1] > 8.0  # slowed down where the limits demand it


def test_retime_slows_a_too_fast_path():
    limits = load_limits(AlohaBridgeConfig())
    q = np.zeros((50, 14))
    q[:, 0] = np.linspace(0, 2.0, 50)  # 2 rad in 1 s: 2 rad/s needs no stretch, but a 5x faster path does
    times, vel = retime(q, 0.004, limits)
    assert np.max(np.abs(vel[:, 0])) <= limits.v_max[0]
    assert times[-1] > 2.0 / limits.v_max[0]
