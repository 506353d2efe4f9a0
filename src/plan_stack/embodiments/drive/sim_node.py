"""`drive_sim`: the embedded car, speaking a real vehicle's ROS interfaces.

Publishes (node-relative unless absolute): `/clock` (the sim owns time),
`odom` (nav_msgs/Odometry of the rear axle in `odom_frame`; twist in the
body frame: linear.x = speed, angular.z = yaw rate), `cameras/front/image_raw`
(rgb8) with `cameras/front/camera_info`, and ground truth for evaluators:
`ground_truth/obstacles` (geometry_msgs/PoseArray, latched) and the
`safety` diagnostic (collision / road departure). Accepts
plan_stack/DriveTrajectory on `drive_trajectory` (poses in `odom_frame`, or
in `base_frame` = the ego frame at the header stamp) and follows it with a
pure-pursuit controller (`embodiments.drive.follower`): the driving stack's
controller, stopping when the trajectory ends.

Physics runs on its own thread (which also owns the GL context), paced to
`real_time_factor` x wall time (0 = as fast as possible).
"""
from __future__ import annotations

import dataclasses
import math
import threading

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseArray
from nav_msgs.msg import Odometry
from std_msgs.msg import Header

from plan_stack.config import param
from plan_stack.embodiments.drive.errors import DriveError
from plan_stack.embodiments.drive.follower import FollowerConfig, PurePursuit
from plan_stack.embodiments.drive.msg_convert import trajectory_from_msg
from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim
from plan_stack.embodiments.drive.vehicle import VehicleParams
from plan_stack.embodiments.node_common import CameraPublisher, ClockPublisher, Every, SimNode
from plan_stack.embodiments.sim_config import SimConfig
from plan_stack.msg import DriveTrajectory as DriveTrajectoryMsg
from plan_stack.ros.diagnostics import ERROR, OK, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS

__all__ = ["DriveSimConfig", "DriveSimNode", "main"]


@dataclasses.dataclass(frozen=True)
class DriveSimConfig(SimConfig):
    """Parameters of the embedded driving simulator (node `drive_sim`); scene, vehicle and follower
    parameters are namespaced `scene.*`, `vehicle.*`, `follower.*`."""

    seed: int = param("seed of the obstacle placement", 0, min=0, read_only=True)
    odom_rate_hz: float = param("odometry publish rate (sim time)", 50.0, min=1.0, max=100.0)
    clock_rate_hz: float = param("/clock publish rate (sim time)", 100.0, min=1.0, max=100.0)
    camera_rate_hz: float = param("front camera publish rate (sim time); 0 disables rendering", 10.0,
                                  min=0.0, max=30.0)
    odom_frame: str = param("odometry (world) frame", "odom", read_only=True)
    base_frame: str = param("ego frame (rear axle)", "base_link", read_only=True)
    camera_frame: str = param("front camera optical frame", "front_camera_optical_frame", read_only=True)


