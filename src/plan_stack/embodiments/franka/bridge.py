"""Franka bridge logic without ROS: limits, controller split, gripper move commands.

The stack speaks one 8-channel trajectory: the 7 arm joints (rad) and the
gripper width (m, 0 … 0.08, the franka_gripper convention). The robot (or
the simulator) has a joint_trajectory_controller for the arm
(`<arm_controller>/joint_trajectory`) and the Franka Hand, which takes
move commands (width, speed) like franka_gripper's `move` action. This
module owns the mapping and the limits (rules in `trajectory.checks`):

* arm position and velocity limits from `urdf/franka.urdf` (the published
  Panda/FR3 values), acceleration and jerk limits from its
  `<plan_stack_limits>` elements (URDF has no field for them), all scalable;
* gripper channel: [0, 0.08] m, `gripper_velocity_limit`, `gripper_acceleration_limit`, no jerk limit.
"""
from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET

import numpy as np

from plan_stack.config import ConfigError, param
from plan_stack.embodiments.arm_bridge import ArmBridgeConfig, ArmBridgeSettings
from plan_stack.embodiments.franka.model import DEFAULT_JOINT_NAMES, MAX_WIDTH_M
from plan_stack.trajectory.limits import Limits, LimitsError, limits_from_urdf
from plan_stack.trajectory.limits import find_urdf as find_package_urdf

__all__ = ["FrankaBridgeConfig", "find_urdf", "load_limits", "gripper_move"]


@dataclasses.dataclass(frozen=True)
class FrankaBridgeConfig(ArmBridgeConfig):
    """Parameters of the Franka bridge (node `franka_bridge`): the shared arm bridge's, with the Franka's 7
    joints, its gripper width channel and its hand's move commands."""

    joint_names: tuple[str, ...] = param(
        "stack channels: the 7 arm joints (rad) then the gripper width channel (m)",
        (*DEFAULT_JOINT_NAMES, "fr3_gripper"), read_only=True)
    urdf_joint_names: tuple[str, ...] = param("the 7 arm joints' names in the URDF, in stack order",
                                              DEFAULT_JOINT_NAMES, read_only=True)
    finger_joint_names: tuple[str, ...] = param("the two finger joints in joint_states (width = their sum)",
                                                ("fr3_finger_joint1", "fr3_finger_joint2"), read_only=True)
    urdf_path: str = param("URDF with joint limits; empty = the package's urdf/franka.urdf", "")
    acceleration_scale: float = param("fraction of the URDF acceleration limits the bridge allows", 1.0,
                                      min=0.01, max=1.0)
    jerk_scale: float = param("fraction of the URDF jerk limits the bridge allows", 1.0, min=0.01, max=1.0)
    gripper_velocity_limit: float = param("gripper width speed limit (m/s; Franka Hand: 0.1)", 0.1, min=1e-3,
                                          max=0.1)
    gripper_acceleration_limit: float = param("gripper width acceleration limit (m/s^2)", 5.0, min=1e-3)
    gripper_min_speed: float = param("slowest gripper move the bridge sends (m/s)", 0.01, min=1e-4, max=0.1)
    gripper_deadband: float = param("width change (m) of the reference before a new gripper move is sent", 0.002,
                                    min=0.0, max=0.08)
    gripper_rate_hz: float = param("rate at which the gripper reference is checked (Hz)", 20.0, min=1.0, max=200.0)
    goal_tolerance: float = param("max |joint error| at the end of a goal (rad)", 0.05, min=0.0)
    arm_controller: str = param("arm joint_trajectory_controller name (topic prefix)", "fr3_arm_controller")
    gripper: str = param("gripper command prefix: <gripper>/move", "franka_gripper")

    def _check(self) -> None:
        if len(self.joint_names) != 8 or len(set(self.joint_names)) != 8:
            raise ConfigError("joint_names: expected 8 distinct names (7 arm joints, then the gripper)")
        if len(self.urdf_joint_names) != 7:
            raise ConfigError("urdf_joint_names: expected the 7 arm joints")
        if len(self.finger_joint_names) != 2:
            raise ConfigError("finger_joint_names: expected 2 finger joints")

    def settings(self) -> ArmBridgeSettings:
        """Tracking error against the present reference (joint_states stamps are not used)."""
        return dataclasses.replace(super().settings(), track_at_measurement_stamp=False)

    def goal_checks(self) -> tuple[np.ndarray, np.ndarray]:
        """The 7 arm joints, held to `goal_tolerance`; the gripper channel is commanded by moves, not tracked."""
        arm = np.arange(8) < 7
        return arm, np.where(arm, self.goal_tolerance, np.inf)

    def limits(self) -> Limits:
        return load_limits(self)

    @property
    def state_joint_names(self) -> tuple[str, ...]:
        return (*self.arm_joints, *self.finger_joint_names)

    def joint_to_stack(self, q: np.ndarray) -> np.ndarray:
        """7 arm joints (rad) + width = sum of the two finger joints (m)."""
        return np.append(q[:7], q[7] + q[8])

    @property
    def arm_joints(self) -> tuple[str, ...]:
        return self.joint_names[:7]

    @property
    def gripper_joint(self) -> str:
        return self.joint_names[7]


