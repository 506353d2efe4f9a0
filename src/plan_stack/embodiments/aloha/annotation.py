"""Per-episode annotations: what the planner's target and drafter are trained on.

No ROS imports. For each keyframe the annotation holds, per arm, the future
gripper (tool-centre) trajectory until the end of the current sub-task,
resampled to P waypoints uniformly along its 3D arc length, in the
`cam_high` optical frame (metres) and projected to `cam_high` pixels, with
points outside the image (or behind the camera) marked; plus the 2D boxes of
the task objects seen by `cam_high` (from the renderer's segmentation, so
occlusion by the arms is respected). The JSON format is documented in
docs/aloha.md and versioned by `FORMAT`; the pieces shared with the other
recorders are in `data.annotation`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from plan_stack.camera import CameraModel
from plan_stack.data.annotation import (
    KeyframeInput,
    Subtask,
    camera_annotation,
    path_annotation,
    round_or_none,
    subtask_at,
    subtasks_annotation,
)
from plan_stack.embodiments.aloha.model import ARMS

__all__ = ["FORMAT", "build_annotation", "read_annotation"]

FORMAT = "plan_stack.aloha_annotation/1"


def build_annotation(
    *,
    task: str,
    seed: int,
    instruction: str,
    subtasks: Sequence[Subtask],
    camera: CameraModel,
    times_s: np.ndarray,
    tcp_world: np.ndarray,
    keyframes: Sequence[KeyframeInput],
    waypoints: int = 10,
    success: bool,
    reward: int,
    bag: str = "",
    label_tcp_world: Sequence[np.ndarray] | None = None,
) -> dict:
    """The annotation dict of one episode. `tcp_world` is [T, 2, 3] (left, right) at `times_s`;
    `label_tcp_world` (one such track per keyframe) replaces it as the source of that keyframe's path."""
    if label_tcp_world is not None and len(label_tcp_world) != len(keyframes):
        raise ValueError(f"label_tcp_world: one track per keyframe ({len(keyframes)}), got {len(label_tcp_world)}")
    frames = []
    for i, kf in enumerate(keyframes):
        st = subtask_at(subtasks, kf.t_s)
        track = tcp_world if label_tcp_world is None else label_tcp_world[i]
        frames.append({
            "t_s": round_or_none(kf.t_s, 4),
            "subtask": st.text,
            "arms": {arm: path_annotation(times_s, track[:, a], kf, st.end_s, waypoints, camera)
                     for a, arm in enumerate(ARMS)},
            "boxes": [{"object": name, "bbox": box} for name, box in kf.boxes.items() if box is not None],
        })
    pose = keyframes[0].camera_pose if keyframes else (np.zeros(3), np.eye(3))
    return {
        "format": FORMAT,
        "task": task,
        "seed": int(seed),
        "bag": bag,
        "instruction": instruction,
        "success": bool(success),
        "reward": int(reward),
        "camera": camera_annotation(camera, f"{camera.name}_optical_frame", pose),
        "waypoints": int(waypoints),
        "subtasks": subtasks_annotation(subtasks),
        "keyframes": frames,
    }


def read_annotation(path: str) -> dict:
    """Load an annotation; raises ValueError when the format tag is not this version."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if data.get("format") != FORMAT:
        raise ValueError(f"format: expected {FORMAT!r}, got {data.get('format')!r}")
    return data
