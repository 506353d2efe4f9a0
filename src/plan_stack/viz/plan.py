"""A plan as plain data, and the checks that decide whether it can be drawn.

`PlanView` mirrors plan_stack/msg/VisualPlan (only what a picture needs);
`PrimitiveView` mirrors plan_stack/msg/Primitive. Points are metric [N, 3]
in `frame_id`; `uv` is the flattened pixel list (pairs for trajectories, a
NaN pair = out of frame; `(u1, v1, u2, v2)` for boxes). No ROS imports.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from plan_stack.stamps import sec_nanosec_to_s

__all__ = ["VizError", "KINDS", "ARMS", "PrimitiveView", "PlanView", "check_plan", "uv_pairs", "make_plan",
           "plan_from_fields", "stamp_s"]

#: Primitive kinds (msg/Primitive.msg).
KINDS = ("box", "robot_3d", "robot_2d3d", "drive_3d", "drive_2d3d", "points")
#: Arm names a primitive may carry (empty: single arm or driving).
ARMS = ("left", "right", "")
#: Kinds whose `uv` holds one pixel pair per point (the 2D half of a 2D+3D primitive).
_PAIRED = ("robot_2d3d", "drive_2d3d")
#: Kinds that carry no pixels.
_METRIC_ONLY = ("robot_3d", "drive_3d")


class VizError(ValueError):
    """A plan that cannot be drawn faithfully; the message names the primitive and the rule."""


@dataclasses.dataclass(frozen=True)
class PrimitiveView:
    kind: str
    arm: str = ""
    frame_id: str = ""
    points: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3)))  # [N, 3] m
    uv: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))  # [2N] or [4] px
    horizon_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class PlanView:
    stamp_s: float
    subtask: str = ""
    instruction: str = ""
    primitives: tuple[PrimitiveView, ...] = ()

    @property
    def primitives_3d(self) -> tuple[PrimitiveView, ...]:
        """Primitives with metric points (boxes have none)."""
        return tuple(p for p in self.primitives if p.kind != "box" and len(p.points))


def uv_pairs(prim: PrimitiveView) -> np.ndarray:
    """[N, 2] pixel pairs of a trajectory primitive (NaN rows are out of frame)."""
    return np.asarray(prim.uv, dtype=float).reshape(-1, 2)


def _check_primitive(i: int, p: PrimitiveView) -> None:
    where = f"primitives[{i}] ({p.kind!r})"
    if p.kind not in KINDS:
        raise VizError(f"{where}: unknown kind (known: {list(KINDS)})")
    if p.arm not in ARMS:
        raise VizError(f"{where}: unknown arm {p.arm!r} (known: left, right, empty)")
    pts = np.asarray(p.points, dtype=float)
    uv = np.asarray(p.uv, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise VizError(f"{where}: points must be [N, 3], got shape {pts.shape}")
    if not np.all(np.isfinite(pts)):
        raise VizError(f"{where}: points contain NaN or infinite values")
    if p.kind != "box" and len(pts) and not p.frame_id:
        raise VizError(f"{where}: points without a frame_id")
    if p.kind == "box":
        if uv.shape != (4,) or not np.all(np.isfinite(uv)):
            raise VizError(f"{where}: a box needs 4 finite uv values (u1, v1, u2, v2), got {uv.tolist()}")
        if not (uv[0] < uv[2] and uv[1] < uv[3]):
            raise VizError(f"{where}: box corners need u1 < u2 and v1 < v2, got {uv.tolist()}")
        return
    if p.kind in _METRIC_ONLY and uv.size:
        raise VizError(f"{where}: carries {uv.size} uv values, expected none")
    if p.kind in _METRIC_ONLY and not len(pts):
        raise VizError(f"{where}: no points")
    if uv.size % 2:
        raise VizError(f"{where}: uv length {uv.size} is odd (pixel pairs expected)")
    if p.kind in _PAIRED and uv.size != 2 * len(pts):
        raise VizError(f"{where}: uv length {uv.size} does not match {len(pts)} points (expected {2 * len(pts)})")
    pairs = uv.reshape(-1, 2)
    if np.any(np.isnan(pairs[:, 0]) != np.isnan(pairs[:, 1])):
        raise VizError(f"{where}: half an out-of-frame pair (u and v must both be NaN)")
    if np.any(np.isinf(pairs)):
        raise VizError(f"{where}: uv contains infinite values")
    if not len(pts) and not uv.size:
        raise VizError(f"{where}: neither points nor uv")


def check_plan(plan: PlanView) -> PlanView:
    """Return `plan` when every primitive can be drawn; VizError naming the first broken one otherwise.

    Rules: known kind and arm; points finite, [N, 3] and with a frame; boxes
    have 4 finite corners in order; 3D-only kinds carry no uv; 2D+3D kinds
    one pixel pair per point; NaN only as whole pairs (out of frame).
    """
    for i, p in enumerate(plan.primitives):
        _check_primitive(i, p)
    return plan


def make_plan(stamp_s: float, subtask: str, primitives: Sequence[PrimitiveView], instruction: str = "") -> PlanView:
    """A PlanView with arrays normalised (points [N, 3] float, uv [M] float)."""
    prims = tuple(dataclasses.replace(p, points=np.asarray(p.points, dtype=float).reshape(-1, 3),
                                      uv=np.asarray(p.uv, dtype=float).reshape(-1)) for p in primitives)
    return PlanView(stamp_s=float(stamp_s), subtask=subtask, instruction=instruction, primitives=prims)


def stamp_s(stamp) -> float:
    """builtin_interfaces/Time (rclpy or rosbags object) -> seconds."""
    return sec_nanosec_to_s(stamp.sec, stamp.nanosec)


def plan_from_fields(msg) -> PlanView:
    """A VisualPlan message's drawable content as plain arrays (not checked: see `check_plan`).

    Reads attributes only, so rclpy messages and `rosbags` messages (bags) convert the same way.
    """
    prims = [PrimitiveView(kind=p.kind, arm=p.arm, frame_id=p.frame_id,
                           points=np.array([(q.x, q.y, q.z) for q in p.points], dtype=float).reshape(-1, 3),
                           uv=np.asarray(p.uv, dtype=float), horizon_s=float(p.horizon_s))
             for p in msg.primitives]
    return make_plan(stamp_s(msg.header.stamp), msg.subtask, prims, msg.instruction)
