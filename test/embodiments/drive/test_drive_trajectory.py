"""Waypoints -> trajectory: every count/horizon, arc-length plans, limit checks, smoothing, rejection."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_stack.config import ConfigError
from plan_stack.embodiments.drive.errors import DriveError
from plan_stack.embodiments.drive.trajectory import (
    DriveTrajectoryConfig,
    Status,
    _speed_profile,
    convert_waypoints,
    interp_scalar,
    stop_trajectory,
)
from plan_stack.embodiments.drive.vehicle import VehicleParams

VEH = VehicleParams()
CFG = DriveTrajectoryConfig()


def _circle(speed, radius, count, horizon):
    t = np.arange(1, count + 1) * horizon / count
    th = speed * t / radius
    return np.c_[radius * np.sin(th), radius * (1 - np.cos(th)), np.zeros(count)]


@pytest.mark.parametrize("count,horizon", [(8, 4.0), (20, 5.0), (64, 6.4), (1, 1.0)])
def test_timed_constant_turn_has_the_expected_profile(count, horizon):
    speed, radius = 6.0, 30.0
    conv = convert_waypoints(_circle(speed, radius, count, horizon), horizon, VEH, CFG, v0=speed)
    assert conv.status is Status.ACCEPTED, conv.violations
    tr = conv.trajectory
    assert tr.times_s[0] == 0.0 and tr.duration_s == pytest.approx(horizon)
    assert np.allclose(np.diff(tr.times_s)[:-1], CFG.output_dt_s)
    if count >= 8:  # enough waypoints to pin down the arc
        mid = slice(len(tr) // 4, 3 * len(tr) // 4)
        assert np.allclose(tr.speed[mid], speed, rtol=0.02)
        assert np.allclose(tr.curvature[mid], 1 / radius, rtol=0.05)
        assert np.allclose(tr.yaw_rate[mid], speed / radius, rtol=0.05)
        assert np.allclose(tr.steer[mid], math.atan(VEH.wheelbase_m / radius), rtol=0.05)
        assert np.allclose(tr.accel[mid], 0.0, atol=0.1)
    # the last point is the last waypoint
    end = _circle(speed, radius, count, horizon)[-1]
    assert (tr.x[-1], tr.y[-1]) == pytest.approx((end[0], end[1]), abs=1e-6)


def test_output_at_waypoints_when_output_dt_is_zero():
    cfg = DriveTrajectoryConfig(output_dt_s=0.0)
    conv = convert_waypoints(_circle(5.0, 40.0, 8, 4.0), 4.0, VEH, cfg)
    assert np.allclose(conv.trajectory.times_s, np.arange(9) * 0.5)


def test_straight_acceleration_is_recovered():
    t = np.arange(1, 21) * 0.25
    x = 2.0 * t + 0.5 * 1.0 * t**2
    tr = convert_waypoints(np.c_[x, 0 * x], 5.0, VEH, CFG, v0=2.0).trajectory
    assert np.allclose(tr.speed[5:-5], 2.0 + tr.times_s[5:-5], atol=0.05)
    assert np.allclose(tr.accel[5:-5], 1.0, atol=0.1)
    assert np.allclose(tr.y, 0.0) and np.allclose(tr.yaw, 0.0)


def test_a_plan_that_stops_stays_stopped():
    t = np.arange(1, 9) * 0.5
    x = np.where(t < 2.0, 4 * t - t**2, 4.0)  # 4 m/s, braking at 2 m/s^2, at rest from t = 2 s
    conv = convert_waypoints(np.c_[x, 0 * x], 4.0, VEH, CFG, v0=4.0)
    assert conv.status is Status.ACCEPTED, conv.violations
    tr = conv.trajectory
    assert np.all(tr.speed >= 0) and np.all(np.diff(tr.x) >= -1e-9)
    assert np.allclose(tr.speed[tr.times_s >= 2.0], 0.0, atol=1e-9)
    assert tr.x[-1] == pytest.approx(4.0)


def test_too_fast_plan_is_smoothed_or_rejected():
    t = np.arange(1, 65) * 0.1
    pts = np.c_[25 * t, 0 * t]
    conv = convert_waypoints(pts, 6.4, VEH, CFG, v0=15.0)
    assert conv.status is Status.SMOOTHED and conv.violations[0].startswith("speed")
    tr = conv.trajectory
    assert tr.speed.max() <= CFG.max_speed_mps + 1e-9
    assert tr.accel.min() >= -CFG.max_decel_mps2 - 1e-9 and tr.accel.max() <= CFG.max_accel_mps2 + 1e-9
    assert tr.x[-1] == pytest.approx(pts[-1, 0], rel=1e-3)  # same path, re-timed
    rej = convert_waypoints(pts, 6.4, VEH, DriveTrajectoryConfig(infeasible="reject"), v0=15.0)
    assert rej.status is Status.REJECTED and rej.trajectory is None and "speed" in rej.message


def test_lateral_acceleration_is_smoothed_by_slowing_down():
    conv = convert_waypoints(_circle(9.0, 15.0, 20, 5.0), 5.0, VEH, CFG, v0=9.0)  # 5.4 m/s^2 lateral
    assert conv.status is Status.SMOOTHED and any(v.startswith("lateral") for v in conv.violations)
    tr = conv.trajectory
    lat = tr.speed**2 * np.abs(tr.curvature)
    assert lat[5:].max() <= CFG.max_lateral_accel_mps2 * 1.05
    assert tr.duration_s > 5.0


def test_curvature_beyond_steering_and_reverse_are_always_rejected():
    conv = convert_waypoints(_circle(2.0, 2.0, 8, 4.0), 4.0, VEH, CFG)
    assert conv.status is Status.REJECTED and conv.violations[0].startswith("curvature")
    x = np.array([1.0, 2.0, 3.0, 2.5, 2.0, 1.0, 1.0, 1.0])
    conv = convert_waypoints(np.c_[x, 0 * x], 4.0, VEH, CFG)
    assert conv.status is Status.REJECTED and conv.violations[0].startswith("reverse")


def test_arc_length_plan_gets_a_speed_profile():
    s = np.arange(1, 41) * 1.0
    conv = convert_waypoints(np.c_[s, 0 * s], 0.0, VEH, CFG, v0=0.0)
    assert conv.status is Status.ACCEPTED
    tr = conv.trajectory
    assert tr.speed[0] == 0.0 and tr.speed.max() == pytest.approx(CFG.cruise_speed_mps)
    assert tr.accel.max() <= CFG.max_accel_mps2 + 1e-9
    assert tr.x[-1] == pytest.approx(40.0, abs=1e-6)
    # a tighter curve is driven slower: v^2 k <= a_lat
    r = 10.0
    th = np.arange(1, 31) * 1.0 / r
    tr = convert_waypoints(np.c_[r * np.sin(th), r * (1 - np.cos(th))], 0.0, VEH, CFG, v0=3.0).trajectory
    assert np.max(tr.speed**2 * np.abs(tr.curvature)) <= CFG.max_lateral_accel_mps2 * 1.03
    assert tr.speed[0] == pytest.approx(3.0)


def test_bad_input_raises():
    with pytest.raises(DriveError, match="^points: non-finite waypoint 2"):
        convert_waypoints([[1, 0], [2, 0], [np.nan, 0]], 3.0, VEH, CFG)
    with pytest.raises(DriveError, match="^points: expected"):
        convert_waypoints(np.zeros((3, 4)), 3.0, VEH, CFG)
    with pytest.raises(DriveError, match="^points: a plan needs"):
        convert_waypoints(np.zeros((0, 2)), 3.0, VEH, CFG)
    with pytest.raises(DriveError, match="^horizon_s"):
        convert_waypoints([[1, 0]], -1.0, VEH, CFG)
    with pytest.raises(DriveError, match="^v0"):
        convert_waypoints([[1, 0]], 1.0, VEH, CFG, v0=float("inf"))
    with pytest.raises(ConfigError, match="^cruise_speed_mps"):
        DriveTrajectoryConfig(cruise_speed_mps=20.0, max_speed_mps=10.0)
    with pytest.raises(ConfigError, match="^infeasible"):
        DriveTrajectoryConfig(infeasible="ignore")


def test_stop_trajectory_brakes_smoothly_on_the_present_arc():
    tr = stop_trajectory(6.0, 2.0, 0.1, VEH, curvature_1pm=0.02)
    assert tr.duration_s == pytest.approx(3.0) and tr.speed[-1] == 0.0
    assert np.all(np.diff(tr.speed) <= 0) and np.allclose(tr.accel[:-1], -2.0)
    assert math.hypot(tr.x[-1], tr.y[-1] - 50.0) == pytest.approx(50.0)  # on the circle of radius 1/k
    assert len(stop_trajectory(0.0, 2.0, 0.1, VEH)) == 1


@settings(max_examples=40, deadline=None)
@given(count=st.integers(2, 64), horizon=st.floats(1.0, 8.0), speed=st.floats(0.5, 14.0),
       radius=st.floats(20.0, 500.0), sign=st.sampled_from([-1.0, 1.0]))
def test_any_feasible_turn_is_accepted_or_smoothed_within_limits(count, horizon, speed, radius, sign):
    pts = _circle(speed, radius, count, horizon)
    pts[:, 1] *= sign
    conv = convert_waypoints(pts, horizon, VEH, CFG, v0=speed)
    assert conv.status in (Status.ACCEPTED, Status.SMOOTHED), conv.violations
    tr = conv.trajectory
    tol = 1 + CFG.tolerance
    assert np.all(np.diff(tr.times_s) > 0) and np.all(np.isfinite(tr.speed))
    assert tr.speed.max() <= CFG.max_speed_mps * tol
    assert np.all(np.abs(tr.curvature) <= VEH.max_curvature_1pm * tol)
    assert np.all(tr.curvature[tr.speed > 1.0] * sign >= -1e-9)  # turns the planned way (a straight end: ~1e-17)


_finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=12), st.data())
def test_interp_scalar_is_numpys_interp_to_the_bit(gaps, data):
    """The followers' lookup replaces np.interp on their hot path: the recordings' labels must not move by a bit.
    Knots may repeat (a stopped trajectory's stations); queries include the knots themselves and both ends."""
    xp = data.draw(_finite) + np.concatenate([[0.0], np.cumsum(gaps)])
    fp = np.array(data.draw(st.lists(_finite, min_size=len(xp), max_size=len(xp))))
    queries = [*xp, xp[0] - 1.0, xp[-1] + 1.0, *data.draw(st.lists(st.floats(float(xp[0]) - 2, float(xp[-1]) + 2,
                                                                               allow_nan=False), max_size=8))]
    for x in queries:
        expected = float(np.interp(x, xp, fp))
        got = interp_scalar(float(x), xp.tolist(), fp.tolist())
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (x, xp, fp)


def _speed_profile_by_element(s, curvature, v_cap, v_start, vehicle, cfg):
    """The profile's two passes on the numpy array element by element, as they were written before the lists."""
    v_max = min(cfg.max_speed_mps, vehicle.max_speed_mps)
    with np.errstate(divide="ignore"):
        v_lat = np.sqrt(cfg.max_lateral_accel_mps2 / np.maximum(np.abs(curvature), 1e-12))
    v = np.minimum(np.minimum(v_cap, v_lat), v_max)
    v[0] = min(v[0], v_start) if v_start >= 0 else v[0]
    ds = np.diff(s)
    for i in range(len(ds)):
        j = len(ds) - 1 - i
        v[j] = min(v[j], math.sqrt(v[j + 1] ** 2 + 2 * cfg.max_decel_mps2 * ds[j]))
    for i in range(len(ds)):
        v[i + 1] = min(v[i + 1], math.sqrt(v[i] ** 2 + 2 * cfg.max_accel_mps2 * ds[i]))
    return v


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(-0.3, 0.3), st.floats(0.0, 20.0)), min_size=1,
                max_size=40), st.floats(-1.0, 15.0))
def test_speed_profile_on_lists_equals_the_element_loop(rows, v_start):
    steps, curvature, cap = (np.array(c) for c in zip(*rows))
    s = np.concatenate([[0.0], np.cumsum(steps)])
    curvature, cap = np.append(curvature, 0.0), np.append(cap, 8.0)
    got = _speed_profile(s, curvature, cap.copy(), v_start, VEH, CFG)
    expected = _speed_profile_by_element(s, curvature, cap.copy(), v_start, VEH, CFG)
    assert np.array_equal(got, expected)


def test_speed_at_reads_the_trajectory_like_np_interp():
    traj = convert_waypoints(np.c_[np.linspace(2.0, 30.0, 8), np.linspace(0.0, 2.0, 8), np.zeros(8)], 0.0, VEH,
                             CFG, v0=3.0).trajectory
    for t in np.linspace(-0.5, traj.duration_s, 97):
        assert traj.speed_at(float(t)) == (float(np.interp(t, traj.times_s, traj.speed)),
                                          float(np.interp(t, traj.times_s, traj.accel)))
    assert traj.speed_at(traj.duration_s + 1e-9) == (0.0, 0.0)
