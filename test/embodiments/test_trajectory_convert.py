"""trajectory_convert: JointTrajectory messages <-> Trajectory, with clear errors."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trajectory_msgs")

from builtin_interfaces.msg import Duration  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from plan_stack.embodiments.joint_trajectory import Trajectory, TrajectoryError  # noqa: E402
from plan_stack.embodiments.trajectory_convert import (  # noqa: E402
    s_to_stamp,
    stamp_to_s,
    trajectory_from_msg,
    trajectory_to_msg,
)


def test_round_trip():
    t = Trajectory(("a", "b"), 12.25, np.array([0.5, 1.75]), np.array([[1.0, 2.0], [3.0, 4.0]]),
                   np.array([[0.1, 0.2], [0.0, 0.0]]), None)
    back = trajectory_from_msg(trajectory_to_msg(t))
    assert back.joint_names == t.joint_names and back.stamp_s == 12.25
    assert np.allclose(back.times_s, t.times_s) and np.allclose(back.positions, t.positions)
    assert np.allclose(back.velocities, t.velocities) and back.accelerations is None
    assert stamp_to_s(s_to_stamp(3.999999999)) == pytest.approx(3.999999999)


def test_inconsistent_points_are_rejected():
    msg = JointTrajectory(joint_names=["a", "b"])
    with pytest.raises(TrajectoryError, match="^points:"):
        trajectory_from_msg(msg)
    msg.points = [JointTrajectoryPoint(positions=[1.0], time_from_start=Duration(sec=1))]
    with pytest.raises(TrajectoryError, match="^positions: point 0 has 1 values for 2 joints"):
        trajectory_from_msg(msg)
    msg.points = [JointTrajectoryPoint(positions=[1.0, 2.0], velocities=[0.0, 0.0], time_from_start=Duration(sec=1)),
                  JointTrajectoryPoint(positions=[1.0, 2.0], time_from_start=Duration(sec=2))]
    with pytest.raises(TrajectoryError, match="for all points or none"):
        trajectory_from_msg(msg)
