"""draw_overlay: waypoint pixels take the arm colour, out-of-frame points are skipped, the rest is untouched."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_stack.viz.config import VizStyle, to_rgb8
from plan_stack.viz.overlay import draw_overlay
from plan_stack.viz.plan import PrimitiveView, VizError, make_plan

STYLE = VizStyle()
NAN = float("nan")
H, W = 120, 160


def _image(seed=0):
    return np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)


def _drawn(before, after):
    return np.any(before != after, axis=2)


def test_waypoints_take_the_arm_colour_and_the_rest_is_untouched():
    img = _image()
    uv_left = [20.2, 30.0, 40.0, 30.4, 60.0, 50.0]
    uv_right = [120.0, 90.0, 100.0, 100.0]
    plan = make_plan(0.0, "", [
        PrimitiveView("robot_2d3d", "left", "f", np.ones((3, 3)), uv_left),
        PrimitiveView("robot_2d3d", "right", "f", np.ones((2, 3)), uv_right)])
    out = draw_overlay(img, plan, STYLE)
    assert out is not img and np.array_equal(img, _image())  # input not modified
    for uv, arm in ((uv_left, "left"), (uv_right, "right")):
        for u, v in np.asarray(uv).reshape(-1, 2):
            assert tuple(out[int(round(v)), int(round(u))]) == STYLE.rgb8_of(arm)
    drawn = _drawn(img, out)
    # everything drawn lies near the waypoints or the segments between them; far pixels are untouched
    ys, xs = np.nonzero(drawn)
    assert drawn.sum() > 0
    assert np.array_equal(out[~drawn], img[~drawn])
    assert not drawn[:10, 140:].any() and not drawn[110:, :10].any()
    colours = {tuple(c) for c in out[drawn]}
    assert colours <= {STYLE.rgb8_of("left"), STYLE.rgb8_of("right")}


def test_out_of_frame_pairs_are_skipped_not_clamped():
    img = np.zeros((H, W, 3), np.uint8)
    plan = make_plan(0.0, "", [PrimitiveView("robot_2d3d", "", "f", np.ones((3, 3)), [80, 60, NAN, NAN, 10, 10])])
    out = draw_overlay(img, plan, STYLE)
    drawn = _drawn(img, out)
    # nothing on the border (a clamped point would land there), no line across the gap
    assert not drawn[0, :].any() and not drawn[:, 0].any() and not drawn[-1, :].any() and not drawn[:, -1].any()
    assert not drawn[35, 35]  # midway between (10,10) and (80,60): the line is broken by the <oof> pair
    assert tuple(out[60, 80]) == STYLE.rgb8_of("") and tuple(out[10, 10]) == STYLE.rgb8_of("")


def test_box_is_a_rectangle_in_the_box_colour():
    img = np.zeros((H, W, 3), np.uint8)
    out = draw_overlay(img, make_plan(0, "", [PrimitiveView("box", uv=[30, 40, 90, 100])]), STYLE)
    c = to_rgb8(STYLE.colour_box)
    assert tuple(out[40, 60]) == c and tuple(out[100, 60]) == c and tuple(out[70, 30]) == c
    assert not out[70, 60].any()  # inside stays untouched


def test_subtask_text_is_drawn_top_left_only():
    img = np.zeros((H, W, 3), np.uint8)
    out = draw_overlay(img, make_plan(0, "grasp", []), STYLE)
    drawn = _drawn(img, out)
    assert drawn[:30, :80].any() and not drawn[40:, :].any()
    assert np.array_equal(draw_overlay(img, make_plan(0, "grasp", []), STYLE, text=False), img)


def test_bad_image_is_refused():
    with pytest.raises(VizError, match="^image: expected"):
        draw_overlay(np.zeros((4, 4), np.uint8), make_plan(0, "", []), STYLE)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, W + 50), st.floats(-50, H + 50)), min_size=1, max_size=8))
def test_fuzz_waypoints_inside_the_image_are_coloured(points):
    img = _image(1)
    uv = np.asarray(points, dtype=float).reshape(-1)
    plan = make_plan(0, "", [PrimitiveView("points", uv=uv)])
    out = draw_overlay(img, plan, STYLE)
    for u, v in points:
        r, c = int(round(v)), int(round(u))
        if 0 <= r < H and 0 <= c < W:
            assert tuple(out[r, c]) == STYLE.rgb8_of("")
    drawn = _drawn(img, out)
    assert np.array_equal(out[~drawn], img[~drawn])
