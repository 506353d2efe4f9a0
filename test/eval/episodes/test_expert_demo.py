"""expert_demo: the expert's trajectory, smoothed and retimed, is one the bridge accepts; the plan picture
has one tile per sub-task with both arms' future paths drawn on cam_high."""
from __future__ import annotations

import json

import cv2
import numpy as np

from plan_stack.data.annotation import Subtask
from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits
from plan_stack.eval.episodes.expert_demo import LEAD_IN_S, demo_plan_picture, expert_trajectory, retime
from plan_stack.trajectory.checks import check_trajectory
from plan_stack.trajectory.core import Reference
from plan_stack.viz.config import VizStyle


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


def test_one_tile_per_subtask_with_both_arms(aloha_demo, tmp_path):
    from plan_stack.embodiments.aloha.model import camera_model, camera_pose
    from plan_stack.embodiments.aloha.sim import AlohaSim

    ann = json.loads((aloha_demo.parent / f"{aloha_demo.name}.json").read_text())
    subtasks = [Subtask(s["text"], s["start_s"], s["end_s"]) for s in ann["subtasks"]]
    sim = AlohaSim("transfer_cube")
    sim.reset()
    png = demo_plan_picture(aloha_demo, tmp_path / "plan.png", task="transfer_cube", seed=2,
                            instruction=ann["instruction"],
                            subtasks=subtasks, camera=camera_model(sim.model, "cam_high", 64, 48),
                            camera_pose=camera_pose(sim.model, sim.data, "cam_high"))
    img = cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB)
    assert img.shape == (48, 64 * len(subtasks), 3)
    style = VizStyle()
    for k in range(len(subtasks)):
        tile = img[:, 64 * k:64 * (k + 1)]
        for arm in ("left", "right"):
            assert np.all(tile == style.rgb8_of(arm), axis=2).any(), (k, arm)
