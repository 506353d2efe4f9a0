"""Franka tabletop physics and rendering without ROS.

`FrankaSim` is the joint-position-controlled arm plus the Franka Hand, as a
real robot's controllers expose them: a 7-joint position command (real
joint convention, rad) tracked by the asset's position servos, and a
gripper that moves to a commanded width at a commanded speed (franka_gripper
`move` semantics: the width reference ramps at that speed; closing on an
object stalls the fingers against it at the servo's force limit, which is
how a `grasp` holds). `Cameras` renders the external and wrist cameras
(construct, use and close on one thread: the GL context is thread-bound).
"""
from __future__ import annotations

import math

import numpy as np

from plan_stack.camera import optical_pose, pinhole_model, segmentation_ids
from plan_stack.embodiments.franka.model import (
    ARM_JOINTS,
    CAMERAS,
    CUBE_HALF_M,
    FINGER_JOINTS,
    MAX_WIDTH_M,
    READY_POSE,
    FrankaModelError,
    load_model,
    model_to_real,
    real_to_model,
)

__all__ = ["FrankaSim", "Cameras", "MAX_GRIPPER_SPEED_MPS"]

MAX_GRIPPER_SPEED_MPS = 0.1  # Franka Hand datasheet


class FrankaSim:
    """The tabletop Panda; physics step 2 ms (the asset's)."""

    def __init__(self, offscreen_size: tuple[int, int] = (640, 480)) -> None:
        import mujoco

        self._mj = mujoco
        self.model = m = load_model(offscreen_size)
        self.data = mujoco.MjData(m)
        self._qadr = np.array([m.joint(j).qposadr[0] for j in ARM_JOINTS])
        self._vadr = np.array([m.joint(j).dofadr[0] for j in ARM_JOINTS])
        self._fadr = np.array([m.joint(j).qposadr[0] for j in FINGER_JOINTS])
        act_joint = [m.joint(m.actuator_trnid[i, 0]).name for i in range(m.nu)]
        self._arm_ctrl = np.array([act_joint.index(j) for j in ARM_JOINTS])
        self._finger_ctrl = np.array([act_joint.index(j) for j in FINGER_JOINTS])
        self._lo = m.actuator_ctrlrange[self._arm_ctrl, 0].copy()
        self._hi = m.actuator_ctrlrange[self._arm_ctrl, 1].copy()
        self._cube_adr = m.joint("cube").qposadr[0]
        self._target_geom = m.geom("target").id
        self._tcp = m.site("end_effector").id
        self.command = np.array(READY_POSE)
        self.reset(seed=0)

    @property
    def command_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) position targets the 7 arm servos accept (rad, real convention)."""
        a, b = model_to_real(self._lo.copy()), model_to_real(self._hi.copy())
        return np.minimum(a, b), np.maximum(a, b)

    @property
    def timestep_s(self) -> float:
        return float(self.model.opt.timestep)

    @property
    def time_s(self) -> float:
        return float(self.data.time)

    def reset(self, seed: int | None = 0, cube_xy=None, target_xy=None) -> tuple[np.ndarray, np.ndarray]:
        """Ready pose, open gripper; cube and place target sampled from `seed` (or given). Returns (cube, target) xy."""
        mj = self._mj
        mj.mj_resetData(self.model, self.data)
        rng = np.random.default_rng(seed)
        cube = np.asarray(cube_xy if cube_xy is not None else [rng.uniform(0.45, 0.6), rng.uniform(-0.2, -0.05)])
        target = np.asarray(target_xy if target_xy is not None else [rng.uniform(0.45, 0.6), rng.uniform(0.1, 0.22)])
        self.data.qpos[self._cube_adr:self._cube_adr + 7] = [cube[0], cube[1], CUBE_HALF_M, 1, 0, 0, 0]
        self.model.geom_pos[self._target_geom][:2] = target
        self.data.qpos[self._qadr] = real_to_model(np.array(READY_POSE))
        self.data.qpos[self._fadr] = MAX_WIDTH_M / 2
        self.width_ref = MAX_WIDTH_M
        self._width_goal, self._width_speed = MAX_WIDTH_M, MAX_GRIPPER_SPEED_MPS
        self.set_command(np.array(READY_POSE))
        mj.mj_forward(self.model, self.data)
        return cube, target

    def set_command(self, q_real: np.ndarray) -> np.ndarray:
        """7 joint position targets (rad, real convention); returns what was sent after clipping to the servo range."""
        q = np.asarray(q_real, dtype=float).reshape(7)
        if not np.all(np.isfinite(q)):
            raise FrankaModelError("command: non-finite joint target")
        ctrl = np.clip(real_to_model(q), self._lo, self._hi)
        self.data.ctrl[self._arm_ctrl] = ctrl
        self.command = model_to_real(ctrl)
        return self.command

    def move_gripper(self, width_m: float, speed_mps: float) -> tuple[float, float]:
        """Start moving to `width_m` at `speed_mps` (both clipped to the hand's range); returns them."""
        if not (math.isfinite(width_m) and math.isfinite(speed_mps)) or speed_mps <= 0:
            raise FrankaModelError("gripper: width must be finite and speed finite and positive")
        self._width_goal = float(np.clip(width_m, 0.0, MAX_WIDTH_M))
        self._width_speed = float(min(speed_mps, MAX_GRIPPER_SPEED_MPS))
        return self._width_goal, self._width_speed

    def step(self, n: int = 1) -> None:
        dt = self.timestep_s
        for _ in range(n):
            delta = self._width_goal - self.width_ref
            self.width_ref += float(np.clip(delta, -self._width_speed * dt, self._width_speed * dt))
            self.data.ctrl[self._finger_ctrl] = self.width_ref / 2
            self._mj.mj_step(self.model, self.data)

    def joint_positions(self) -> np.ndarray:
        """7 arm angles (rad, real convention)."""
        return model_to_real(self.data.qpos[self._qadr])

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._vadr].copy()

    def gripper_width(self) -> float:
        return float(self.data.qpos[self._fadr].sum())

    def cube_pose(self) -> np.ndarray:
        return self.data.qpos[self._cube_adr:self._cube_adr + 7].copy()

    def target_xy(self) -> np.ndarray:
        return self.model.geom_pos[self._target_geom][:2].copy()

    def tcp_pose(self) -> np.ndarray:
        """World pose [x, y, z, qw, qx, qy, qz] of the tool centre point (between the fingertips)."""
        quat = np.zeros(4)
        self._mj.mju_mat2Quat(quat, self.data.site_xmat[self._tcp])
        return np.concatenate([self.data.site_xpos[self._tcp], quat])

    def success(self) -> bool:
        """Cube resting on the table inside the place target, and released."""
        cube = self.cube_pose()
        inside = np.all(np.abs(cube[:2] - self.target_xy()) <= 0.05)
        resting = cube[2] < CUBE_HALF_M + 0.005
        return bool(inside and resting and self.gripper_width() > 2 * CUBE_HALF_M + 0.005)


