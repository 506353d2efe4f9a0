"""AlohaSim / CameraRenderer: reset, commands, ground truth and renderer contracts (no ROS)."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.aloha.model import START_ARM_POSE, AlohaModelError
from plan_stack.embodiments.aloha.sim import AlohaSim, CameraRenderer


@pytest.fixture(scope="module")
def sim():
    return AlohaSim("transfer_cube", offscreen_size=(64, 48))


def test_reset_is_seeded_and_starts_at_rest(sim):
    a = sim.reset(seed=5)
    b = sim.reset(seed=5)
    assert np.array_equal(a, b) and not np.array_equal(a, sim.reset(seed=6))
    q = sim.joint_positions()
    assert np.allclose(q[:6], START_ARM_POSE) and np.allclose(q[7:13], START_ARM_POSE)
    assert sim.time_s == 0.0 and sim.reward() == 0


def test_command_is_followed_and_clipped(sim):
    sim.reset(seed=0)
    target = sim.joint_positions()
    target[0] += 0.2
    target[6] = 1.0  # beyond the finger travel: clipped to 0.057 m
    sent = sim.set_command(target)
    assert sent[6] == pytest.approx(0.057)
    sim.step(500)
    assert abs(sim.joint_positions()[0] - target[0]) < 0.02
    with pytest.raises(AlohaModelError, match="^command: non-finite"):
        sim.set_command(np.full(14, np.nan))


def test_ground_truth_poses(sim):
    sim.reset(seed=0)
    box = sim.object_poses()["box"]
    assert box.shape == (7,) and np.isclose(np.linalg.norm(box[3:]), 1.0)
    tcp = sim.tcp_poses()
    assert tcp["left"][0] < 0 < tcp["right"][0]  # left arm on the -x side
    assert np.allclose(sim.tcp_positions()[1], tcp["right"][:3])


def test_renderer_contract(sim):
    with pytest.raises(AlohaModelError, match="^width/height:"):
        CameraRenderer(sim, 640, 480)
    with pytest.raises(AlohaModelError, match="^cameras: unknown camera"):
        CameraRenderer(sim, 64, 48, ("cam_low",))
    r = CameraRenderer(sim, 64, 48)
    try:
        images = r.render_all()
        assert set(images) == {"cam_high", "cam_left_wrist", "cam_right_wrist"}
        assert all(im.shape == (48, 64, 3) and im.dtype == np.uint8 for im in images.values())
        seg = r.segmentation("cam_high")
        box_geom = sim.model.geom("red_box").id
        assert seg.shape == (48, 64) and np.any(seg == box_geom)
    finally:
        r.close()


#: shoulder and elbow that bring both grippers to the middle of the workspace, into each other
MEETING = {"shoulder": 0.15, "elbow": -0.68}


def test_arm_contacts_are_between_the_two_arms_left_geom_first(sim):
    sim.reset(seed=0)
    sim.step(50)
    assert sim.arm_contacts() == []  # start pose; the box on the table is no arm contact either
    target = sim.joint_positions()
    for arm in (0, 7):
        target[arm + 1], target[arm + 2] = MEETING["shoulder"], MEETING["elbow"]
    sim.set_command(target)
    sim.step(750)
    contacts = sim.arm_contacts()
    assert contacts, "the grippers were driven into each other"
    assert all(a.startswith("vx300s_left/") and b.startswith("vx300s_right/") for a, b, _ in contacts)
    assert all(f >= 0 for *_, f in contacts) and max(f for *_, f in contacts) > 40.0  # pressed: a collision
