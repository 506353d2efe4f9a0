"""The ALOHA MuJoCo model: assets, joint naming, gripper units, cameras.

The model and meshes are the ones shipped in the `gym-aloha` package. They are
loaded through `mujoco.MjSpec` and patched in memory (site-packages is never
edited):

* the mocap-to-gripper welds of the end-effector models are stiffened from
  `solimp=".25 .25 0.001"` to `"0.95 0.99 0.001"`: on MuJoCo 3.x the soft
  weld lets the gripper sag and the cube hand-over fails (sim_notes.md);
* the two roll joints (`forearm_roll`, `wrist_rotate`) of the end-effector
  models get a viscous damping (`EE_ROLL_DAMPING`). Their axes are nearly
  collinear near the start pose (wrist angle -0.3 rad), and the undamped
  weld pulls the arm through that near-singularity with opposite spins of
  the two rolls of up to 11 rad/s: the scripted expert's joint commands,
  recorded from this model, then break the URDF's 3.14 rad/s in about half
  the episodes, and replayed on the joint-controlled model the rolls
  overshoot. Damping acts as damped least-squares IK: the gripper's pose
  lags by a fraction of a degree instead (40 of 40 expert episodes still
  succeed, every command within the limit, measured in docs/aloha.md);
* every arm servo of the joint-controlled models gets a viscous damping of
  0.7 x critical (`SERVO_DAMPING`). gym-aloha's servos are proportional only
  and ring: the wrists (kp 10 / 50 / 20 on links of 0.7-5.7 g·m²) at
  13-27 Hz, where a commanded acceleration step made the measured speed
  overshoot the commanded one by up to 40 % (the replay of seed 100015,
  docs/decisions/0005-aloha-servo-damping.md); the waist, shoulder and elbow (kp 800 / 1600 / 800 on
  53-111 g·m²) at about 20 Hz, where a fast swing (2.6 rad/s commanded)
  overshot to 3.6 rad/s (validation seed 200030, 2026-12-05). Both were over
  the URDF's velocity limit while every published trajectory was inside it.
  Real ViperX servos (Dynamixel) close a velocity loop and do not ring so;
  the expert still solves 20 of 20 held-out seeds (and 100 of 100 training
  seeds with the damped waist, shoulder and elbow);
* shadows and multisampling are switched off (the 4096 shadow map makes
  CPU rendering crawl);
* a tool-centre site `<arm>_tcp` is added between the fingers of each
  gripper: the point whose trajectory annotations and ground truth report.

Conventions fixed here and used by the sim, the bridge and the expert:

* joint order per arm: waist, shoulder, elbow, forearm_roll, wrist_angle,
  wrist_rotate, gripper; names `<arm>_<joint>`, left arm first (14 joints);
* joint units: radians for the arm; the gripper joint is the left finger's
  slide position in metres (the right finger mirrors it), as on the real
  ViperX `left_finger` joint; the stack uses a normalised gripper 0 (closed)
  .. 1 (open), `normalised = (x - CLOSE_M) / (OPEN_M - CLOSE_M)` with the
  ACT puppet constants below;
* cameras `cam_high`, `cam_left_wrist`, `cam_right_wrist` are the model's
  `top`, `left_wrist`, `right_wrist`; intrinsics follow from `fovy` (square
  pixels, principal point at the image centre) and poses are reported for
  the optical frame (x right, y down, z forward).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from plan_stack.camera import CameraModel, optical_pose, pinhole_model

__all__ = [
    "ARMS", "ARM_JOINTS", "JOINT_NAMES", "CAMERAS", "TASKS", "TaskSpec",
    "GRIPPER_OPEN_M", "GRIPPER_CLOSE_M", "WELD_SOLIMP", "EE_ROLL_DAMPING", "EE_DAMPED_JOINTS", "SERVO_DAMPING",
    "AlohaModelError",
    "asset_dir", "load_model", "camera_model", "camera_pose",
    "gripper_to_joint", "gripper_from_joint", "stack_to_joint", "joint_to_stack",
]


class AlohaModelError(ValueError):
    """Unknown task, camera or a malformed request against the ALOHA model."""


ARMS = ("left", "right")
ARM_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
JOINT_NAMES = tuple(f"{arm}_{j}" for arm in ARMS for j in (*ARM_JOINTS, "gripper"))
#: stack camera name -> MuJoCo camera name
CAMERAS = {"cam_high": "top", "cam_left_wrist": "left_wrist", "cam_right_wrist": "right_wrist"}

#: ACT puppet gripper finger positions (m) for normalised 1 (open) and 0 (closed).
GRIPPER_OPEN_M = 0.05800
GRIPPER_CLOSE_M = 0.01844
#: Stiffened mocap weld impedance (sim_notes.md: the shipped .25 .25 fails the hand-over).
WELD_SOLIMP = (0.95, 0.99, 0.001)
#: Viscous damping (N·m·s/rad) of the end-effector models' roll joints (module doc).
EE_ROLL_DAMPING = 5.0
EE_DAMPED_JOINTS = ("forearm_roll", "wrist_rotate")
#: Viscous damping (N·m·s/rad) of the joint-controlled models' arm servos (module doc): 0.7 x the critical
#: 2 sqrt(kp I) of each servo (kp 800, 1600, 800, 10, 50, 20; joint-space inertia 52.6, 110.7, 102.6, 1.5, 5.7,
#: 0.71 g·m² at the start pose).
SERVO_DAMPING = {"waist": 9.08, "shoulder": 18.63, "elbow": 12.68,
                 "forearm_roll": 0.17, "wrist_angle": 0.74, "wrist_rotate": 0.17}
#: Tool centre point in the gripper_link frame (m): between the finger pads.
TCP_OFFSET_M = (0.09, 0.0, 0.0)
#: Arm joint pose of every episode start (the models' keyframe), per arm.
START_ARM_POSE = (0.0, -0.96, 1.16, 0.0, -0.3, 0.0)
START_GRIPPER_M = 0.02239


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One simulated task: which model files, objects and what success means."""

    name: str
    joint_xml: str
    ee_xml: str
    instruction: str
    objects: tuple[str, ...]  # body names of the free objects, in qpos order
    episode_s: float
    sample_objects: Callable[[np.random.Generator], np.ndarray]  # -> [n_objects, 7] pos+quat


