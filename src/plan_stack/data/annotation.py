"""Per-episode annotation pieces shared by the recorders (ALOHA, Franka), without ROS.

For each keyframe an annotation holds, per arm, the future tool-centre path
until the end of the current sub-task, resampled to P waypoints uniformly
along its 3D arc length, in the annotated camera's optical frame (metres)
and projected to its pixels, with points outside the image (or behind the
camera) marked; plus the 2D boxes of the objects seen by that camera (from
segmentation, so occlusion is respected). Each embodiment's module owns its
JSON schema and `FORMAT` (`aloha.annotation`, `franka.recording`).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

import numpy as np

from plan_stack.camera import CameraModel, project_points, world_to_camera

__all__ = ["Subtask", "KeyframeInput", "resample_arc_length", "future_path", "box_from_mask", "subtask_at",
           "round_or_none", "path_annotation", "camera_annotation", "subtasks_annotation", "write_annotation"]


@dataclasses.dataclass(frozen=True)
class Subtask:
    """A sub-task of an episode: its instruction text and [start_s, end_s) in sim time."""

    text: str
    start_s: float
    end_s: float


def resample_arc_length(points: np.ndarray, count: int) -> np.ndarray:
    """[N, 3] polyline -> [count, 3] points equally spaced along its arc length (ends kept).

    A polyline of zero length (gripper at rest) yields `count` copies of its point.
    """
    p = np.asarray(points, dtype=float).reshape(-1, 3)
    if count < 2:
        raise ValueError(f"count: need at least 2 waypoints, got {count}")
    seg = np.linalg.norm(np.diff(p, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    if len(p) == 1 or s[-1] <= 1e-12:
        return np.repeat(p[:1], count, axis=0)
    keep = np.concatenate([[True], seg > 1e-12])  # drop repeated points so s is strictly increasing
    p, s = p[keep], s[keep]
    target = np.linspace(0.0, s[-1], count)
    return np.stack([np.interp(target, s, p[:, k]) for k in range(3)], axis=1)


def future_path(times_s: np.ndarray, positions: np.ndarray, t_from: float, t_to: float) -> np.ndarray:
    """Positions [N, 3] sampled at `times_s` restricted to [t_from, t_to] (at least one point)."""
    times_s = np.asarray(times_s)
    sel = (times_s >= t_from - 1e-9) & (times_s <= t_to + 1e-9)
    if not np.any(sel):
        sel[int(np.argmin(np.abs(times_s - t_from)))] = True
    return np.asarray(positions)[sel]


def box_from_mask(mask: np.ndarray) -> list[int] | None:
    """[u_min, v_min, u_max, v_max] (inclusive pixel indices) of a boolean mask, None if empty."""
    if not np.any(mask):
        return None
    rows, cols = np.any(mask, axis=1), np.any(mask, axis=0)
    v = np.flatnonzero(rows)
    u = np.flatnonzero(cols)
    return [int(u[0]), int(v[0]), int(u[-1]), int(v[-1])]


@dataclasses.dataclass(frozen=True)
class KeyframeInput:
    """What the recorder captured at a keyframe."""

    t_s: float
    camera_pose: tuple[np.ndarray, np.ndarray]  # annotated camera's optical frame in world: (position, rotation)
    boxes: dict[str, list[int] | None]  # object -> box in that camera's pixels


def subtask_at(subtasks: Sequence[Subtask], t: float) -> Subtask:
    """The sub-task running at `t` (the last one after they all end)."""
    for st in subtasks:
        if st.start_s - 1e-9 <= t < st.end_s - 1e-9:
            return st
    return subtasks[-1]


def round_or_none(x, nd=5):
    """JSON-friendly rounding: None for None and non-finite floats."""
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(float(x), nd)


def path_annotation(times_s: np.ndarray, positions: np.ndarray, kf: KeyframeInput, end_s: float, waypoints: int,
                    camera: CameraModel) -> dict:
    """One arm's entry at a keyframe: the path from `kf.t_s` to `end_s` of `positions` [T, 3] (world, at
    `times_s`) as `waypoints` points in the camera frame (`xyz`), their pixels (`uv`, None outside) and
    `in_image`."""
    xyz = world_to_camera(resample_arc_length(future_path(times_s, positions, kf.t_s, end_s), waypoints),
                          kf.camera_pose)
    uv, inside = project_points(xyz, camera)
    return {
        "xyz": [[round_or_none(c) for c in p] for p in xyz],
        "uv": [[round_or_none(u, 2), round_or_none(v, 2)] if ok else None for (u, v), ok in zip(uv, inside)],
        "in_image": [bool(x) for x in inside],
    }


def camera_annotation(camera: CameraModel, frame_id: str, pose: tuple[np.ndarray, np.ndarray]) -> dict:
    """The annotated camera: name, optical frame, size, K and its world pose (position, world_R_optical)."""
    pos, rot = pose
    return {"name": camera.name, "frame_id": frame_id, "width": camera.width, "height": camera.height,
            "K": camera.K.tolist(), "world_position": np.round(pos, 6).tolist(),
            "world_rotation": np.round(rot, 6).tolist()}


def subtasks_annotation(subtasks: Sequence[Subtask]) -> list[dict]:
    return [{"text": st.text, "start_s": round_or_none(st.start_s, 4), "end_s": round_or_none(st.end_s, 4)}
            for st in subtasks]


def write_annotation(path: str, annotation: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(annotation, fh, indent=1)
        fh.write("\n")
