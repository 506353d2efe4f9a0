"""ALOHA bridge logic without ROS: limits, unit mapping, controller split, stopping.

The stack speaks one 14-DoF trajectory with normalised grippers; the robot
(or the simulator) has four ros2_control-style controllers: one
joint_trajectory_controller per arm (6 joints, radians) and one per gripper
(the finger joint, metres). This module owns the mapping between the two
and the limits the bridge enforces (see `validation` for the rules).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from plan_stack.config import ConfigError, param
from plan_stack.embodiments.aloha.model import (
    ARM_JOINTS,
    GRIPPER_CLOSE_M,
    GRIPPER_OPEN_M,
    JOINT_NAMES,
    gripper_from_joint,
    gripper_to_joint,
)
from plan_stack.embodiments.arm_bridge import ArmBridgeConfig, ArmBridgeSettings, robot_default
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import Limits, LimitsError, limits_from_urdf
from plan_stack.trajectory.limits import find_urdf as find_package_urdf

__all__ = ["AlohaBridgeConfig", "find_urdf", "load_limits", "split_for_controllers", "ARM_CONTROLLER_JOINTS",
           "ARM_CHANNELS"]

#: controller key -> the robot joints it commands (in the stack's 14-joint order).
ARM_CONTROLLER_JOINTS = {
    "left_arm": tuple(f"left_{j}" for j in ARM_JOINTS),
    "left_gripper": ("left_gripper",),
    "right_arm": tuple(f"right_{j}" for j in ARM_JOINTS),
    "right_gripper": ("right_gripper",),
}
#: the arm channels of the stack's 14 (True) and the normalised grippers (False), in JOINT_NAMES order
ARM_CHANNELS = np.array([not n.endswith("_gripper") for n in JOINT_NAMES])


@dataclasses.dataclass(frozen=True)
class AlohaBridgeConfig(ArmBridgeConfig):
    """Parameters of the ALOHA bridge (node `aloha_bridge`): the shared arm bridge's, with ALOHA's joints,
    normalised grippers and four controllers."""

    joint_names: tuple[str, ...] = param(
        "stack joint names, 14 (per arm waist..wrist_rotate, gripper; grippers normalised 0..1)",
        JOINT_NAMES, read_only=True)
    urdf_path: str = param("URDF with joint position/velocity limits; empty = the package's urdf/aloha.urdf", "")
    acceleration_limits: float | tuple[float, ...] = param(
        "acceleration limit per joint (rad/s^2; grippers in normalised units/s^2), scalar or 14 values",
        (25.0, 25.0, 25.0, 40.0, 40.0, 40.0, 40.0, 25.0, 25.0, 25.0, 40.0, 40.0, 40.0, 40.0), min=1e-3)
    gripper_velocity_limit: float = param("gripper velocity limit (normalised units/s)", 5.0, min=1e-3)
    goal_tolerance: float = param("max |position error| at the end of a goal (rad; grippers normalised)", 0.15, min=0.0)
    gripper_goal_tolerance: float = param("max |gripper error| at the end of a goal (normalised; grasping stalls it)", 1.0, min=0.0)
    jump_tolerance: float = param("max position difference between the present reference and a point due now", 0.02, min=0.0)
    collision_tracking_error: tuple[float, ...] = robot_default(
        "collision_tracking_error", (0.2, 0.2, 0.2, 0.35, 0.2, 0.3, 0.0, 0.2, 0.2, 0.2, 0.35, 0.2, 0.3, 0.0))
    command_latency_s: float = param(
        "s ahead of now that bridge-generated commands (cancel stops) start, so the controllers receive them "
        "before they are due and all switch at the same instant", 0.03, min=0.0, max=1.0)
    left_arm_controller: str = param("left arm joint_trajectory_controller name", "left_arm_controller")
    right_arm_controller: str = param("right arm joint_trajectory_controller name", "right_arm_controller")
    left_gripper_controller: str = param("left gripper joint_trajectory_controller name", "left_gripper_controller")
    right_gripper_controller: str = param("right gripper joint_trajectory_controller name", "right_gripper_controller")

    def _check(self) -> None:
        if self.joint_names != JOINT_NAMES:
            raise ConfigError(f"joint_names: the ALOHA bridge drives exactly {list(JOINT_NAMES)}")
        acc = self.acceleration_limits
        if isinstance(acc, tuple) and len(acc) != len(JOINT_NAMES):
            raise ConfigError(f"acceleration_limits: expected 1 or {len(JOINT_NAMES)} values, got {len(acc)}")

    def settings(self) -> ArmBridgeSettings:
        """A cancel decelerates from where the reference will be `command_latency_s` from now."""
        return dataclasses.replace(super().settings(), stop_lead_s=self.command_latency_s)

    def goal_checks(self) -> tuple[np.ndarray, np.ndarray]:
        """The arms are tracked and held to `goal_tolerance`, the grippers (they stall on what they grasp) only
        to `gripper_goal_tolerance` at a goal's end."""
        return ARM_CHANNELS, np.where(ARM_CHANNELS, self.goal_tolerance, self.gripper_goal_tolerance)

    def limits(self) -> Limits:
        return load_limits(self)

    def joint_to_stack(self, q: np.ndarray) -> np.ndarray:
        """Finger metres -> normalised grippers; the arms are in radians already."""
        q[~ARM_CHANNELS] = gripper_from_joint(q[~ARM_CHANNELS])
        return q

    @property
    def controllers(self) -> dict[str, str]:
        """controller key (`left_arm`, ...) -> controller name (topic prefix)."""
        return {"left_arm": self.left_arm_controller, "left_gripper": self.left_gripper_controller,
                "right_arm": self.right_arm_controller, "right_gripper": self.right_gripper_controller}