def _sample_cube(rng: np.random.Generator) -> np.ndarray:
    x, y = rng.uniform(0.0, 0.2), rng.uniform(0.4, 0.6)
    return np.array([[x, y, 0.05, 1.0, 0.0, 0.0, 0.0]])


def _sample_insertion(rng: np.random.Generator) -> np.ndarray:
    peg = [rng.uniform(0.1, 0.2), rng.uniform(0.4, 0.6), 0.05, 1.0, 0.0, 0.0, 0.0]
    socket = [rng.uniform(-0.2, -0.1), rng.uniform(0.4, 0.6), 0.05, 1.0, 0.0, 0.0, 0.0]
    return np.array([peg, socket])


TASKS: dict[str, TaskSpec] = {
    "transfer_cube": TaskSpec(
        "transfer_cube", "bimanual_viperx_transfer_cube.xml", "bimanual_viperx_end_effector_transfer_cube.xml",
        "pick up the red cube with the right arm and hand it over to the left arm",
        ("box",), 8.0, _sample_cube,
    ),
    "insertion": TaskSpec(
        "insertion", "bimanual_viperx_insertion.xml", "bimanual_viperx_end_effector_insertion.xml",
        "pick up the peg and the socket and insert the peg into the socket",
        ("peg", "socket"), 8.0, _sample_insertion,
    ),
}


def task_spec(task: str) -> TaskSpec:
    try:
        return TASKS[task]
    except KeyError:
        raise AlohaModelError(f"task: unknown task {task!r} (known: {sorted(TASKS)})") from None


def asset_dir() -> str:
    """Folder of the gym-aloha MJCF files and meshes."""
    try:
        import gym_aloha
    except ImportError as exc:  # pragma: no cover - pinned in requirements/lock.txt
        raise AlohaModelError("the ALOHA simulator needs the `gym-aloha` package (pip install gym-aloha)") from exc
    return os.path.join(os.path.dirname(gym_aloha.__file__), "assets")


