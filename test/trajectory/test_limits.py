"""Limit construction and the final check every trajectory passes."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.trajectory.limits import Limits, TrajectoryError, check_limits

DT = 0.02


@pytest.mark.parametrize("kw, match", [
    (dict(v_max=0.0), "v_max"), (dict(a_max=-1.0), "a_max"), (dict(j_max=float("inf")), "j_max"),
    (dict(v_max=[1.0, 2.0]), "v_max"), (dict(q_min=[1.0, 1.0, 1.0], q_max=[0.0, 2.0, 2.0]), "q_min"),
])
def test_create_validates(kw, match):
    base = dict(v_max=1.0, a_max=1.0, j_max=1.0)
    base.update(kw)
    with pytest.raises(TrajectoryError, match=f"^{match}"):
        Limits.create(3, **base)


def test_scaled_shrinks_toward_zero_and_the_middle_of_the_range():
    lim = Limits.create(2, [1.0, 2.0], 10.0, 100.0, q_min=[-1.0, 0.0], q_max=[1.0, 2.0]).scaled(0.5)
    np.testing.assert_allclose(lim.v_max, [0.5, 1.0])
    np.testing.assert_allclose(lim.q_min, [-0.5, 0.5])
    np.testing.assert_allclose(lim.q_max, [0.5, 1.5])
    assert lim.has_position_limits and not Limits.create(1, 1, 1, 1).has_position_limits


def _ramp(T=10):
    a = np.zeros((T, 1))
    v = np.zeros((T, 1))
    q = np.zeros((T, 1))
    return q, v, a


def test_check_measures_each_limit():
    lim = Limits.create(1, 1.0, 2.0, 10.0, q_min=[-0.5], q_max=[0.5])
    q, v, a = _ramp()
    assert check_limits(DT, q, v, a, lim).ok
    v[3] = 1.5
    rep = check_limits(DT, q, v, a, lim)
    assert not rep.ok and rep.v_ratio == pytest.approx(1.5)
    v[3] = 0.0
    a[4] = 0.3  # jump of 0.3 in one sample: jerk 15 > 10
    rep = check_limits(DT, q, v, a, lim)
    assert not rep.ok and rep.j_ratio == pytest.approx(1.5) and rep.a_ratio == pytest.approx(0.15)
    a[4] = 0.0
    q[5] = 0.6
    rep = check_limits(DT, q, v, a, lim)
    assert not rep.ok and rep.q_violation == pytest.approx(0.1)
    q[5] = 0.0
    rep = check_limits(DT, q, v, a, lim, np.array([[0.0], [0.1]]), np.array([2.0]))
    assert not rep.ok and rep.rate_ratio == pytest.approx(2.5)
    v[0] = np.nan
    assert not check_limits(DT, q, v, a, lim).ok


def test_check_tolerates_round_off_only():
    lim = Limits.create(1, 1.0, 1.0, 1.0)
    q, v, a = _ramp()
    v[2] = 1.0 + 1e-12
    assert check_limits(DT, q, v, a, lim).ok
    v[2] = 1.0 + 1e-6
    assert not check_limits(DT, q, v, a, lim).ok
    assert check_limits(DT, q, v, a, lim, rtol=1e-5).margin == pytest.approx(-1e-6)


def test_exact_range_joints_are_the_stitchers_saturate_joints():
    """End-stop joints keep the bridge's exact range and are saturated (clamped) by the stitcher."""
    from plan_stack.trajectory.limits import LimitRule, LimitsError

    bridge = Limits.for_joints(("a", "g"), [-1.0, 0.0], [1.0, 1.0], [2.0, 5.0], [10.0, 40.0])
    out = LimitRule(exact_range_joints=("g",)).stitcher_limits(bridge, ("a", "g"))
    assert out["saturate_joints"] == ("g",) and out["q_max"][1] == 1.0
    assert "saturate_joints" not in LimitRule().stitcher_limits(bridge, ("a", "g"))
    with pytest.raises(LimitsError, match="exact_range_joints: \\['gg'\\] not in"):
        LimitRule(exact_range_joints=("gg",)).stitcher_limits(bridge, ("a", "g"))
    unbounded = Limits.for_joints(("a", "g"), [-np.inf, 0.0], [np.inf, 1.0], [2.0, 5.0], [10.0, 40.0])
    with pytest.raises(LimitsError, match="need a position range"):
        LimitRule(exact_range_joints=("g",)).stitcher_limits(unbounded, ("a", "g"))
