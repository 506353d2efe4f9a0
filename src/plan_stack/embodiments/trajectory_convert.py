"""Node-edge conversions between trajectory_msgs and the ROS-free `Trajectory`.

The only module under `embodiments/` (besides the nodes) that imports ROS
messages; bridges and simulators of every embodiment share it.
"""
from __future__ import annotations

import numpy as np
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from plan_stack.embodiments.joint_trajectory import Trajectory, TrajectoryError
from plan_stack.ros.time import duration_to_s, s_to_duration, s_to_stamp, stamp_to_s

__all__ = ["stamp_to_s", "s_to_stamp", "duration_to_s", "s_to_duration", "trajectory_from_msg", "trajectory_to_msg"]


# Time conversions live in plan_stack.ros.time (one integer-nanosecond rounding); re-exported here.
_s_to_duration = s_to_duration
_duration_s = duration_to_s


def trajectory_from_msg(msg: JointTrajectory) -> Trajectory:
    """Message -> Trajectory; velocities/accelerations only when every point has them.

    Raises TrajectoryError when a point's array sizes do not match the joints
    or when some points carry velocities and others do not.
    """
    names = tuple(msg.joint_names)
    d, n = len(names), len(msg.points)
    if n == 0:
        raise TrajectoryError("points: a trajectory needs at least one point")
    pos = np.empty((n, d))
    times = np.empty(n)
    has_v = [len(p.velocities) > 0 for p in msg.points]
    has_a = [len(p.accelerations) > 0 for p in msg.points]
    if len(set(has_v)) > 1 or len(set(has_a)) > 1:
        raise TrajectoryError("points: velocities/accelerations must be given for all points or none")
    vel = np.empty((n, d)) if has_v[0] else None
    acc = np.empty((n, d)) if has_a[0] else None
    for i, p in enumerate(msg.points):
        for label, arr, out in (("positions", p.positions, pos), ("velocities", p.velocities, vel),
                                ("accelerations", p.accelerations, acc)):
            if out is None:
                continue
            if len(arr) != d:
                raise TrajectoryError(f"{label}: point {i} has {len(arr)} values for {d} joints")
            out[i] = arr
        times[i] = _duration_s(p.time_from_start)
    return Trajectory(names, stamp_to_s(msg.header.stamp), times, pos, vel, acc)


def trajectory_to_msg(traj: Trajectory, frame_id: str = "") -> JointTrajectory:
    msg = JointTrajectory(joint_names=list(traj.joint_names))
    msg.header.stamp = s_to_stamp(traj.stamp_s)
    msg.header.frame_id = frame_id
    for i, t in enumerate(traj.times_s):
        p = JointTrajectoryPoint(time_from_start=_s_to_duration(float(t)))
        p.positions = traj.positions[i].tolist()
        if traj.velocities is not None:
            p.velocities = traj.velocities[i].tolist()
        if traj.accelerations is not None:
            p.accelerations = traj.accelerations[i].tolist()
        msg.points.append(p)
    return msg
