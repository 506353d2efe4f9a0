"""What `plan-stack render` reads from a rosbag2 (MCAP) bag and its annotation, without ROS.

* Types: plan_stack's own messages are registered from the package's `.msg`
  files into a `rosbags` Kilted type store (`plan_typestore`), so test bags
  and recorders can write VisualPlan / Observation; reading needs nothing
  extra because rosbag2 MCAP bags carry their message definitions.
* Ground truth: the annotation JSON that `plan-stack record-demos` writes
  beside the bag folder (`<bag>.json`) becomes one `PlanView` per keyframe
  (`truth_plans`): ALOHA / Franka arms as robot_2d3d primitives in the
  annotated camera's optical frame, driving waypoints as a drive_2d3d
  primitive in the ego frame, object boxes as boxes.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from plan_stack.viz.plan import PlanView, PrimitiveView, VizError, make_plan

T = TypeVar("T")

__all__ = ["plan_typestore", "bag_connections", "read_messages", "image_array", "annotation_for", "truth_plans",
           "DRIVE_EGO_FRAME", "nearest"]

#: Frame of driving waypoints (the planner's `drive_frame_id` default, the car's base frame).
DRIVE_EGO_FRAME = "base_link"
_ANNOTATION_FORMATS = ("plan_stack.aloha_annotation/1", "plan_stack.franka_annotation/1",
                       "plan_stack.drive_annotation/1")


def plan_typestore():
    """The Kilted type store plus every plan_stack message (from the installed or source `msg/` folder)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from plan_stack.paths import find_data

    ts = get_typestore(Stores.ROS2_KILTED)
    types = {}
    for path in sorted(find_data("msg").glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(encoding="utf-8"), f"plan_stack/msg/{path.stem}"))
    ts.register(types)
    return ts


def bag_connections(path: str | os.PathLike) -> dict[str, str]:
    """topic -> message type of a bag folder (VizError when it is not a readable rosbag2 bag)."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    try:
        with AnyReader([Path(path)], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
            return {c.topic: c.msgtype for c in reader.connections}
    except Exception as exc:  # rosbags raises several unrelated types for unreadable folders
        raise VizError(f"bag: cannot read {path}: {exc}") from None


def read_messages(path: str | os.PathLike, topics) -> dict[str, list[tuple[float, Any]]]:
    """(bag time s, message) per topic, for `topics` only (images are large: read what is drawn).

    Messages are rosbags classes built at run time (hence Any)."""
    from plan_stack.data.bags import read_bag

    return read_bag(path, topics=set(topics)) if topics else {}


def image_array(msg) -> np.ndarray:
    """A `sensor_msgs/Image` (rosbags object, rgb8 or bgr8) as [H, W, 3] uint8 RGB."""
    if msg.encoding not in ("rgb8", "bgr8"):
        raise VizError(f"image: encoding {msg.encoding!r} (render draws on rgb8 / bgr8 images)")
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, dtype=np.uint8)
    if step < 3 * w or data.size != step * h:
        raise VizError(f"image: {data.size} bytes do not hold {h} rows of step {step} for width {w}")
    img = data.reshape(h, step)[:, :3 * w].reshape(h, w, 3)
    return img[:, :, ::-1].copy() if msg.encoding == "bgr8" else img.copy()


def annotation_for(bag: str | os.PathLike) -> dict | None:
    """The annotation JSON beside a bag folder (`DIR/<stem>/` -> `DIR/<stem>.json`), None if there is none."""
    path = Path(bag).resolve()
    candidate = path.parent / f"{path.name}.json"
    return read_annotation(candidate) if candidate.is_file() else None


def read_annotation(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if data.get("format") not in _ANNOTATION_FORMATS:
        raise VizError(f"annotation: {path} has format {data.get('format')!r} (known: {list(_ANNOTATION_FORMATS)})")
    return data


def _uv(entries) -> list[float]:
    out: list[float] = []
    for e in entries:
        out.extend([float("nan")] * 2 if e is None else [float(e[0]), float(e[1])])
    return out


def _boxes(kf: dict) -> list[PrimitiveView]:
    out = []
    for b in kf.get("boxes", []):
        u1, v1, u2, v2 = b["bbox"]
        if u1 < u2 and v1 < v2:  # inclusive pixel indices; a one-pixel-wide box has no inside to draw
            out.append(PrimitiveView("box", uv=np.array([u1, v1, u2, v2], dtype=float)))
    return out


def truth_plans(annotation: dict) -> list[PlanView]:
    """One ground-truth PlanView per annotated keyframe (stamp = keyframe time)."""
    from plan_stack.data.episodes import spec_of_format

    cam = annotation["camera"]
    frame = cam.get("frame_id", "")
    spec = spec_of_format(annotation["format"])
    plans = []
    for kf in annotation["keyframes"]:
        if spec is not None and spec.ground_path:
            pts = np.array([[x, y, 0.0] for x, y in kf["xy"]], dtype=float)
            prims = [PrimitiveView("drive_2d3d", "", DRIVE_EGO_FRAME, pts, np.array(_uv(kf["uv"])),
                                   float(annotation.get("horizon_s", 0.0)))]
            text = annotation.get("instruction", "")
        else:
            prims = [PrimitiveView("robot_2d3d", "" if arm == "single" else arm, frame,
                                   np.array(path["xyz"], dtype=float), np.array(_uv(path["uv"])))
                     for arm, path in kf["arms"].items()]
            text = kf.get("subtask", "")
        plans.append(make_plan(float(kf["t_s"]), text, [*_boxes(kf), *prims], annotation.get("instruction", "")))
    return plans


def camera_topic(name: str) -> str:
    return f"/cameras/{name}/image_raw"


def camera_of_topic(topic: str) -> str | None:
    m = re.fullmatch(r"/?cameras/([^/]+)/image_raw", topic)
    return m.group(1) if m else None


def nearest(items: Sequence[tuple[float, T]], t: float, tolerance_s: float) -> T | None:
    """The item of (time s, item) pairs whose time is nearest to `t`, if within `tolerance_s`; else None."""
    if not items:
        return None
    times = np.array([x[0] for x in items])
    k = int(np.argmin(np.abs(times - t)))
    return items[k][1] if abs(times[k] - t) <= tolerance_s + 1e-9 else None
