"""Ruckig chaser and tails: samples inside the limits, exact start, tails end at rest."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.trajectory.limits import Limits, TrajectoryError, check_limits
from plan_stack.trajectory.ruckig_filter import RuckigFilter, RuckigStatus, _Schedule

DT = 0.02


def test_tracking_starts_at_x0_and_respects_limits():
    rng = np.random.default_rng(0)
    D, M = 5, 40
    ref = np.cumsum(rng.normal(0, 0.02, (M, D)), axis=0)
    x0 = np.vstack([ref[0], rng.uniform(-0.2, 0.2, D), np.zeros(D)])
    lim = Limits.create(D, 1.0, 5.0, 50.0)
    r = RuckigFilter().track(x0, ref, DT, lim)
    assert r.status is RuckigStatus.OK and r.positions.shape == (M, D)
    np.testing.assert_array_equal(np.vstack([r.positions[0], r.velocities[0], r.accelerations[0]]), x0)
    assert check_limits(DT, r.positions, r.velocities, r.accelerations, lim).ok


def test_tracking_follows_a_slow_reference():
    # The chaser is time-optimal toward a point ahead, so it runs slightly ahead of the
    # reference (the MPC backend tracks closer); it must still stay near it.
    D, M = 2, 50
    t = np.arange(M) * DT
    ref = 0.1 * np.sin(t)[:, None] * np.ones(D)
    x0 = np.vstack([ref[0], 0.1 * np.ones(D), np.zeros(D)])
    r = RuckigFilter().track(x0, ref, DT, Limits.create(D, 2.0, 10.0, 100.0))
    err = r.positions - ref
    assert np.max(np.abs(err)) < 0.015 and np.sqrt(np.mean(err**2)) < 0.01


def test_schedule_covers_every_sample_and_never_aims_twice_at_one_target():
    # Recomputing toward an unchanged target would only repeat the profile being followed.
    for M in range(2, 80):
        for stride, lookahead in [(1, 1), (5, 10), (5, 5), (7, 12), (10, 10)]:
            s = _Schedule.create(M, DT, stride, lookahead)
            assert sum(s.steps) == M - 1 and all(n >= 1 for n in s.steps)
            assert np.all(np.diff(s.target) > 0) and s.target[-1] == M - 1
            starts = np.cumsum((0,) + s.steps[:-1])
            assert np.all(s.target >= starts + np.array(s.steps))  # never follows past its target
            assert len(s.times) > max(s.steps)


@pytest.mark.parametrize("target", [np.array([0.3, -0.2]), None])
def test_to_rest_ends_at_rest(target):
    x0 = np.array([[0.0, 0.1], [0.5, -0.3], [1.0, 0.0]])
    lim = Limits.create(2, 1.0, 5.0, 50.0)
    r = RuckigFilter().to_rest(x0, target, DT, lim, max_steps=500)
    assert r.status is RuckigStatus.OK
    assert not np.any(r.velocities[-1]) and not np.any(r.accelerations[-1])
    if target is not None:
        np.testing.assert_allclose(r.positions[-1], target, atol=1e-9)
    full = [np.vstack([x0[i:i + 1], part]) for i, part in enumerate((r.positions, r.velocities, r.accelerations))]
    assert check_limits(DT, *full, lim).ok


def test_to_rest_reports_an_exhausted_budget():
    x0 = np.array([[0.0], [0.9], [0.0]])
    r = RuckigFilter().to_rest(x0, np.array([5.0]), DT, Limits.create(1, 1.0, 5.0, 50.0), max_steps=10)
    assert r.status is RuckigStatus.NOT_AT_REST and len(r.positions) == 10 and "needs" in r.message


def test_parameters_are_validated():
    with pytest.raises(TrajectoryError, match="ruckig_stride"):
        RuckigFilter(stride=0)
    with pytest.raises(TrajectoryError, match="ruckig_lookahead"):
        RuckigFilter(stride=5, lookahead=2)
    with pytest.raises(TrajectoryError, match="shapes"):
        RuckigFilter().track(np.zeros((3, 2)), np.zeros((5, 3)), DT, Limits.create(3, 1, 1, 1))
