"""camera: projection, MuJoCo intrinsics/poses and segmentation shared by the simulators."""
from __future__ import annotations

import numpy as np

from plan_stack.camera import CameraModel, project_points, world_to_camera


def test_projection_marks_points_outside_and_behind():
    cam = CameraModel("c", 100, 80, 50.0, 50.0, 49.5, 39.5)
    uv, inside = project_points(np.array([[0, 0, 1.0], [10, 0, 1.0], [0, 0, -1.0]]), cam)
    assert np.allclose(uv[0], [49.5, 39.5]) and inside.tolist() == [True, False, False]
    assert np.all(np.isnan(uv[2]))


def test_world_to_camera_inverts_the_optical_pose():
    rot = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])  # optical z = world x
    pose = (np.array([1.0, 2.0, 3.0]), rot)
    p_cam = np.array([[0.1, -0.2, 2.0]])
    assert np.allclose(world_to_camera(pose[0] + p_cam @ rot.T, pose), p_cam)


def test_drive_front_camera_segmentation_has_geoms_and_background():
    """`segmentation_ids` through the driving camera (scene option hiding the ego body): geom ids, -1 sky."""
    from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, FrontCamera
    from plan_stack.embodiments.drive.vehicle import VehicleParams

    sim = DriveSim(DriveSceneConfig(), VehicleParams(), seed=0, offscreen_size=(96, 72))
    cam = FrontCamera(sim, 96, 72)
    try:
        seg = cam.segmentation()
        rgb = cam.render()  # back to RGB after segmentation
    finally:
        cam.close()
    assert seg.shape == (72, 96) and seg.dtype == np.int64
    assert (seg == -1).any() and (seg >= 0).any()
    assert rgb.shape == (72, 96, 3) and rgb.std() > 5.0
