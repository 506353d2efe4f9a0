"""`franka_sim`: the embedded Franka tabletop, speaking a real Franka's ROS interfaces.

Publishes (node-relative unless absolute): `/clock` (the sim owns time),
`joint_states` (7 arm joints, rad, real-robot convention, + the two finger
joints, m each), `cameras/<external|wrist>/image_raw` (rgb8) with
`camera_info`, and privileged ground truth: `ground_truth/cube/pose`,
`ground_truth/tcp/pose` (geometry_msgs/PoseStamped in `world`),
`ground_truth/target/pose` (place target, latched) and
`ground_truth/success` (std_msgs/Bool: cube released inside the target).
Accepts trajectory_msgs/JointTrajectory on `<arm_controller>/joint_trajectory`
(joint_trajectory_controller semantics, `plan_stack.trajectory.core`)
and gripper moves on `<gripper>/move` (sensor_msgs/JointState:
position[0] = width m, velocity[0] = speed m/s; franka_gripper `move`).
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Header
from trajectory_msgs.msg import JointTrajectory

from plan_stack.config import ConfigError, param
from plan_stack.embodiments.franka.model import CAMERAS, DEFAULT_JOINT_NAMES, READY_POSE, FrankaModelError
from plan_stack.embodiments.node_common import (
    CameraPublisher,
    ClockPublisher,
    Every,
    SimNode,
    follow_trajectory_msg,
    pose_msg,
)
from plan_stack.embodiments.sim_config import SimConfig
from plan_stack.ros.diagnostics import ERROR, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
from plan_stack.trajectory.core import TrajectoryFollower

__all__ = ["FrankaSimConfig", "FrankaSimNode", "main"]


@dataclasses.dataclass(frozen=True)
class FrankaSimConfig(SimConfig):
    """Parameters of the embedded Franka simulator (node `franka_sim`)."""

    seed: int = param("seed of the cube and place-target placement", 0, min=0, read_only=True)
    joint_state_rate_hz: float = param("joint_states publish rate (sim time)", 100.0, min=1.0, max=500.0)
    cameras: tuple[str, ...] = param("cameras to render (external, wrist)", tuple(CAMERAS), read_only=True)
    ground_truth_rate_hz: float = param("ground-truth publish rate (sim time)", 10.0, min=0.0, max=500.0)
    arm_joint_names: tuple[str, ...] = param("names of the 7 arm joints in joint_states and commands",
                                             DEFAULT_JOINT_NAMES, read_only=True)
    finger_joint_names: tuple[str, ...] = param("names of the two finger joints in joint_states",
                                                ("fr3_finger_joint1", "fr3_finger_joint2"), read_only=True)
    arm_controller: str = param("arm controller name (topic prefix)", "fr3_arm_controller", read_only=True)
    gripper: str = param("gripper command prefix: <gripper>/move", "franka_gripper", read_only=True)
    world_frame: str = param("frame of the ground-truth poses", "world", read_only=True)
    max_start_delay: float = param(
        "a controller command due further ahead than this (s, sim time) is refused: a wrong clock or stamp",
        10.0, min=0.0, read_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [c for c in self.cameras if c not in CAMERAS]
        if unknown:
            raise ConfigError(f"cameras: unknown camera(s) {unknown} (known: {sorted(CAMERAS)})")
        if len(self.arm_joint_names) != 7 or len(set(self.arm_joint_names)) != 7:
            raise ConfigError("arm_joint_names: expected 7 distinct names")
        if len(self.finger_joint_names) != 2:
            raise ConfigError("finger_joint_names: expected 2 names")


class FrankaSimNode(SimNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("franka_sim", **kwargs)
        self.cfg = cfg = self.declare_sim_config(FrankaSimConfig)
        from plan_stack.embodiments.franka.sim import FrankaSim

        self.sim = FrankaSim(offscreen_size=(cfg.camera_width, cfg.camera_height))
        self.sim.reset(seed=cfg.seed)
        self._lock = threading.Lock()
        self.follower = TrajectoryFollower(cfg.arm_joint_names, np.array(READY_POSE))
        self.diagnostics = Diagnostics(self, 1.0)
        self.create_subscription(
            JointTrajectory, f"{cfg.arm_controller}/joint_trajectory",
            lambda msg: follow_trajectory_msg(self, "arm", self.follower, msg, self._lock, lambda: self.sim.time_s,
                                              cfg.max_start_delay, self.sim.command_range),
            RELIABLE_QOS, raw=True)
        self.create_subscription(JointState, f"{cfg.gripper}/move", self._on_gripper, RELIABLE_QOS)
        self._clock_pub = ClockPublisher(self, cfg.clock_rate_hz)
        self._js_pub = self.create_publisher(JointState, "joint_states", SENSOR_QOS)
        self._cameras = CameraPublisher(self, {c: f"{c}_camera_optical_frame" for c in cfg.cameras},
                                        cfg.camera_rate_hz)
        self._cube_pub = self.create_publisher(PoseStamped, "ground_truth/cube/pose", SENSOR_QOS)
        self._tcp_pub = self.create_publisher(PoseStamped, "ground_truth/tcp/pose", SENSOR_QOS)
        self._success_pub = self.create_publisher(Bool, "ground_truth/success", RELIABLE_QOS)
        target = self.create_publisher(PoseStamped, "ground_truth/target/pose", LATCHED_QOS)
        xy = self.sim.target_xy()
        target.publish(pose_msg(Header(frame_id=cfg.world_frame), np.array([xy[0], xy[1], 0.0, 1, 0, 0, 0])))
        self._js, self._gt = Every(cfg.joint_state_rate_hz), Every(cfg.ground_truth_rate_hz)
        self.start_physics("franka_sim_physics", cfg.real_time_factor)

    # --- commands (executor thread) ---------------------------------------------

    def _on_gripper(self, msg: JointState) -> None:
        try:
            if len(msg.position) != 1 or len(msg.velocity) != 1:
                raise FrankaModelError("gripper: expected position=[width] and velocity=[speed]")
            with self._lock:
                self.sim.move_gripper(float(msg.position[0]), float(msg.velocity[0]))
        except FrankaModelError as exc:
            self.get_logger().warning(str(exc))
            self.diagnostics.report("gripper", ERROR, f"rejected move: {exc}", now=True)

    # --- physics thread ---------------------------------------------------------

    def open_renderer(self):
        if not self._cameras.enabled:
            return None
        self.offscreen_gl()
        from plan_stack.embodiments.franka.sim import Cameras

        return Cameras(self.sim, self.cfg.camera_width, self.cfg.camera_height, tuple(self._cameras.frames))

    def physics_step(self) -> None:
        with self._lock:
            self.sim.set_command(self.follower.sample(self.sim.time_s).positions)
            self.sim.step()

    def publish_due(self, t: float, stamp: Time, cameras) -> None:
        self._clock_pub.tick(t, stamp)
        if self._js.due(t):
            self._publish_joint_states(stamp)
        if self._gt.due(t):
            header = Header(stamp=stamp, frame_id=self.cfg.world_frame)
            self._cube_pub.publish(pose_msg(header, self.sim.cube_pose()))
            self._tcp_pub.publish(pose_msg(header, self.sim.tcp_pose()))
            self._success_pub.publish(Bool(data=self.sim.success()))
        if cameras is not None:
            self._cameras.tick(t, stamp, cameras.render, cameras.models)

    def _publish_joint_states(self, stamp: Time) -> None:
        msg = JointState(header=Header(stamp=stamp), name=[*self.cfg.arm_joint_names, *self.cfg.finger_joint_names])
        half = self.sim.gripper_width() / 2
        msg.position = [*self.sim.joint_positions().tolist(), half, half]
        msg.velocity = [*self.sim.joint_velocities().tolist(), 0.0, 0.0]
        self._js_pub.publish(msg)


main = node_main(FrankaSimNode)
