"""plan_markers: exactly the plan's points and frames, DELETEALL first, one colour per arm."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.viz import markers as M
from plan_stack.viz.config import VizStyle
from plan_stack.viz.plan import PrimitiveView, make_plan

STYLE = VizStyle()


def _plan():
    left = PrimitiveView("robot_2d3d", "left", "cam_high_optical_frame",
                         [[0.1, 0.0, 0.5], [0.12, 0.01, 0.52], [0.15, 0.02, 0.55]], [1, 2, 3, 4, 5, 6])
    right = PrimitiveView("robot_3d", "right", "cam_high_optical_frame", [[-0.1, 0.0, 0.5], [-0.2, 0.0, 0.6]])
    box = PrimitiveView("box", uv=[1, 2, 3, 4])
    return make_plan(12.25, "grasp the cube", [left, box, right])


def test_constants_match_visualization_msgs():
    Marker = pytest.importorskip("visualization_msgs.msg").Marker
    assert (M.ADD, M.DELETEALL) == (Marker.ADD, Marker.DELETEALL)
    assert (M.SPHERE, M.LINE_STRIP, M.SPHERE_LIST, M.TEXT_VIEW_FACING) == (
        Marker.SPHERE, Marker.LINE_STRIP, Marker.SPHERE_LIST, Marker.TEXT_VIEW_FACING)


def test_markers_carry_exactly_the_plans_points_and_frames():
    plan = _plan()
    out = M.plan_markers(plan, STYLE)
    assert out[0].action == M.DELETEALL
    assert [m.id for m in out] == list(range(len(out)))
    assert all(m.stamp_s == 12.25 for m in out)
    for prim in plan.primitives_3d:
        mine = [m for m in out if m.ns.endswith(prim.arm)]
        by_role = {m.role: m for m in mine}
        assert set(by_role) == {"line", "waypoints", "start", "end"}
        for m in mine:
            assert m.frame_id == prim.frame_id and m.action == M.ADD
        np.testing.assert_array_equal(by_role["line"].points, prim.points)
        np.testing.assert_array_equal(by_role["waypoints"].points, prim.points)
        assert by_role["start"].position == tuple(prim.points[0])
        assert by_role["end"].position == tuple(prim.points[-1])
        assert by_role["end"].scale[0] == pytest.approx(STYLE.waypoint_diameter_m * STYLE.endpoint_scale)
        assert by_role["line"].rgba[:3] == STYLE.colour_of(prim.arm)
    # no marker for the box (2D only), one text marker with the sub-task
    texts = [m for m in out if m.type == M.TEXT_VIEW_FACING]
    assert len(texts) == 1 and texts[0].text == "grasp the cube"
    assert len(out) == 1 + 4 + 4 + 1
    assert STYLE.colour_left != STYLE.colour_right


def test_two_point_primitive_and_single_point():
    one = make_plan(0.0, "", [PrimitiveView("robot_3d", "", "f", [[0, 0, 1]])])
    roles = [m.role for m in M.plan_markers(one, STYLE)[1:]]
    assert roles == ["waypoints", "start", "end"]  # a single point has no line strip


def test_empty_plan_still_clears():
    out = M.plan_markers(make_plan(3.0, "idle", []), STYLE)
    assert [m.action for m in out] == [M.DELETEALL]


def test_driving_text_floats_up_in_z():
    plan = make_plan(0.0, "keep lane", [PrimitiveView("drive_3d", "", "base_link", [[2, 0, 0], [4, 0, 0]])])
    text = M.plan_markers(plan, STYLE)[-1]
    assert text.frame_id == "base_link" and text.position == (2.0, 0.0, STYLE.text_offset_m)


def test_points_primitive_is_a_set_not_a_path():
    plan = make_plan(0.0, "", [PrimitiveView("points", "", "f", [[0, 0, 1], [0, 1, 1], [1, 0, 1]])])
    (spheres,) = M.plan_markers(plan, STYLE)[1:]
    assert spheres.type == M.SPHERE_LIST and len(spheres.points) == 3
