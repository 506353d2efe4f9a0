"""Node-edge conversions: plan_stack/DriveTrajectory <-> the ROS-free `DriveTrajectory`, odometry, plans.

The only module of `embodiments/drive` besides the nodes that imports ROS messages.
"""
from __future__ import annotations

import math

import numpy as np
from nav_msgs.msg import Odometry

from plan_stack.embodiments.drive.bridge import EgoState
from plan_stack.embodiments.drive.trajectory import DriveTrajectory
from plan_stack.msg import DriveTrajectory as DriveTrajectoryMsg
from plan_stack.msg import DriveTrajectoryPoint
from plan_stack.ros.time import duration_to_s, s_to_duration, s_to_stamp, stamp_to_s

__all__ = ["trajectory_to_msg", "trajectory_from_msg", "ego_from_odometry", "primitives_of"]


def _yaw_of(q) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def trajectory_to_msg(traj: DriveTrajectory, stamp_s: float) -> DriveTrajectoryMsg:
    msg = DriveTrajectoryMsg()
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.header.frame_id = traj.frame_id
    for i in range(len(traj)):
        p = DriveTrajectoryPoint(time_from_start=s_to_duration(float(traj.times_s[i])))
        p.pose.position.x, p.pose.position.y = float(traj.x[i]), float(traj.y[i])
        p.pose.orientation.z, p.pose.orientation.w = math.sin(traj.yaw[i] / 2), math.cos(traj.yaw[i] / 2)
        p.longitudinal_velocity_mps = float(traj.speed[i])
        p.lateral_velocity_mps = 0.0
        p.acceleration_mps2 = float(traj.accel[i])
        p.heading_rate_rps = float(traj.yaw_rate[i])
        p.front_wheel_angle_rad = float(traj.steer[i])
        p.rear_wheel_angle_rad = 0.0
        p.curvature_1pm = float(traj.curvature[i])
        msg.points.append(p)
    return msg


def trajectory_from_msg(msg: DriveTrajectoryMsg) -> tuple[DriveTrajectory, float]:
    """(trajectory, absolute stamp of t = 0). Raises DriveError on empty, non-finite or unordered points."""
    pts = msg.points
    cols = np.array([[duration_to_s(p.time_from_start), p.pose.position.x, p.pose.position.y,
                      _yaw_of(p.pose.orientation), p.longitudinal_velocity_mps, p.acceleration_mps2,
                      p.heading_rate_rps, p.curvature_1pm, p.front_wheel_angle_rad] for p in pts]).reshape(-1, 9)
    if len(cols):
        cols[:, 3] = np.unwrap(cols[:, 3])
    t, x, y, yaw, speed, accel, yaw_rate, curvature, steer = cols.T
    traj = DriveTrajectory(t, x, y, yaw, speed, accel, yaw_rate, curvature, steer, frame_id=msg.header.frame_id)
    return traj, stamp_to_s(msg.header.stamp)


def ego_from_odometry(msg: Odometry) -> EgoState:
    p, q, tw = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist
    return EgoState(stamp_to_s(msg.header.stamp), p.x, p.y, _yaw_of(q), tw.linear.x, tw.angular.z)


def primitives_of(plan) -> list[tuple[str, np.ndarray, float]]:
    """VisualPlan -> [(kind, points [P, 3], horizon_s)] in output order."""
    return [(p.kind, np.array([[pt.x, pt.y, pt.z] for pt in p.points], dtype=float).reshape(-1, 3),
             float(p.horizon_s)) for p in plan.primitives]
