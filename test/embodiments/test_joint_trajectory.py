"""joint_trajectory: JTC interpolation rules, replacement and holding, without ROS."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.joint_trajectory import (
    Spline,
    Trajectory,
    TrajectoryError,
    TrajectoryFollower,
    interpolation_of,
)

NAMES = ("a", "b")


def traj(times, pos, vel=None, acc=None, stamp=0.0, names=NAMES):
    return Trajectory(names, stamp, np.array(times, float), np.array(pos, float),
                      None if vel is None else np.array(vel, float), None if acc is None else np.array(acc, float))


def test_interpolation_mode_follows_given_fields():
    assert interpolation_of(None, None) == "linear"
    assert interpolation_of(np.zeros(1), None) == "cubic"
    assert interpolation_of(np.zeros(1), np.zeros(1)) == "quintic"
    assert interpolation_of(None, np.zeros(1)) == "linear"  # accelerations alone are ignored, as in the JTC


@pytest.mark.parametrize("mode", ["linear", "cubic", "quintic"])
def test_spline_hits_knots_and_boundary_derivatives(mode):
    t = np.array([0.0, 1.0, 2.5])
    q = np.array([[0.0, 1.0], [0.5, -1.0], [2.0, 0.0]])
    v = np.array([[0.0, 0.0], [0.7, 0.1], [0.0, 0.0]]) if mode != "linear" else None
    a = np.array([[0.0, 0.0], [0.3, -0.2], [0.0, 0.0]]) if mode == "quintic" else None
    s = Spline(t, q, v, a, mode)
    for i, ti in enumerate(t[:-1]):
        ref = s.sample(ti)
        assert np.allclose(ref.positions, q[i])
        if v is not None:
            assert np.allclose(ref.velocities, v[i])
        if a is not None:
            assert np.allclose(ref.accelerations, a[i])
    # Continuity just before/after the interior knot.
    left, right = s.sample(1.0 - 1e-7), s.sample(1.0 + 1e-7)
    assert np.allclose(left.positions, right.positions, atol=1e-5)
    if mode != "linear":
        assert np.allclose(left.velocities, right.velocities, atol=1e-4)


def test_spline_rejects_non_increasing_knots():
    with pytest.raises(TrajectoryError, match="strictly increasing"):
        Spline(np.array([0.0, 0.0]), np.zeros((2, 1)), None, None, "linear")


def test_trajectory_rejects_wrong_shapes():
    with pytest.raises(TrajectoryError, match="^positions: expected shape"):
        traj([1.0], [[1.0, 2.0, 3.0]])
    with pytest.raises(TrajectoryError, match="^points:"):
        Trajectory(NAMES, 0.0, np.zeros(0), np.zeros((0, 2)))


def test_follower_starts_from_present_state_with_stamp_zero_meaning_now():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    assert f.set_trajectory(traj([1.0], [[1.0, 2.0]], [[0, 0]], [[0, 0]]), now_s=10.0)
    r0 = f.sample(10.0)
    assert np.allclose(r0.positions, 0.0) and r0.active
    mid = f.sample(10.5)
    assert np.allclose(mid.positions, [0.5, 1.0])  # quintic rest-to-rest is symmetric
    end = f.sample(12.0)
    assert np.allclose(end.positions, [1.0, 2.0]) and not end.active and np.allclose(end.velocities, 0)
    assert f.holding


def test_follower_never_extrapolates_past_the_last_point():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    f.set_trajectory(traj([1.0], [[1.0, 1.0]], [[5.0, 5.0]]), now_s=0.0)  # ends moving at 5 units/s
    late = f.sample(3.0)
    assert np.allclose(late.positions, [1.0, 1.0]) and np.allclose(late.velocities, 0.0)


def test_replacement_waits_for_its_start_and_is_continuous():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    f.set_trajectory(traj([2.0], [[2.0, 0.0]], [[0, 0]], [[0, 0]]), now_s=0.0)
    f.sample(0.0)
    f.set_trajectory(traj([1.0], [[-1.0, 0.0]], [[0, 0]], [[0, 0]], stamp=1.0), now_s=0.5)
    before = f.sample(0.999)
    assert before.positions[0] > 0.9  # still on the first trajectory
    at = f.sample(1.0)
    assert abs(at.positions[0] - before.positions[0]) < 0.01  # no jump at the switch
    assert abs(at.velocities[0] - before.velocities[0]) < 0.05
    assert np.isclose(f.sample(2.0).positions[0], -1.0)


def test_points_already_due_are_skipped():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    stale_start = traj([0.5, 1.0, 3.0], [[9.0, 9.0], [9.0, 9.0], [1.0, 1.0]], stamp=5.0)
    f.set_trajectory(stale_start, now_s=6.5)
    r = f.sample(6.5)
    assert np.allclose(r.positions, 0.0)  # starts from the present reference, not from the skipped points
    assert np.all(f.sample(8.0).positions < 1.0 + 1e-9)


def test_fully_stale_trajectory_is_ignored():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    assert not f.set_trajectory(traj([0.5], [[1.0, 1.0]], stamp=1.0), now_s=5.0)
    assert np.allclose(f.sample(5.0).positions, 0.0)


def test_joint_order_is_mapped_by_name_and_set_must_match():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    f.set_trajectory(traj([1.0], [[2.0, 1.0]], names=("b", "a")), now_s=0.0)
    assert np.allclose(f.sample(5.0).positions, [1.0, 2.0])
    with pytest.raises(TrajectoryError, match="^joint_names"):
        f.set_trajectory(traj([1.0], [[2.0, 1.0]], names=("a", "c")), now_s=0.0)
    assert np.allclose(f.final_positions, [1.0, 2.0])


def test_switch_is_anchored_at_the_start_time_even_between_samples():
    # Constant velocity 1 unit/s; a stop trajectory due at t=1.0 that was computed from the state at 1.0.
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    f.set_trajectory(traj([10.0], [[10.0, 0.0]]), now_s=0.0)
    f.sample(0.996)
    stop = traj([0.5], [[1.25, 0.0]], [[0.0, 0.0]], stamp=1.0)  # decelerate 1 -> 0 in 0.5 s: 0.25 further
    f.set_trajectory(stop, now_s=0.997)
    assert np.isclose(f.peek(1.0).positions[0], 1.0) and f.sample(0.998).positions[0] < 1.0
    r = f.sample(1.004)  # the first sample after the start time
    # Anchored at t=1.0 (q=1, v=1): the cubic is the exact deceleration profile, v = 1 - 2*(t-1).
    assert np.isclose(r.velocities[0], 1.0 - 2 * 0.004, atol=1e-9)
    assert np.isclose(r.positions[0], 1.0 + 0.004 - 0.004**2, atol=1e-9)


def test_peek_has_no_side_effects():
    f = TrajectoryFollower(NAMES, [0.0, 0.0])
    f.set_trajectory(traj([1.0], [[1.0, 1.0]]), now_s=0.0)
    assert np.allclose(f.peek(0.5).positions, 0.5)
    assert not f.holding and f.end_s == 1.0
    assert np.allclose(f.sample(0.25).positions, 0.25)
