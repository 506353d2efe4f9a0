"""Franka tabletop model and sim: conventions, servo tracking, gripper move semantics, cameras."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.camera import project_points, world_to_camera
from plan_stack.embodiments.franka.model import READY_POSE, FrankaModelError, model_to_real, real_to_model
from plan_stack.embodiments.franka.sim import MAX_GRIPPER_SPEED_MPS, Cameras, FrankaSim
from plan_stack.trajectory.core import Trajectory, TrajectoryFollower


@pytest.fixture(scope="module")
def sim():
    return FrankaSim(offscreen_size=(96, 72))


def test_ready_pose_matches_the_real_robot(sim):
    sim.reset(seed=0)
    tcp = sim.tcp_pose()
    # datasheet ready pose: hand pointing straight down about 0.31 m in front of the base
    assert tcp[:3] == pytest.approx([0.307, 0.0, 0.487], abs=0.01)
    z_axis = np.array(sim.data.site_xmat[sim._tcp]).reshape(3, 3)[:, 2]
    assert z_axis[2] < -0.99
    assert np.allclose(model_to_real(real_to_model(np.array(READY_POSE))), READY_POSE)
    assert sim.gripper_width() == pytest.approx(0.08)


def test_servos_track_a_joint_trajectory(sim):
    sim.reset(seed=0)
    names = tuple(f"j{i}" for i in range(7))
    follower = TrajectoryFollower(names, np.array(READY_POSE))
    goal = np.array(READY_POSE) + np.array([0.4, 0.2, -0.2, 0.3, 0.2, -0.2, 0.4])
    follower.set_trajectory(Trajectory(names, 0.0, np.array([1.2]), goal[None], np.zeros((1, 7)), np.zeros((1, 7))),
                            sim.time_s)
    err = 0.0
    for _ in range(int(1.6 / sim.timestep_s)):
        ref = follower.sample(sim.time_s)
        sim.set_command(ref.positions)
        sim.step()
        err = max(err, float(np.abs(ref.positions - sim.joint_positions()).max()))
    assert err < 0.1
    assert np.abs(sim.joint_positions() - goal).max() < 0.01
    with pytest.raises(FrankaModelError, match="^command"):
        sim.set_command(np.full(7, np.nan))


def test_gripper_moves_at_the_commanded_speed_within_the_hand_range(sim):
    sim.reset(seed=0)
    assert sim.move_gripper(0.04, 0.05) == (0.04, 0.05)
    sim.step(int(0.2 / sim.timestep_s))
    assert sim.gripper_width() == pytest.approx(0.07, abs=0.004)  # 0.05 m/s for 0.2 s
    sim.step(int(0.6 / sim.timestep_s))
    assert sim.gripper_width() == pytest.approx(0.04, abs=0.002)
    assert sim.move_gripper(0.5, 1.0) == (0.08, MAX_GRIPPER_SPEED_MPS)  # clipped to the hand's range
    with pytest.raises(FrankaModelError, match="^gripper"):
        sim.move_gripper(0.04, 0.0)


def test_cameras_see_the_cube(sim):
    sim.reset(seed=0)
    cams = Cameras(sim, 96, 72)
    try:
        for name in ("external", "wrist"):
            img = cams.render(name)
            assert img.shape == (72, 96, 3) and img.std() > 5.0
        uv, inside = project_points(world_to_camera(sim.cube_pose()[None, :3], cams.pose("external")),
                                    cams.models["external"])
        assert inside[0]
        px = cams.render("external")[int(round(uv[0, 1])), int(round(uv[0, 0]))].astype(int)
        assert px[0] > px[1] + 60  # the red cube is where the camera model projects it
    finally:
        cams.close()
    with pytest.raises(FrankaModelError, match="^cameras"):
        Cameras(sim, 96, 72, ("top",))
