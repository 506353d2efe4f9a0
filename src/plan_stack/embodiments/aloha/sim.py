"""ALOHA physics and rendering without ROS.

`AlohaSim` is the joint-position-controlled rig (what a real ALOHA's
controllers expose): set a 14-joint command in joint units, step, read joint
states, privileged object/gripper poses and the task's staged reward.
`CameraRenderer` renders the three stack cameras offscreen (EGL, shadows
off); it must be created, used and closed on one thread (the GL context is
thread-bound).
"""
from __future__ import annotations

import numpy as np

from plan_stack.camera import segmentation_ids
from plan_stack.embodiments.aloha.model import (
    ARM_JOINTS,
    ARMS,
    CAMERAS,
    START_ARM_POSE,
    START_GRIPPER_M,
    AlohaModelError,
    camera_model,
    camera_pose,
    load_model,
    task_spec,
)

__all__ = ["AlohaSim", "CameraRenderer", "RigControllers", "MAX_REWARD"]

MAX_REWARD = 4  # staged rewards as in ACT / gym-aloha: 4 = task solved


class AlohaSim:
    """The joint-controlled ALOHA of one task; physics timestep from the model (2 ms)."""

    def __init__(self, task: str = "transfer_cube", offscreen_size: tuple[int, int] = (640, 480)) -> None:
        import mujoco

        self._mj = mujoco
        self.task = task_spec(task)
        self.model = load_model(task, end_effector=False, offscreen_size=offscreen_size)
        self.data = mujoco.MjData(self.model)
        m = self.model
        self._qpos_adr = np.array([m.joint(f"vx300s_{a}/{j}").qposadr[0] for a in ARMS for j in (*ARM_JOINTS, "left_finger")])
        self._qvel_adr = np.array([m.joint(f"vx300s_{a}/{j}").dofadr[0] for a in ARMS for j in (*ARM_JOINTS, "left_finger")])
        # Actuators: per arm 6 joints, left finger, right finger (= -left).
        act_joint = [m.joint(m.actuator_trnid[i, 0]).name for i in range(m.nu)]
        self._ctrl_idx = np.array([act_joint.index(f"vx300s_{a}/{j}") for a in ARMS for j in (*ARM_JOINTS, "left_finger")])
        self._mirror_idx = np.array([act_joint.index(f"vx300s_{a}/right_finger") for a in ARMS])
        self._ctrl_lo = m.actuator_ctrlrange[:, 0].copy()
        self._ctrl_hi = m.actuator_ctrlrange[:, 1].copy()
        self._obj_adr = [m.joint(m.body(name).jntadr[0]).qposadr[0] for name in self.task.objects]
        self._tcp_site = [m.site(f"{a}_tcp").id for a in ARMS]
        self._geom_names = [m.geom(i).name for i in range(m.ngeom)]
        self._contact_force = np.zeros(6)
        # geom id -> 1 for the left arm's own geoms (links, gripper, fingers), 2 for the right arm's, else 0
        self._geom_side = np.array([next((k + 1 for k, a in enumerate(ARMS) if n.startswith(f"vx300s_{a}/")), 0)
                                    for n in self._geom_names], dtype=np.int8)
        self.command = np.zeros(14)
        self.reset(seed=0)

    @property
    def command_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) position targets the 14 joint servos accept (joint units)."""
        return self._ctrl_lo[self._ctrl_idx].copy(), self._ctrl_hi[self._ctrl_idx].copy()

    @property
    def timestep_s(self) -> float:
        return float(self.model.opt.timestep)

    @property
    def time_s(self) -> float:
        return float(self.data.time)

    def reset(self, seed: int | None = None, object_poses: np.ndarray | None = None) -> np.ndarray:
        """Start pose, objects sampled from `seed` (or given [n, 7]); returns the object poses."""
        mj = self._mj
        mj.mj_resetData(self.model, self.data)
        if object_poses is None:
            object_poses = self.task.sample_objects(np.random.default_rng(seed))
        object_poses = np.asarray(object_poses, dtype=float).reshape(len(self.task.objects), 7)
        for adr, pose in zip(self._obj_adr, object_poses):
            self.data.qpos[adr:adr + 7] = pose
        start = np.array([*START_ARM_POSE, START_GRIPPER_M] * 2)
        self.set_joint_positions(start)
        self.set_command(start)
        mj.mj_forward(self.model, self.data)
        return object_poses

    def set_joint_positions(self, q_joint: np.ndarray) -> None:
        """Place the 14 joints (joint units; each right finger mirrors its left one) without stepping the physics:
        the start pose, or a commanded pose whose contacts are to be checked (run `mj_kinematics` after)."""
        q = np.asarray(q_joint, dtype=float).reshape(14)
        self.data.qpos[self._qpos_adr] = q
        self.data.qpos[self._qpos_adr[[6, 13]] + 1] = -q[[6, 13]]

    def set_command(self, q_joint: np.ndarray) -> np.ndarray:
        """Position targets for the 14 joints (joint units); returns what was sent after clipping to ctrlrange."""
        q = np.asarray(q_joint, dtype=float).reshape(14)
        if not np.all(np.isfinite(q)):
            raise AlohaModelError("command: non-finite joint target")
        ctrl = self.data.ctrl
        ctrl[self._ctrl_idx] = q
        ctrl[self._mirror_idx] = -q[[6, 13]]
        np.clip(ctrl, self._ctrl_lo, self._ctrl_hi, out=ctrl)
        self.command = ctrl[self._ctrl_idx].copy()
        return self.command

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self._mj.mj_step(self.model, self.data)

    def joint_positions(self) -> np.ndarray:
        """14 joint positions in joint units (gripper = left finger slide, m)."""
        return self.data.qpos[self._qpos_adr].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._qvel_adr].copy()

    def object_poses(self) -> dict[str, np.ndarray]:
        """Object name -> world pose [x, y, z, qw, qx, qy, qz]."""
        return {n: self.data.qpos[a:a + 7].copy() for n, a in zip(self.task.objects, self._obj_adr)}

    def tcp_positions(self) -> np.ndarray:
        """[2, 3] world positions of the left and right tool-centre sites."""
        return np.array([self.data.site_xpos[s] for s in self._tcp_site])

    def tcp_poses(self) -> dict[str, np.ndarray]:
        """Arm -> world pose [x, y, z, qw, qx, qy, qz] of its tool-centre site."""
        out = {}
        for arm, s in zip(ARMS, self._tcp_site):
            quat = np.zeros(4)
            self._mj.mju_mat2Quat(quat, self.data.site_xmat[s])
            out[arm] = np.concatenate([self.data.site_xpos[s], quat])
        return out

    def contacts(self) -> set[frozenset[str]]:
        names = self._geom_names
        return {frozenset((names[c.geom1], names[c.geom2])) for c in self.data.contact[: self.data.ncon]}

    def arm_contacts(self) -> list[tuple[str, str, float]]:
        """(left geom, right geom, normal force N) of every contact between the two arms now. A handover's
        fingers may touch lightly (the scripted expert never touches); a plan that drives the grippers into each
        other presses with ~100 N and more, and the impulse drives the wrist servos far past their speed limit
        (docs/decisions/0007-aloha-protective-stop.md)."""
        if self.data.ncon == 0:
            return []
        pairs = self.data.contact.geom  # [ncon, 2] geom ids (arrays: no Python object per contact)
        side = self._geom_side[pairs]  # 0 not an arm, 1 left, 2 right
        out = []
        for i in np.flatnonzero(side[:, 0] * side[:, 1] == 2):  # one left and one right geom
            self._mj.mj_contactForce(self.model, self.data, int(i), self._contact_force)
            g1, g2 = (int(g) for g in pairs[i])
            left, right = (g1, g2) if side[i, 0] == 1 else (g2, g1)
            out.append((self._geom_names[left], self._geom_names[right], abs(float(self._contact_force[0]))))
        return out

    def reward(self) -> int:
        """Staged reward 0..4 of the task (ACT definitions); 4 means solved."""
        pairs = self.contacts()

        def touch(a: str, b: str) -> bool:
            return frozenset((a, b)) in pairs

        if self.task.name == "transfer_cube":
            left = touch("red_box", "vx300s_left/10_left_gripper_finger")
            right = touch("red_box", "vx300s_right/10_right_gripper_finger")
            table = touch("red_box", "table")
            return 4 if left and not table else 3 if left else 2 if right and not table else 1 if right else 0
        sockets = [f"socket-{i}" for i in range(1, 5)]
        right = touch("red_peg", "vx300s_right/10_right_gripper_finger")
        left = any(touch(s, "vx300s_left/10_left_gripper_finger") for s in sockets)
        peg_table = touch("red_peg", "table")
        socket_table = any(touch(s, "table") for s in sockets)
        peg_socket = any(touch("red_peg", s) for s in sockets)
        pin = touch("red_peg", "pin")
        if pin:
            return 4
        if peg_socket and not peg_table and not socket_table:
            return 3
        if left and right and not peg_table and not socket_table:
            return 2
        return 1 if left and right else 0


class RigControllers:
    """The rig's joint trajectory controllers: one follower (JTC semantics) per controller of
    `ARM_CONTROLLER_JOINTS`, holding the start pose until a trajectory arrives. The simulator node feeds them
    from DDS, `eval.episodes.command_replay` from a bag; both step the physics on `command(t)`."""

    def __init__(self) -> None:
        from plan_stack.embodiments.aloha.bridge import ARM_CONTROLLER_JOINTS
        from plan_stack.embodiments.aloha.model import JOINT_NAMES
        from plan_stack.trajectory.core import TrajectoryFollower

        start = np.array([*START_ARM_POSE, START_GRIPPER_M] * 2)
        self.index = {key: [JOINT_NAMES.index(j) for j in joints] for key, joints in ARM_CONTROLLER_JOINTS.items()}
        self.followers = {key: TrajectoryFollower(joints, start[self.index[key]])
                          for key, joints in ARM_CONTROLLER_JOINTS.items()}
        self._cmd = np.zeros(len(JOINT_NAMES))

    def command(self, t: float) -> np.ndarray:
        """The 14 joint targets at sim time `t` (non-decreasing), in stack joint order (a reused buffer)."""
        for key, follower in self.followers.items():
            self._cmd[self.index[key]] = follower.sample(t).positions
        return self._cmd


class CameraRenderer:
    """Offscreen renderer for the stack cameras at one resolution.

    Thread contract: construct, render and close on the same thread.
    """

    def __init__(self, sim: AlohaSim, width: int, height: int, cameras: tuple[str, ...] = tuple(CAMERAS)) -> None:
        import mujoco

        for name in cameras:
            if name not in CAMERAS:
                raise AlohaModelError(f"cameras: unknown camera {name!r} (known: {sorted(CAMERAS)})")
        gl = sim.model.vis.global_
        if width > gl.offwidth or height > gl.offheight:
            raise AlohaModelError(
                f"width/height: {width}x{height} exceeds the offscreen buffer {gl.offwidth}x{gl.offheight};"
                " build the AlohaSim with a larger offscreen_size"
            )
        self.sim = sim
        self.cameras = tuple(cameras)
        self.width, self.height = int(width), int(height)
        self.models = {n: camera_model(sim.model, n, width, height) for n in self.cameras}
        from plan_stack.embodiments.gl_backend import choose_backend

        choose_backend()  # a working offscreen backend (EGL, then OSMesa) unless MUJOCO_GL is set
        self._renderer = mujoco.Renderer(sim.model, height=self.height, width=self.width)

    def render(self, name: str) -> np.ndarray:
        """[H, W, 3] uint8 RGB of one camera at the sim's current state."""
        self._renderer.update_scene(self.sim.data, camera=CAMERAS[name])
        return self._renderer.render().copy()

    def render_all(self) -> dict[str, np.ndarray]:
        return {n: self.render(n) for n in self.cameras}

    def segmentation(self, name: str) -> np.ndarray:
        """[H, W] geom id per pixel (-1 background), for tests and boxes."""
        return segmentation_ids(self._renderer, self.sim.data, CAMERAS[name])

    def pose(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        return camera_pose(self.sim.model, self.sim.data, name)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
