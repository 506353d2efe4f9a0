"""RViz markers of a plan as plain data (no ROS): the node copies each `MarkerSpec` into a
visualization_msgs/Marker field by field.

A plan becomes: one DELETEALL (so the previous plan's markers never linger,
however many it had), then per 3D primitive a line strip through its points,
a sphere list of its waypoints, a larger start sphere (whitened colour) and
a larger end sphere (full colour) (a `points` primitive, a set rather than
a path, gets the sphere list only), and one view-facing text marker with the
sub-task above the first point of the first 3D primitive. Points are copied
unchanged in the primitive's own frame (camera optical frame for robots,
ego frame for driving); nothing is transformed here.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from plan_stack.viz.config import VizStyle
from plan_stack.viz.plan import PlanView

__all__ = ["MarkerSpec", "plan_markers", "ADD", "DELETEALL", "LINE_STRIP", "SPHERE", "SPHERE_LIST",
           "TEXT_VIEW_FACING", "NAMESPACE"]

# visualization_msgs/Marker constants (copied so the library needs no *_msgs import; a test checks them).
ADD, DELETEALL = 0, 3
SPHERE, LINE_STRIP, SPHERE_LIST, TEXT_VIEW_FACING = 2, 4, 7, 9
NAMESPACE = "plan"
#: How much of the arm colour is blended with white for the start sphere.
START_WHITEN = 0.5


@dataclasses.dataclass(frozen=True)
class MarkerSpec:
    """One marker: `points` [N, 3] for lists and strips, `position` for single shapes and text."""

    action: int
    frame_id: str = ""
    stamp_s: float = 0.0
    ns: str = NAMESPACE
    id: int = 0
    type: int = 0
    scale: tuple[float, float, float] = (0.0, 0.0, 0.0)
    rgba: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    points: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3)))
    position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    text: str = ""
    role: str = ""  # what it draws: line, waypoints, start, end, subtask (marker ns suffix)


def plan_markers(plan: PlanView, style: VizStyle) -> list[MarkerSpec]:
    """DELETEALL, then the markers of every 3D primitive and the sub-task text (ids 0, 1, ...)."""
    out = [MarkerSpec(action=DELETEALL, stamp_s=plan.stamp_s, ns="")]
    a = style.alpha
    w, d = style.line_width_m, style.waypoint_diameter_m
    e = d * style.endpoint_scale
    for i, prim in enumerate(plan.primitives_3d):
        pts = np.asarray(prim.points, dtype=float)
        r, g, b = style.colour_of(prim.arm)
        rgba = (r, g, b, a)
        wr, wg, wb = (c + (1.0 - c) * START_WHITEN for c in (r, g, b))
        marker = functools.partial(MarkerSpec, action=ADD, frame_id=prim.frame_id, stamp_s=plan.stamp_s)
        ns = f"{NAMESPACE}/{i}_{prim.kind}{'_' + prim.arm if prim.arm else ''}"
        path = prim.kind != "points"  # a `points` primitive is a set, not a path: no line, no start/end
        if path and len(pts) >= 2:
            out.append(marker(ns=ns, type=LINE_STRIP, scale=(w, 0.0, 0.0), rgba=rgba, points=pts, role="line"))
        out.append(marker(ns=ns, type=SPHERE_LIST, scale=(d, d, d), rgba=rgba, points=pts, role="waypoints"))
        if path:
            out.append(marker(ns=ns, type=SPHERE, scale=(e, e, e), rgba=(wr, wg, wb, a), position=tuple(pts[0]),
                              role="start"))
            out.append(marker(ns=ns, type=SPHERE, scale=(e, e, e), rgba=rgba, position=tuple(pts[-1]), role="end"))
    first = plan.primitives_3d[0] if plan.primitives_3d else None
    if plan.subtask and first is not None:
        x, y, z = (float(c) for c in first.points[0])
        # Robots: optical frame, image up is -y. Driving (ego frame, z up): lift along +z.
        up = (0.0, 0.0, style.text_offset_m) if first.kind.startswith("drive") else (0.0, -style.text_offset_m, 0.0)
        out.append(MarkerSpec(action=ADD, frame_id=first.frame_id, stamp_s=plan.stamp_s, ns=f"{NAMESPACE}/subtask",
                              type=TEXT_VIEW_FACING, scale=(0.0, 0.0, style.text_height_m), rgba=(1.0, 1.0, 1.0, 1.0),
                              position=(x + up[0], y + up[1], z + up[2]), text=plan.subtask, role="subtask"))
    for k, m in enumerate(out):
        object.__setattr__(m, "id", k)
    return out
