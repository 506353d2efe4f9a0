"""The Franka MuJoCo tabletop model: assets, joint conventions, cameras.

Robot meshes, kinematics and actuators are the Panda of `gymnasium-robotics`
(kitchen_franka/franka_assets, Apache-2.0), included unchanged from
site-packages; the table, cube, place target and cameras are ours, added to
the scene text and through `mujoco.MjSpec`:

* the finger joints' damping/armature are lowered (FINGER_DAMPING,
  FINGER_ARMATURE): with the asset's values the fingers lag their servo by
  about 0.2 s, far slower than a Franka Hand;
* every robot body gets `gravcomp = 1`: a real Panda's controllers
  compensate gravity, and the asset's position servos would otherwise sag;
* shadows and multisampling are off (CPU rendering);
* a wrist camera `wrist` is added on link 7 beside the hand, looking along
  the fingers; the external camera `external` looks at the table.

Conventions fixed here (used by the sim, the bridge and the tests):

* arm joints in the real robot's convention (FR3/Panda datasheet zero). The
  asset's joint 6 zero is rotated by π/2 against the real robot (at the
  datasheet "ready" pose q6 = π/2 the asset's hand would point forward), so
  `model q6 = real q6 − π/2`; the sim converts both ways;
* the gripper is one number, the opening **width** in metres (0 … 0.08), as
  franka_gripper reports it: each finger moves width / 2;
* cameras report their optical frame (x right, y down, z forward);
  intrinsics from `fovy` (square pixels, centred principal point).
"""
from __future__ import annotations

import importlib.util
import math
import os

import numpy as np

__all__ = ["FrankaModelError", "ARM_JOINTS", "DEFAULT_JOINT_NAMES", "READY_POSE", "JOINT6_OFFSET",
           "MAX_WIDTH_M", "CAMERAS", "asset_dir", "load_model", "real_to_model", "model_to_real"]


class FrankaModelError(ValueError):
    """Missing assets or a malformed request against the Franka model."""


ARM_JOINTS = tuple(f"robot:panda0_joint{i}" for i in range(1, 8))
DEFAULT_JOINT_NAMES = tuple(f"fr3_joint{i}" for i in range(1, 8))
#: Datasheet "ready" pose (rad, real convention).
READY_POSE = (0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398)
JOINT6_OFFSET = math.pi / 2
MAX_WIDTH_M = 0.08
#: stack camera name -> MuJoCo camera name
CAMERAS = {"external": "external", "wrist": "wrist"}
TABLE_TOP_Z = 0.0
CUBE_HALF_M = 0.02
#: Finger joint damping / armature replacing the asset's 100 / 5 (Franka Hand fingers follow within ~20 ms).
FINGER_DAMPING = 10.0
FINGER_ARMATURE = 0.1
FINGER_JOINTS = ("robot:panda0_finger_joint1", "robot:panda0_finger_joint2")


def asset_dir() -> str:
    """Folder of the Panda MJCF include files (found without importing gymnasium_robotics)."""
    spec = importlib.util.find_spec("gymnasium_robotics")
    if spec is None or spec.origin is None:
        raise FrankaModelError("the Franka simulator needs `gymnasium-robotics` (pip install gymnasium-robotics==1.4.2)")
    path = os.path.join(os.path.dirname(spec.origin), "envs", "assets", "kitchen_franka", "franka_assets")
    if not os.path.isfile(os.path.join(path, "chain.xml")):
        raise FrankaModelError(f"gymnasium-robotics: Panda assets missing under {path}")
    return path


def _look_at(eye, target) -> str:
    f = np.asarray(target, float) - np.asarray(eye, float)
    f /= np.linalg.norm(f)
    x = np.cross(f, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(x, f)
    return " ".join(f"{v:.6f}" for v in (*x, *y))


def _scene_xml(root: str, size: tuple[int, int]) -> str:
    eye, target = (1.3, 0.55, 0.8), (0.3, 0.0, 0.2)
    return f"""
<mujoco model="franka_tabletop">
  <include file="{root}/assets.xml"/>
  <compiler meshdir="{root}/meshes"/>
  <include file="{root}/actuator.xml"/>
  <option timestep="0.002"/>
  <visual>
    <global offwidth="{size[0]}" offheight="{size[1]}"/>
    <quality shadowsize="0" offsamples="0"/>
  </visual>
  <worldbody>
    <light pos="0.5 0 2" dir="0 0 -1" diffuse="0.8 0.8 0.8"/>
    <light pos="1.5 1 2" dir="-1 -0.6 -1.4" diffuse="0.4 0.4 0.4"/>
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 -0.75" rgba="0.35 0.35 0.38 1"/>
    <geom name="table" type="box" size="0.6 0.7 0.02" pos="0.35 0 -0.02" rgba="0.72 0.6 0.45 1"
          friction="1 0.005 0.0001"/>
    <geom name="target" type="box" size="0.05 0.05 0.0005" pos="0.5 0.2 0.0005" rgba="0.2 0.8 0.3 1"
          contype="0" conaffinity="0"/>
    <body name="cube" pos="0.5 -0.1 {CUBE_HALF_M}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{CUBE_HALF_M} {CUBE_HALF_M} {CUBE_HALF_M}" mass="0.05" rgba="0.85 0.15 0.1 1"
            friction="1.5 0.01 0.0001" condim="4"/>
    </body>
    <camera name="external" pos="{eye[0]} {eye[1]} {eye[2]}" xyaxes="{_look_at(eye, target)}" fovy="50"/>
    <body name="robot_base" pos="0 0 0">
      <include file="{root}/chain.xml"/>
    </body>
  </worldbody>
</mujoco>
"""


def load_model(offscreen_size: tuple[int, int] = (640, 480)):
    """Compile the tabletop scene with the patches listed in the module doc."""
    import mujoco

    spec = mujoco.MjSpec.from_string(_scene_xml(asset_dir(), offscreen_size))
    for body in spec.bodies:
        if body.name.startswith("panda0_"):
            body.gravcomp = 1.0
    for name in FINGER_JOINTS:  # the asset's fingers (damping 100, armature 5) lag 0.2 s behind their servo
        joint = spec.joint(name)
        joint.damping[0] = FINGER_DAMPING
        joint.armature = FINGER_ARMATURE
    hand = spec.body("panda0_link7")
    # beside the hand (hand x axis = link7 rotated -45 deg about z), looking along the fingers (+z)
    c, s = math.cos(-math.pi / 4), math.sin(-math.pi / 4)
    hand.add_camera(name="wrist", pos=[0.065 * c, 0.065 * s, 0.13], quat=[0.0, 0.92388, -0.382683, 0.0],
                    fovy=75.0)
    return spec.compile()


def real_to_model(q_real: np.ndarray) -> np.ndarray:
    """7 arm angles, real convention -> asset convention (last axis = joints)."""
    q = np.array(q_real, dtype=float, copy=True)
    q[..., 5] -= JOINT6_OFFSET
    return q


def model_to_real(q_model: np.ndarray) -> np.ndarray:
    q = np.array(q_model, dtype=float, copy=True)
    q[..., 5] += JOINT6_OFFSET
    return q
