"""viz.bag: annotations of every recorder become ground-truth plans; images and bags are read faithfully."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from plan_stack.viz.bag import annotation_for, bag_connections, image_array, plan_typestore, truth_plans
from plan_stack.viz.plan import VizError, check_plan


def _drive():
    return {"format": "plan_stack.drive_annotation/1", "instruction": "drive", "horizon_s": 4.0,
            "camera": {"name": "front", "frame_id": "front_camera_optical_frame"},
            "keyframes": [{"t_s": 2.0, "xy": [[1.0, 0.0], [3.0, 0.2]], "uv": [None, [100.5, 80.0]],
                           "in_image": [False, True], "boxes": [{"object": "car", "bbox": [5, 6, 20, 30]}]}]}


def _franka():
    return {"format": "plan_stack.franka_annotation/1", "instruction": "pick",
            "camera": {"name": "external", "frame_id": "external_camera_optical_frame"},
            "keyframes": [{"t_s": 0.5, "subtask": "reach", "arms": {"single": {
                "xyz": [[0.0, 0.1, 0.8], [0.0, 0.2, 0.7]], "uv": [[10, 20], [12, 22]], "in_image": [True, True]}},
                "boxes": [{"object": "cube", "bbox": [4, 4, 4, 9]}]}]}


def test_drive_annotation_is_an_ego_frame_drive_plan():
    (plan,) = truth_plans(_drive())
    check_plan(plan)
    box, path = plan.primitives
    assert box.kind == "box" and box.uv.tolist() == [5, 6, 20, 30]
    assert (path.kind, path.arm, path.frame_id, path.horizon_s) == ("drive_2d3d", "", "base_link", 4.0)
    np.testing.assert_array_equal(path.points, [[1.0, 0.0, 0.0], [3.0, 0.2, 0.0]])
    assert np.isnan(path.uv[:2]).all() and path.uv[2:].tolist() == [100.5, 80.0]
    assert plan.stamp_s == 2.0


def test_franka_single_arm_has_an_empty_arm_and_degenerate_boxes_are_dropped():
    (plan,) = truth_plans(_franka())
    check_plan(plan)
    (path,) = plan.primitives  # the one-pixel-wide box has no inside to draw
    assert (path.kind, path.arm, path.frame_id) == ("robot_2d3d", "", "external_camera_optical_frame")
    assert plan.subtask == "reach"


def test_annotation_beside_the_bag_and_unknown_formats(tmp_path):
    (tmp_path / "ep").mkdir()
    assert annotation_for(tmp_path / "ep") is None
    (tmp_path / "ep.json").write_text(json.dumps(_drive()))
    assert annotation_for(tmp_path / "ep")["format"] == "plan_stack.drive_annotation/1"
    (tmp_path / "ep.json").write_text(json.dumps({"format": "other/2"}))
    with pytest.raises(VizError, match="^annotation: .* has format 'other/2'"):
        annotation_for(tmp_path / "ep")


def test_image_array_handles_bgr_and_padding_and_refuses_the_rest():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    padded = np.zeros((2, 12), np.uint8)
    padded[:, :9] = rgb[:, :, ::-1].reshape(2, 9)
    msg = SimpleNamespace(encoding="bgr8", height=2, width=3, step=12, data=padded.reshape(-1))
    np.testing.assert_array_equal(image_array(msg), rgb)
    with pytest.raises(VizError, match="^image: encoding 'mono8'"):
        image_array(SimpleNamespace(encoding="mono8", height=2, width=3, step=3, data=np.zeros(6, np.uint8)))
    with pytest.raises(VizError, match="^image: 17 bytes"):
        image_array(SimpleNamespace(encoding="rgb8", height=2, width=3, step=9, data=np.zeros(17, np.uint8)))


def test_typestore_knows_plan_stack_messages_and_bad_bags_are_named(tmp_path):
    ts = plan_typestore()
    for name in ("VisualPlan", "Primitive", "Observation", "ActionChunk", "PlanFeatures"):
        assert f"plan_stack/msg/{name}" in ts.types
    with pytest.raises(VizError, match="^bag: cannot read"):
        bag_connections(tmp_path)
