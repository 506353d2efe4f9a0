"""The plan picture of a scripted ALOHA demo run (`make demo`), without ROS.

A demo run has no planner, so its picture shows the plan the stack is
trained to produce: at the start of each sub-task, each arm's future
tool-centre path until the sub-task ends, resampled to P waypoints and
projected into `cam_high` (the annotation recipe of `plan-stack
record-demos`), drawn on the `cam_high` frame of that moment. The paths
come from the run's own bag (`/ground_truth/<arm>_gripper/pose`, world
frame), so the picture shows what the robot did, not what was scripted.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plan_stack.viz.bag import image_array, nearest, truth_plans
from plan_stack.viz.config import VizStyle
from plan_stack.viz.overlay import draw_overlay, draw_text
from plan_stack.viz.plan import VizError, check_plan
from plan_stack.viz.render import write_png

__all__ = ["demo_plan_picture"]


def _positions(msgs: list[tuple[float, Any]]) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([x[0] for x in msgs])
    p = np.array([(m.pose.position.x, m.pose.position.y, m.pose.position.z) for _, m in msgs])
    return t, p


def demo_plan_picture(bag: str | os.PathLike, out_png: str | os.PathLike, *, task: str, seed: int, instruction: str,
                      subtasks: Sequence, camera, camera_pose: tuple[np.ndarray, np.ndarray], waypoints: int = 10,
                      style: VizStyle = VizStyle()) -> Path:
    """Tile one overlay per sub-task (`subtasks`: data.annotation.Subtask in bag time) into a PNG.

    `camera` is cam_high's CameraModel at the recorded size, `camera_pose` its optical frame in world.
    """
    from plan_stack.data.annotation import KeyframeInput
    from plan_stack.data.bags import read_bag
    from plan_stack.embodiments.aloha.annotation import build_annotation
    from plan_stack.embodiments.aloha.model import ARMS

    image_topic = f"/cameras/{camera.name}/image_raw"
    topics = {image_topic, *(f"/ground_truth/{arm}_gripper/pose" for arm in ARMS)}
    msgs = read_bag(bag, topics=topics)
    if any(not msgs.get(t) for t in topics):
        raise VizError(f"bag: {bag} lacks {sorted(t for t in topics if not msgs.get(t))}")
    times, first = _positions(msgs[f"/ground_truth/{ARMS[0]}_gripper/pose"])
    tcp = [first]
    for arm in ARMS[1:]:
        t_arm, p_arm = _positions(msgs[f"/ground_truth/{arm}_gripper/pose"])
        tcp.append(np.stack([np.interp(times, t_arm, p_arm[:, k]) for k in range(3)], axis=1))
    keyframes = [KeyframeInput(st.start_s, camera_pose, {}) for st in subtasks]
    annotation = build_annotation(task=task, seed=seed, instruction=instruction, subtasks=subtasks, camera=camera,
                                  times_s=times, tcp_world=np.stack(tcp, axis=1), keyframes=keyframes,
                                  waypoints=waypoints, success=True, reward=0)
    frames = msgs[image_topic]
    tiles = []
    for truth in truth_plans(annotation):
        img = nearest(frames, truth.stamp_s, 0.5)
        if img is None:
            continue
        tile = draw_overlay(image_array(img), check_plan(truth), style, text=False)
        rows = draw_text(tile, truth.subtask, style)
        draw_text(tile, f"t={truth.stamp_s:.1f}s", style, row=rows)
        tiles.append(tile)
    if not tiles:
        raise VizError(f"bag: no {image_topic} frames near the sub-task starts")
    return write_png(Path(out_png), np.concatenate(tiles, axis=1))