def load_model(task: str = "transfer_cube", end_effector: bool = False, weld_solimp=WELD_SOLIMP,
               offscreen_size: tuple[int, int] = (640, 480)):
    """Compile the task's model with the in-memory patches listed in the module doc.

    `end_effector=True` loads the mocap-driven variant the scripted expert
    plans in; the default is the joint-position-controlled robot.
    `offscreen_size` (width, height) must cover every render size used.
    """
    import mujoco

    spec_t = task_spec(task)
    path = os.path.join(asset_dir(), spec_t.ee_xml if end_effector else spec_t.joint_xml)
    spec = mujoco.MjSpec.from_file(path)
    for eq in spec.equalities:
        if eq.type == mujoco.mjtEq.mjEQ_WELD:
            eq.solimp[:3] = weld_solimp
    spec.visual.quality.shadowsize = 0
    spec.visual.quality.offsamples = 0
    spec.visual.global_.offwidth = max(int(offscreen_size[0]), 1)
    spec.visual.global_.offheight = max(int(offscreen_size[1]), 1)
    for arm in ARMS:
        spec.body(f"vx300s_{arm}/gripper_link").add_site(
            name=f"{arm}_tcp", pos=list(TCP_OFFSET_M), size=[0.005, 0.005, 0.005], rgba=[0, 0, 0, 0]
        )
    for arm in ARMS:
        if end_effector:
            for joint in EE_DAMPED_JOINTS:
                spec.joint(f"vx300s_{arm}/{joint}").damping[0] = EE_ROLL_DAMPING
        else:
            for joint, damping in SERVO_DAMPING.items():
                spec.joint(f"vx300s_{arm}/{joint}").damping[0] = damping
    return spec.compile()


# --- gripper units ----------------------------------------------------------------


def gripper_to_joint(normalised):
    """Normalised gripper (0 closed .. 1 open) -> finger position (m)."""
    return np.asarray(normalised) * (GRIPPER_OPEN_M - GRIPPER_CLOSE_M) + GRIPPER_CLOSE_M


def gripper_from_joint(position_m):
    """Finger position (m) -> normalised gripper (0 closed .. 1 open)."""
    return (np.asarray(position_m) - GRIPPER_CLOSE_M) / (GRIPPER_OPEN_M - GRIPPER_CLOSE_M)


GRIPPER_INDICES = (6, 13)


def stack_to_joint(q: np.ndarray) -> np.ndarray:
    """14-vector(s) with normalised grippers -> joint units (last axis = joints)."""
    out = np.array(q, dtype=float, copy=True)
    out[..., GRIPPER_INDICES] = gripper_to_joint(out[..., GRIPPER_INDICES])
    return out


def joint_to_stack(q: np.ndarray) -> np.ndarray:
    """14-vector(s) in joint units -> normalised grippers."""
    out = np.array(q, dtype=float, copy=True)
    out[..., GRIPPER_INDICES] = gripper_from_joint(out[..., GRIPPER_INDICES])
    return out


# --- cameras --------------------------------------------------------------------


def _mj_camera(model, name: str) -> int:
    try:
        mj_name = CAMERAS[name]
    except KeyError:
        raise AlohaModelError(f"camera: unknown camera {name!r} (known: {sorted(CAMERAS)})") from None
    return model.camera(mj_name).id


def camera_model(model, name: str, width: int, height: int) -> CameraModel:
    """Intrinsics of ALOHA camera `name` as MuJoCo renders it (`camera.pinhole_model`)."""
    return pinhole_model(model, _mj_camera(model, name), name, width, height)


def camera_pose(model, data, name: str) -> tuple[np.ndarray, np.ndarray]:
    """World pose of the camera's optical frame: (position [3], rotation [3, 3] world_R_optical).

    Needs `mj_forward`/`mj_step` to have run (tracking cameras move).
    """
    return optical_pose(data, _mj_camera(model, name))
