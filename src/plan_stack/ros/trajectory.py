"""trajectory_msgs/JointTrajectory <-> the in-memory `plan_stack.trajectory.core.Trajectory`: the one converter.

The stitcher publishes with it, the bridges read and publish with it, the
simulated controllers read with it. Times go through `plan_stack.stamps`
(one rounding to integer nanoseconds).
"""
from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Duration
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from plan_stack.ros.time import duration_to_s, ns_to_stamp, stamp_to_ns
from plan_stack.stamps import NS_PER_S, ns_to_s, s_to_ns
from plan_stack.trajectory.core import Trajectory, TrajectoryError

__all__ = ["trajectory_from_msg", "trajectory_to_msg"]


def trajectory_from_msg(msg: JointTrajectory, epoch_ns: int = 0) -> Trajectory:
    """Message -> Trajectory (stamp in seconds since `epoch_ns`; a zero stamp stays 0 = "now").

    Velocities/accelerations only when every point has them. Raises
    TrajectoryError when a point's array sizes do not match the joints or when
    some points carry velocities and others do not.
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
        times[i] = duration_to_s(p.time_from_start)
    stamp_ns = stamp_to_ns(msg.header.stamp)
    stamp_s = 0.0 if stamp_ns == 0 else ns_to_s(stamp_ns - epoch_ns)
    return Trajectory(names, stamp_s, times, pos, vel, acc)


def trajectory_to_msg(traj: Trajectory, epoch_ns: int = 0, frame_id: str = "", lead_s: float = 0.0
                      ) -> JointTrajectory:
    """Trajectory -> message: header.stamp = epoch_ns + stamp_s - lead_s, time_from_start = lead_s + times_s.

    The absolute times are the same for any lead. With a lead the first point is not "due now": a
    controller with joint_trajectory_controller semantics joins its present reference to it over the lead
    instead of taking it as a jump (a start from the measured state a few mrad off the held reference)."""
    lead_ns = s_to_ns(lead_s)
    msg = JointTrajectory()
    msg.header.stamp = ns_to_stamp(epoch_ns + s_to_ns(traj.stamp_s) - lead_ns)
    msg.header.frame_id = frame_id
    msg.joint_names = list(traj.joint_names)
    P = traj.positions.tolist()
    V = None if traj.velocities is None else traj.velocities.tolist()
    A = None if traj.accelerations is None else traj.accelerations.tolist()
    points = []
    for i, t in enumerate(traj.times_s.tolist()):
        sec, nanosec = divmod(lead_ns + s_to_ns(t), NS_PER_S)
        p = JointTrajectoryPoint(positions=P[i], time_from_start=Duration(sec=sec, nanosec=nanosec))
        if V is not None:
            p.velocities = V[i]
        if A is not None:
            p.accelerations = A[i]
        points.append(p)
    msg.points = points
    return msg
