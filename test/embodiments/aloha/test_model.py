"""model: in-memory patches, joint/gripper conventions, camera model."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.aloha.model import (
    JOINT_NAMES,
    WELD_SOLIMP,
    AlohaModelError,
    camera_model,
    gripper_from_joint,
    gripper_to_joint,
    joint_to_stack,
    load_model,
    stack_to_joint,
)


def test_joint_order_per_arm():
    assert JOINT_NAMES[:7] == ("left_waist", "left_shoulder", "left_elbow", "left_forearm_roll",
                               "left_wrist_angle", "left_wrist_rotate", "left_gripper")
    assert JOINT_NAMES[7:] == tuple(n.replace("left", "right") for n in JOINT_NAMES[:7])


def test_end_effector_model_has_stiffened_welds_and_no_shadows():
    import mujoco

    m = load_model("transfer_cube", end_effector=True)
    welds = [i for i in range(m.neq) if m.eq_type[i] == mujoco.mjtEq.mjEQ_WELD]
    assert len(welds) == 2
    for i in welds:
        assert np.allclose(m.eq_solimp[i, :3], WELD_SOLIMP)
    assert m.vis.quality.shadowsize == 0 and m.vis.quality.offsamples == 0
    assert m.site("left_tcp").id >= 0 and m.site("right_tcp").id >= 0


def test_unknown_task_and_camera():
    with pytest.raises(AlohaModelError, match="^task: unknown task"):
        load_model("fold_towel")
    m = load_model("insertion")
    with pytest.raises(AlohaModelError, match="^camera: unknown camera"):
        camera_model(m, "top", 10, 10)


def test_gripper_normalisation_round_trips():
    g = np.linspace(0, 1, 5)
    assert np.allclose(gripper_from_joint(gripper_to_joint(g)), g)
    q = np.arange(14, dtype=float) / 20
    assert np.allclose(joint_to_stack(stack_to_joint(q)), q)
    assert np.allclose(stack_to_joint(q)[:6], q[:6])


def test_intrinsics_from_fovy():
    m = load_model()
    cam = camera_model(m, "cam_high", 640, 480)
    fovy = np.radians(m.cam_fovy[m.camera("top").id])
    assert np.isclose(2 * np.degrees(np.arctan(240 / cam.fy)), np.degrees(fovy))
    assert (cam.cx, cam.cy) == (319.5, 239.5) and cam.fx == cam.fy