def find_urdf(path: str = "") -> str:
    """`path`, else urdf/franka.urdf of the source tree or an install share/ folder."""
    return find_package_urdf(path, "franka.urdf")


def _higher_order_limits(path: str) -> dict[str, tuple[float, float]]:
    """Joint -> (acceleration, jerk) from `<plan_stack_limits>` elements."""
    out = {}
    for joint in ET.parse(path).getroot().iter("joint"):
        el, name = joint.find("plan_stack_limits"), joint.get("name")
        if el is not None and name:
            out[name] = (float(el.get("acceleration", "nan")), float(el.get("jerk", "nan")))
    return out


def load_limits(cfg: FrankaBridgeConfig) -> Limits:
    """Limits in stack order (7 arm joints + gripper width), scaled as configured."""
    path = find_urdf(cfg.urdf_path)
    urdf, higher = limits_from_urdf(path), _higher_order_limits(path)
    lower, upper, vel, acc, jerk = [], [], [], [], []
    for name in cfg.urdf_joint_names:
        if name not in urdf:
            raise LimitsError(f"urdf_path: joint {name!r} is missing from the URDF")
        a, j = higher.get(name, (math.nan, math.nan))
        if not (math.isfinite(a) and math.isfinite(j)):
            raise LimitsError(f"urdf_path: joint {name!r} has no <plan_stack_limits acceleration= jerk=>")
        lo, hi, v = urdf[name]
        lower.append(lo)
        upper.append(hi)
        vel.append(v * cfg.velocity_scale)
        acc.append(a * cfg.acceleration_scale)
        jerk.append(j * cfg.jerk_scale)
    lower.append(0.0)
    upper.append(MAX_WIDTH_M)
    vel.append(cfg.gripper_velocity_limit)
    acc.append(cfg.gripper_acceleration_limit)
    jerk.append(math.inf)
    return Limits.for_joints(cfg.joint_names, lower, upper, vel, acc, jerk)


def gripper_move(width_ref: float, width_velocity: float, last_goal: float | None,
                 cfg: FrankaBridgeConfig) -> tuple[float, float] | None:
    """The (width, speed) move to send for the present gripper reference, or None.

    A move goes out when the reference has left the last goal by more than
    `gripper_deadband`: to the reference width, at the reference's speed
    (at least `gripper_min_speed`, at most `gripper_velocity_limit`).
    """
    width = float(np.clip(width_ref, 0.0, MAX_WIDTH_M))
    if last_goal is not None and abs(width - last_goal) <= cfg.gripper_deadband:
        return None
    speed = float(np.clip(abs(width_velocity), cfg.gripper_min_speed, cfg.gripper_velocity_limit))
    return width, speed
