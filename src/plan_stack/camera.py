"""Pinhole cameras of the MuJoCo simulators, without ROS: intrinsics, optical-frame poses, projection
and segmentation, shared by every embodiment (ALOHA, Franka, driving) and their annotations.

Conventions: the optical frame is x right, y down, z forward (ROS/OpenCV); pixel centres sit on
integers, so the centre of pixel (0, 0) is (0, 0).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["CameraModel", "pinhole_model", "optical_pose", "world_to_camera", "project_points",
           "segmentation_ids"]

#: MuJoCo cameras look down -z with y up; the optical frame looks down +z with y down.
MJ_TO_OPTICAL = np.diag([1.0, -1.0, -1.0])
#: mjtObj.mjOBJ_GEOM in MuJoCo's segmentation render (channel 1).
_MJOBJ_GEOM = 5


@dataclasses.dataclass(frozen=True)
class CameraModel:
    """Pinhole intrinsics of a rendered camera (pixels; centre of pixel (0,0) is (0,0))."""

    name: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    @property
    def K(self) -> np.ndarray:
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])



def pinhole_model(model, cam_id: int, name: str, width: int, height: int) -> CameraModel:
    """Intrinsics matching MuJoCo's rendering of camera `cam_id`: vertical `fovy`, square pixels.

    MuJoCo's image plane spans the whole image symmetrically, so the optical
    axis hits the image centre, which is (W-1)/2, (H-1)/2 in the ROS/OpenCV
    convention where pixel centres sit on integers.
    """
    f = 0.5 * height / math.tan(0.5 * math.radians(float(model.cam_fovy[cam_id])))
    return CameraModel(name, int(width), int(height), f, f, (width - 1) / 2.0, (height - 1) / 2.0)


def optical_pose(data, cam_id: int) -> tuple[np.ndarray, np.ndarray]:
    """World pose of camera `cam_id`'s optical frame: (position [3], rotation [3, 3] world_R_optical).

    Needs `mj_forward`/`mj_step` (or kinematics + camlight) to have run: tracking cameras move.
    """
    rot = np.asarray(data.cam_xmat[cam_id]).reshape(3, 3) @ MJ_TO_OPTICAL
    return np.array(data.cam_xpos[cam_id]), rot


def segmentation_ids(renderer, data, camera, scene_option=None) -> np.ndarray:
    """[H, W] geom id per pixel (-1 for background or non-geom objects) from a `mujoco.Renderer`;
    leaves the renderer in RGB mode."""
    renderer.enable_segmentation_rendering()
    try:
        if scene_option is None:
            renderer.update_scene(data, camera=camera)
        else:
            renderer.update_scene(data, camera=camera, scene_option=scene_option)
        seg = renderer.render()
    finally:
        renderer.disable_segmentation_rendering()
    ids = seg[:, :, 0].astype(np.int64)
    ids[seg[:, :, 1] != _MJOBJ_GEOM] = -1
    return ids


def world_to_camera(points_world: np.ndarray, pose: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """[N, 3] world points -> [N, 3] points in the optical frame (m)."""
    pos, rot = pose
    return (np.asarray(points_world, dtype=float) - pos) @ rot


def project_points(points_cam: np.ndarray, cam: CameraModel) -> tuple[np.ndarray, np.ndarray]:
    """[N, 3] optical-frame points -> ([N, 2] pixel u,v, [N] inside-image mask).

    A point behind the camera (z <= 0) is outside; its u,v are NaN.
    """
    p = np.asarray(points_cam, dtype=float).reshape(-1, 3)
    z = p[:, 2]
    front = z > 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(front, cam.fx * p[:, 0] / z + cam.cx, np.nan)
        v = np.where(front, cam.fy * p[:, 1] / z + cam.cy, np.nan)
    inside = front & (u >= -0.5) & (u <= cam.width - 0.5) & (v >= -0.5) & (v <= cam.height - 0.5)
    return np.stack([u, v], axis=1), inside
