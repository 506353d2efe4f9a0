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


# --- the serialized form (CDR), what the stitcher, bridges and simulators put on the wire ------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

from plan_stack.ros.trajectory import trajectory_from_cdr, trajectory_to_cdr  # noqa: E402


def _same(a: Trajectory, b: Trajectory) -> None:
    assert a.joint_names == b.joint_names and a.stamp_s == b.stamp_s
    for field in ("times_s", "positions", "velocities", "accelerations"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), field
        if x is not None:
            assert x.shape == y.shape and np.array_equal(x, y), field  # to the bit


@st.composite
def _trajectories(draw):
    dof = draw(st.integers(0, 16))
    n = draw(st.integers(1, 40))
    kinds = draw(st.integers(1, 3))  # positions; + velocities; + accelerations
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    names = tuple(draw(st.lists(st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s),
                                min_size=dof, max_size=dof, unique=True)))
    times = np.cumsum(rng.uniform(1e-3, 0.5, n)) - draw(st.sampled_from([0.0, 1e-3]))
    arrays = [rng.normal(scale=3.0, size=(n, dof)) for _ in range(3)]
    stamp = draw(st.floats(0.0, 1e5, allow_nan=False))
    return Trajectory(names, stamp, times, arrays[0], arrays[1] if kinds > 1 else None,
                      arrays[2] if kinds > 2 else None)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(_trajectories(), st.sampled_from([0, 1_700_000_000 * 10**9]), st.sampled_from(["", "base", "wörld_frame"]),
       st.sampled_from([0.0, 0.05, 0.1234567891]))
def test_cdr_is_the_message_rclpy_serializes(traj, epoch_ns, frame_id, lead_s):
    """Both directions agree with rclpy's own serializer to the bit: our bytes deserialize to the message
    `trajectory_to_msg` builds, and rclpy's bytes read back to what `trajectory_from_msg` gives."""
    raw = trajectory_to_cdr(traj, epoch_ns, frame_id, lead_s)
    msg = trajectory_to_msg(traj, epoch_ns, frame_id, lead_s)
    assert deserialize_message(raw, JointTrajectory) == msg
    expected = trajectory_from_msg(msg, epoch_ns)
    _same(trajectory_from_cdr(serialize_message(msg), epoch_ns), expected)
    _same(trajectory_from_cdr(raw, epoch_ns), expected)


def test_cdr_reads_points_of_different_shapes_and_names_what_is_wrong():
    """Points need not share one layout on the wire (e.g. effort on some): read one by one then; the
    inconsistencies `trajectory_from_msg` rejects are rejected with its messages."""
    ok = JointTrajectory(joint_names=["a", "b"], points=[
        JointTrajectoryPoint(positions=[1.0, 2.0], effort=[5.0], time_from_start=Duration(sec=1)),
        JointTrajectoryPoint(positions=[3.0, 4.0], time_from_start=Duration(sec=2, nanosec=5))])
    _same(trajectory_from_cdr(serialize_message(ok)), trajectory_from_msg(ok))
    bad = [
        (JointTrajectory(joint_names=["a", "b"]), "^points:"),
        (JointTrajectory(joint_names=["a", "b"], points=[
            JointTrajectoryPoint(positions=[1.0], time_from_start=Duration(sec=1))]), "^positions: point 0 has 1"),
        (JointTrajectory(joint_names=["a", "b"], points=[
            JointTrajectoryPoint(positions=[1.0, 2.0], velocities=[0.0, 0.0], time_from_start=Duration(sec=1)),
            JointTrajectoryPoint(positions=[1.0, 2.0], time_from_start=Duration(sec=2))]), "for all points or none"),
        (JointTrajectory(joint_names=["a", "b"], points=[
            JointTrajectoryPoint(positions=[1.0, 2.0], time_from_start=Duration(sec=1)),
            JointTrajectoryPoint(positions=[1.0, 2.0, 3.0], time_from_start=Duration(sec=2))]),
         "^positions: point 1 has 3"),
    ]
    for msg, match in bad:
        with pytest.raises(TrajectoryError, match=match):
            trajectory_from_msg(msg)
        with pytest.raises(TrajectoryError, match=match):
            trajectory_from_cdr(serialize_message(msg))


def test_cdr_truncated_or_corrupt_bytes_are_errors_never_a_trajectory():
    rng = np.random.default_rng(3)
    traj = Trajectory.on_grid(2.0, 0.02, ("a", "b", "c"), *rng.normal(size=(3, 6, 3)))
    raw = trajectory_to_cdr(traj)
    for cut in range(0, len(raw) - 1):
        with pytest.raises(TrajectoryError):
            trajectory_from_cdr(raw[:cut])
    huge = bytearray(raw)
    huge[4 + 8 + 4 + 1 + 3:4 + 8 + 4 + 1 + 3 + 4] = (2**31).to_bytes(4, "little")  # joint_names count
    with pytest.raises(TrajectoryError):
        trajectory_from_cdr(bytes(huge))


def test_cdr_of_another_encapsulation_goes_through_rclpy():
    """A big-endian publisher's bytes (another RMW or machine) are read by rclpy's deserializer, not misread."""
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    point = T["trajectory_msgs/msg/JointTrajectoryPoint"](
        positions=np.array([1.5, -2.0]), velocities=np.array([0.5, 0.25]), accelerations=np.zeros(0),
        effort=np.zeros(0), time_from_start=T["builtin_interfaces/msg/Duration"](sec=1, nanosec=500))
    msg = T["trajectory_msgs/msg/JointTrajectory"](
        header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=7, nanosec=0), frame_id=""),
        joint_names=["a", "b"], points=[point])
    big = bytes(ts.serialize_cdr(msg, "trajectory_msgs/msg/JointTrajectory", little_endian=False))
    assert big[:2] == b"\x00\x00"
    traj = trajectory_from_cdr(big)
    assert traj.joint_names == ("a", "b") and traj.stamp_s == 7.0
    np.testing.assert_array_equal(traj.positions, [[1.5, -2.0]])
    np.testing.assert_array_equal(traj.velocities, [[0.5, 0.25]])
    assert traj.accelerations is None and traj.times_s[0] == 1.0000005
