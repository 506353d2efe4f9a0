"""demo_plan_picture: one tile per sub-task with both arms' future paths drawn on cam_high."""
from __future__ import annotations

import json

import cv2
import numpy as np

from plan_stack.data.annotation import Subtask
from plan_stack.viz.config import VizStyle
from plan_stack.viz.episode import demo_plan_picture


def test_one_tile_per_subtask_with_both_arms(demo, tmp_path):
    from plan_stack.embodiments.aloha.model import camera_model, camera_pose
    from plan_stack.embodiments.aloha.sim import AlohaSim

    ann = json.loads((demo.parent / f"{demo.name}.json").read_text())
    subtasks = [Subtask(s["text"], s["start_s"], s["end_s"]) for s in ann["subtasks"]]
    sim = AlohaSim("transfer_cube")
    sim.reset()
    png = demo_plan_picture(demo, tmp_path / "plan.png", task="transfer_cube", seed=2, instruction=ann["instruction"],
                            subtasks=subtasks, camera=camera_model(sim.model, "cam_high", 64, 48),
                            camera_pose=camera_pose(sim.model, sim.data, "cam_high"))
    img = cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB)
    assert img.shape == (48, 64 * len(subtasks), 3)
    style = VizStyle()
    for k in range(len(subtasks)):
        tile = img[:, 64 * k:64 * (k + 1)]
        for arm in ("left", "right"):
            assert np.all(tile == style.rgb8_of(arm), axis=2).any(), (k, arm)