def find_urdf(path: str = "") -> str:
    """The URDF to read limits from: `path`, else urdf/aloha.urdf of the source tree or install."""
    return find_package_urdf(path, "aloha.urdf")


def load_limits(cfg: AlohaBridgeConfig) -> Limits:
    """Limits in stack units: URDF position/velocity for the arms (velocity scaled),
    [0, 1] and `gripper_velocity_limit` for the normalised grippers, accelerations from the config."""
    urdf = limits_from_urdf(find_urdf(cfg.urdf_path))
    lower, upper, vel = [], [], []
    for name in JOINT_NAMES:
        if name not in urdf:
            raise LimitsError(f"urdf_path: joint {name!r} is missing from the URDF")
        if name.endswith("_gripper"):
            finger_lo, finger_hi, finger_v = urdf[name]
            lower.append(0.0)
            upper.append(1.0)
            vel.append(min(cfg.gripper_velocity_limit, finger_v / (GRIPPER_OPEN_M - GRIPPER_CLOSE_M)))
        else:
            lo, hi, v = urdf[name]
            lower.append(lo)
            upper.append(hi)
            vel.append(v * cfg.velocity_scale)
    acc = np.broadcast_to(np.asarray(cfg.acceleration_limits, dtype=float), (len(JOINT_NAMES),))
    return Limits.for_joints(JOINT_NAMES, lower, upper, vel, acc)


def split_for_controllers(traj: Trajectory, finger_range_m: tuple[float, float] = (0.021, 0.057)) -> dict[str, Trajectory]:
    """Stack trajectory (14 joints, any order, grippers normalised) -> per-controller trajectories in joint units.

    Gripper positions become finger metres, clipped to the finger's travel
    (normalised 0 is ACT's closed value, 1.6 mm beyond the finger's stop: a
    closed gripper squeezes against it); gripper velocities/accelerations
    scale by the same factor.
    """
    index = {n: i for i, n in enumerate(traj.joint_names)}
    scale = GRIPPER_OPEN_M - GRIPPER_CLOSE_M
    out = {}
    for key, joints in ARM_CONTROLLER_JOINTS.items():
        cols = [index[j] for j in joints]
        pos = traj.positions[:, cols]
        vel = None if traj.velocities is None else traj.velocities[:, cols]
        acc = None if traj.accelerations is None else traj.accelerations[:, cols]
        if key.endswith("gripper"):
            pos = np.clip(gripper_to_joint(pos), *finger_range_m)
            vel = None if vel is None else vel * scale
            acc = None if acc is None else acc * scale
        out[key] = Trajectory(joints, traj.stamp_s, traj.times_s.copy(), pos, vel, acc)
    return out