class Cameras:
    """Offscreen renderer for the external and wrist cameras. Thread contract: one thread for all calls."""

    def __init__(self, sim: FrankaSim, width: int, height: int, cameras: tuple[str, ...] = tuple(CAMERAS)) -> None:
        import mujoco

        unknown = [c for c in cameras if c not in CAMERAS]
        if unknown:
            raise FrankaModelError(f"cameras: unknown camera(s) {unknown} (known: {sorted(CAMERAS)})")
        gl = sim.model.vis.global_
        if width > gl.offwidth or height > gl.offheight:
            raise FrankaModelError(f"width/height: {width}x{height} exceeds the offscreen buffer {gl.offwidth}x{gl.offheight}")
        self.sim, self.cameras = sim, tuple(cameras)
        self.models = {n: pinhole_model(sim.model, sim.model.camera(CAMERAS[n]).id, n, width, height)
                       for n in self.cameras}
        from plan_stack.embodiments.gl_backend import choose_backend

        choose_backend()  # a working offscreen backend (EGL, then OSMesa) unless MUJOCO_GL is set
        self._renderer = mujoco.Renderer(sim.model, height=int(height), width=int(width))

    def render(self, name: str) -> np.ndarray:
        self._renderer.update_scene(self.sim.data, camera=CAMERAS[name])
        return self._renderer.render().copy()

    def segmentation(self, name: str) -> np.ndarray:
        """[H, W] geom id per pixel (-1 background), for boxes."""
        return segmentation_ids(self._renderer, self.sim.data, CAMERAS[name])

    def pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """World pose of the camera's optical frame (position, world_R_optical)."""
        return optical_pose(self.sim.data, self.sim.model.camera(CAMERAS[name]).id)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
