"""trajectory.core: JTC interpolation rules, replacement and holding, without ROS."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.trajectory.core import (
    Reference,
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


# --- the stitcher's prediction against the controller's own evaluation ---------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from plan_stack.trajectory.alignment import Chunk  # noqa: E402
from plan_stack.trajectory.config import StitcherConfig  # noqa: E402
from plan_stack.trajectory.stitching import Stitcher  # noqa: E402

_T0 = 7.0  # execution timeline offset (a non-zero stamp: zero means "now" to a controller)


def _chunk(rng, stamp, q0, horizon, dt):
    steps = rng.uniform(-1.0, 1.0, size=(horizon - 1, len(q0))) * dt * np.array([2.0, 1.5, 1.0])
    return Chunk(stamp, ("a", "b", "grip"), dt, np.vstack([q0, q0 + np.cumsum(steps, axis=0)]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), delay_steps=st.integers(1, 15), phase=st.floats(0.0, 0.99),
       backend=st.sampled_from(["mpc", "ruckig"]))
def test_stitcher_prediction_matches_what_the_controller_executes(seed, delay_steps, phase, backend):
    """The stitcher plans the next trajectory from `Trajectory.sample` (its model of the controller); a
    controller executing the same trajectories (TrajectoryFollower, JTC rules: switch at the new stamp,
    start from its own reference) must produce the same reference at every time, between samples too."""
    rng = np.random.default_rng(seed)
    dt = 0.02
    cfg = StitcherConfig(joint_names=("a", "b", "grip"), discrete_joints=("grip",), backend=backend, dt=dt,
                         stitch_len=3)
    stitcher = Stitcher(cfg)
    q0 = rng.uniform(-0.5, 0.5, size=3)
    first = stitcher.process(_chunk(rng, _T0, q0, 30, dt), _T0, (q0, np.zeros(3), np.zeros(3))).trajectory
    now2 = _T0 + (delay_steps + phase) * dt
    second = stitcher.process(_chunk(rng, now2, first.sample(now2)[0][0], 30, dt), now2).trajectory
    assert first is not None and second is not None

    controller = TrajectoryFollower(cfg.joint_names, q0)
    assert controller.set_trajectory(first, _T0)
    before = np.sort(rng.uniform(_T0, now2, size=12))
    after = np.sort(rng.uniform(now2, second.end_s - 1e-6, size=24))
    for t in before:
        # Discrete channels (grippers) join a measured state in position only: their velocity is a finite
        # difference from sample 0, so on the first interval after a start from rest only the continuous
        # joints are predicted exactly.
        _agree(controller.sample(t), first.sample(t), t, slice(0, 2) if t < _T0 + dt else slice(None))
    assert controller.set_trajectory(second, now2)
    for t in after:
        _agree(controller.sample(t), (second if t >= second.t0_s else first).sample(t), t)


def _agree(ref, predicted, t, cols=slice(None)):
    q, v, a = (x[0][cols] for x in predicted)
    ref = Reference(ref.positions[cols], ref.velocities[cols], ref.accelerations[cols], ref.active)
    assert np.allclose(ref.positions, q, rtol=1e-9, atol=1e-9), t
    assert np.allclose(ref.velocities, v, rtol=1e-7, atol=1e-7), t
    assert np.allclose(ref.accelerations, a, rtol=1e-6, atol=1e-6), t


def test_grid_trajectory_sampling_uses_the_controller_polynomials():
    rng = np.random.default_rng(3)
    P, V, A = rng.normal(size=(3, 6, 2))
    grid = Trajectory.on_grid(_T0, 0.05, NAMES, P, V, A)
    assert grid.t0_s == _T0 and grid.end_s == pytest.approx(_T0 + 0.25) and grid.dt_s == 0.05
    same = Trajectory(NAMES, _T0, grid.times_s, P, V, A)  # not marked as a grid: evaluated by the spline
    t = _T0 + np.array([0.0, 0.013, 0.05, 0.1234, 0.2499, 0.25, 0.3])
    for x, y in zip(grid.sample(t), same.sample(t)):
        assert np.allclose(x[:-2], y[:-2], rtol=1e-12, atol=1e-12)
    q, v, a = grid.sample(t[-2:])
    assert np.array_equal(q[0], P[-1]) and np.array_equal(v[0], V[-1])  # on the last point: stored
    assert np.array_equal(q[1], P[-1]) and not v[1].any() and not a[1].any()  # after it: hold at rest


@pytest.mark.parametrize("mode", ["quintic", "cubic", "linear"])
def test_dense_extremes_are_those_of_the_dense_samples(mode):
    from plan_stack.trajectory.core import Spline

    rng = np.random.default_rng(3)
    t = np.concatenate([[0.0], 0.013 + 0.02 * np.arange(30)])  # a short first segment, as after a join
    P, V, A = rng.normal(size=(3, 31, 5))
    spline = Spline(t, P, None if mode == "linear" else V, A if mode == "quintic" else None, mode)
    q, v, a = spline.dense(16)
    lo, hi = spline.dense_extremes(16)
    np.testing.assert_allclose(lo, [q.min(0), v.min(0), a.min(0)], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hi, [q.max(0), v.max(0), a.max(0)], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["quintic", "cubic", "linear"])
def test_knot_samples_are_the_spline_s_dense_samples(mode):
    """KnotSamples (one product from the knots) lays out the same samples as Spline.dense / dense_jerk (per-
    segment coefficients), in the same order, with the same extremes, also with a short first segment."""
    from plan_stack.trajectory.core import KnotSamples, Spline

    rng = np.random.default_rng(4)
    t = np.concatenate([[0.0], 0.013 + 0.02 * np.arange(30)])
    P, V, A = rng.normal(size=(3, 31, 5))
    V = None if mode == "linear" else V
    A = A if mode == "quintic" else None
    spline = Spline(t, P, V, A, mode)
    curve = KnotSamples(t, P, V, A, mode, 16, orders=4)
    for k, want in enumerate([*spline.dense(16), spline.dense_jerk(16)]):
        if mode == "linear" and k > 1:
            continue  # a linear spline's dense() reports zero acceleration rows of another shape
        np.testing.assert_allclose(curve.dense(k), want, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(want).max()))
    lo, hi = curve.extremes()
    assert np.array_equal(lo[1], curve.dense(1).min(axis=0)) and np.array_equal(hi[0], curve.dense(0).max(axis=0))
    one = KnotSamples(t[:1], P[:1], None, None, "linear", 16)
    assert np.array_equal(one.extremes()[0][0], P[0]) and not one.extremes()[1][1:].any()
