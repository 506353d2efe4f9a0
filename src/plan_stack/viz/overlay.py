"""2D plans drawn on a camera image (numpy, rgb8), without ROS.

What is drawn, in this order (later on top): the sub-task text in the
top-left corner (wrapped at the image width); boxes as rectangles; each
trajectory as line segments between consecutive in-frame waypoints (an
out-of-frame `<oof>` pair, NaN in `uv`, is skipped and breaks the line: it is
never clamped to the border); a dot at every waypoint; a ring around the
start and a large dot at the end.
Drawing is aliased (OpenCV LINE_8) so every pixel a primitive paints has the
arm's colour and every other pixel keeps its input value. Pixel (u, v) is
column u, row v, rounded to the nearest integer.
"""
from __future__ import annotations

import numpy as np

from plan_stack.viz.config import VizStyle, to_rgb8
from plan_stack.viz.plan import PlanView, PrimitiveView, VizError, uv_pairs

__all__ = ["draw_overlay", "draw_primitive", "draw_text"]

_TRAJECTORY_KINDS = ("robot_2d3d", "drive_2d3d")


def _cv2():
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - opencv is in the lock
        raise VizError("overlay drawing needs OpenCV: pip install opencv-python-headless") from exc
    return cv2


def _check_image(image: np.ndarray) -> None:
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise VizError(f"image: expected [H, W, 3] uint8 (rgb8), got {image.shape} {image.dtype}")


def draw_primitive(canvas: np.ndarray, prim: PrimitiveView, style: VizStyle,
                   colour: tuple[int, int, int] | None = None) -> None:
    """Draw one primitive's 2D part on `canvas` in place (no-op for 3D-only kinds)."""
    cv2 = _cv2()
    lt = cv2.LINE_8
    if prim.kind == "box":
        c = colour or to_rgb8(style.colour_box)
        u1, v1, u2, v2 = (int(round(x)) for x in np.asarray(prim.uv, dtype=float))
        cv2.rectangle(canvas, (u1, v1), (u2, v2), c, style.line_px, lt)
        return
    pairs = uv_pairs(prim)
    if not len(pairs):
        return
    c = colour or style.rgb8_of(prim.arm)
    inside = ~np.isnan(pairs[:, 0])
    px = np.zeros((len(pairs), 2), dtype=np.int64)
    px[inside] = np.rint(pairs[inside]).astype(np.int64)
    connect = prim.kind in _TRAJECTORY_KINDS
    if connect:
        for k in range(len(pairs) - 1):
            if inside[k] and inside[k + 1]:
                cv2.line(canvas, tuple(map(int, px[k])), tuple(map(int, px[k + 1])), c, style.line_px, lt)
    for j in np.flatnonzero(inside):
        cv2.circle(canvas, tuple(map(int, px[j])), style.point_radius_px, c, -1, lt)
    if connect:
        if inside[0]:
            cv2.circle(canvas, tuple(map(int, px[0])), style.endpoint_radius_px, c, style.line_px, lt)
        if inside[-1]:
            cv2.circle(canvas, tuple(map(int, px[-1])), style.endpoint_radius_px, c, -1, lt)


def draw_text(canvas: np.ndarray, text: str, style: VizStyle, row: int = 0) -> int:
    """White text with a black outline, top-left from line `row`, wrapped at the image width.

    Returns the number of lines written (0 for empty text).
    """
    if not text:
        return 0
    cv2 = _cv2()
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, style.font_scale
    lines: list[str] = []
    for word in text.split():
        trial = f"{lines[-1]} {word}" if lines else word
        if lines and cv2.getTextSize(trial, font, scale, 1)[0][0] + 8 > canvas.shape[1]:
            lines.append(word)
        else:
            lines[-1:] = [trial]
    (_, h), base = cv2.getTextSize("Ag", font, scale, 1)
    for k, line in enumerate(lines):
        y = 4 + (row + k + 1) * (h + base + 2)
        for colour, thick in (((0, 0, 0), 3), ((255, 255, 255), 1)):
            cv2.putText(canvas, line, (4, y), font, scale, colour, thick, cv2.LINE_8)
    return len(lines)


def draw_overlay(image: np.ndarray, plan: PlanView, style: VizStyle, *, text: bool = True,
                 colour: tuple[int, int, int] | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """A copy of `image` [H, W, 3] uint8 with the plan's 2D primitives (and sub-task) drawn on it.

    `colour` forces one colour for everything (ground truth in renders);
    `out` draws on a given canvas instead of a fresh copy (layering).
    """
    _check_image(image)
    canvas = np.array(image, copy=True) if out is None else out
    if text:  # first, so the text never hides a waypoint
        draw_text(canvas, plan.subtask, style)
    for prim in sorted(plan.primitives, key=lambda p: p.kind != "box"):  # boxes below trajectories
        draw_primitive(canvas, prim, style, colour)
    return canvas
