"""ros.trajectory: JointTrajectory messages <-> Trajectory, with clear errors."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trajectory_msgs")

from builtin_interfaces.msg import Duration  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from plan_stack.ros.time import s_to_stamp, stamp_to_s  # noqa: E402
from plan_stack.ros.trajectory import trajectory_from_msg, trajectory_to_msg  # noqa: E402
from plan_stack.trajectory.core import Trajectory, TrajectoryError  # noqa: E402


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


def test_grid_trajectory_round_trip_keeps_the_executed_curve():
    """What the stitcher predicts (grid sampling) and what a controller executes from the message agree
    after the nanosecond rounding of stamps and times_from_start."""
    from plan_stack.trajectory.core import TrajectoryFollower

    rng = np.random.default_rng(0)
    P, V, A = rng.normal(size=(3, 11, 2))
    epoch_ns = 1_700_000_000 * 10**9
    grid = Trajectory.on_grid(3.21, 0.02, ("a", "b"), P, V, A)
    msg = trajectory_to_msg(grid, epoch_ns)
    assert msg.header.stamp.sec == 1_700_000_003 and msg.header.stamp.nanosec == 210_000_000
    assert msg.points[7].time_from_start.nanosec == 140_000_000
    back = trajectory_from_msg(msg, epoch_ns)
    follower = TrajectoryFollower(("a", "b"), P[0])
    follower.set_trajectory(back, 3.0)
    for t in np.sort(rng.uniform(3.21 + 0.02, grid.end_s, size=20)):
        ref = follower.sample(t)
        q, v, _ = grid.sample(t)
        assert np.allclose(ref.positions, q[0], atol=1e-9) and np.allclose(ref.velocities, v[0], atol=1e-6)


def test_a_lead_keeps_the_absolute_times_and_moves_the_first_point_off_zero():
    import numpy as np

    from plan_stack.ros.trajectory import trajectory_to_msg
    from plan_stack.trajectory.core import Trajectory

    q = np.linspace(0, 1, 5)[:, None] * np.ones((1, 2))
    traj = Trajectory.on_grid(3.0, 0.02, ("a", "b"), q, np.zeros_like(q), np.zeros_like(q))

    def absolute(msg):
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        return np.array([stamp + p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points])

    plain, led = trajectory_to_msg(traj), trajectory_to_msg(traj, lead_s=0.1)
    np.testing.assert_allclose(absolute(plain), absolute(led), atol=1e-9)
    assert plain.points[0].time_from_start.nanosec == 0 and led.points[0].time_from_start.nanosec == 100_000_000
    assert (led.header.stamp.sec, led.header.stamp.nanosec) == (2, 900_000_000)