class DriveSimNode(SimNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("drive_sim", **kwargs)
        self.cfg = cfg = self.declare_sim_config(DriveSimConfig)
        scene = declare_config(self, DriveSceneConfig, prefix="scene")
        self.vehicle = declare_config(self, VehicleParams, prefix="vehicle")
        follower = declare_config(self, FollowerConfig, prefix="follower")
        rate_cap = 1.0 / scene.timestep_s
        for name in ("odom_rate_hz", "clock_rate_hz", "camera_rate_hz"):
            if getattr(cfg, name) > rate_cap:
                raise ParameterError(f"{name}: exceeds the {rate_cap:g} Hz physics rate "
                                                 f"(node '{self.get_fully_qualified_name()}')")
        self.sim = DriveSim(scene, self.vehicle, seed=cfg.seed, offscreen_size=(cfg.camera_width, cfg.camera_height))
        self.follower = PurePursuit(self.vehicle, follower)
        self._lock = threading.Lock()
        self.diagnostics = Diagnostics(self, 1.0)
        self._clock_pub = ClockPublisher(self, cfg.clock_rate_hz)
        self._odom_pub = self.create_publisher(Odometry, "odom", SENSOR_QOS)
        self._cameras = CameraPublisher(self, {"front": cfg.camera_frame}, cfg.camera_rate_hz)
        obstacles = self.create_publisher(PoseArray, "ground_truth/obstacles", LATCHED_QOS)
        obstacles.publish(self._obstacles_msg())
        self.create_subscription(DriveTrajectoryMsg, "drive_trajectory", self._on_trajectory, RELIABLE_QOS)
        self._odom = Every(cfg.odom_rate_hz)
        self._reported: tuple[int | None, bool] = (None, False)  # (obstacle collided with, left the road)
        self.start_physics("drive_sim_physics", cfg.real_time_factor)

    def _obstacles_msg(self) -> PoseArray:
        msg = PoseArray(header=Header(frame_id=self.cfg.odom_frame))
        for o in self.sim.obstacles:
            pose = Pose()
            pose.position.x, pose.position.y = o.x, o.y
            pose.orientation.w = 1.0
            msg.poses.append(pose)
        return msg

    # --- commands (executor thread) ---------------------------------------------

    def _on_trajectory(self, msg: DriveTrajectoryMsg) -> None:
        try:
            traj, stamp = trajectory_from_msg(msg)
            with self._lock:
                if traj.frame_id == self.cfg.base_frame:
                    pose = self.sim.pose_at(stamp)
                    if pose is None:
                        raise DriveError(f"header.stamp: no ego pose at {stamp:.3f} s to anchor a {traj.frame_id} trajectory")
                    x0, y0, yaw0 = pose
                    traj = traj.transformed(x0, y0, yaw0, self.cfg.odom_frame)
                elif traj.frame_id != self.cfg.odom_frame:
                    raise DriveError(f"header.frame_id: {traj.frame_id!r} is neither {self.cfg.odom_frame!r} "
                                     f"nor {self.cfg.base_frame!r}")
                self.follower.set_trajectory(traj, stamp)
        except DriveError as exc:
            self.get_logger().warning(f"rejected drive_trajectory: {exc}")
            self.diagnostics.report("drive_trajectory", ERROR, f"rejected: {exc}", now=True)

    # --- physics thread ---------------------------------------------------------

    def open_renderer(self):
        if not self._cameras.enabled:
            return None
        self.offscreen_gl()
        from plan_stack.embodiments.drive.sim import FrontCamera

        return FrontCamera(self.sim, self.cfg.camera_width, self.cfg.camera_height)

    def physics_step(self) -> None:
        with self._lock:
            cmd = self.follower.command(self.sim.state, self.sim.time_s)
            self.sim.step(cmd.accel_mps2, cmd.steer_rad)

    def publish_due(self, t: float, stamp: Time, camera) -> None:
        self._clock_pub.tick(t, stamp)
        if self._odom.due(t):
            self._odom_pub.publish(self._odometry(stamp))
        if camera is not None:
            self._cameras.tick(t, stamp, lambda _name: camera.render(), {"front": camera.model})
        safety = (self.sim.collided_with, self.sim.left_road)
        if safety != self._reported:
            self._reported = safety
            bad = safety[0] is not None or safety[1]
            self.diagnostics.report("safety", ERROR if bad else OK,
                                    "collision or road departure" if bad else "on the road, no collision",
                                    now=bad, collided_with=safety[0], left_road=safety[1])

    def _odometry(self, stamp: Time) -> Odometry:
        s = self.sim.state
        msg = Odometry(header=Header(stamp=stamp, frame_id=self.cfg.odom_frame), child_frame_id=self.cfg.base_frame)
        msg.pose.pose.position.x, msg.pose.pose.position.y = s.x, s.y
        msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(s.yaw / 2), math.cos(s.yaw / 2)
        msg.twist.twist.linear.x = s.v
        msg.twist.twist.angular.z = s.yaw_rate
        return msg


main = node_main(DriveSimNode)
