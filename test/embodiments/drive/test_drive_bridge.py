"""Drive bridge logic: anchoring at the plan stamp, staleness, bad plans, watchdog stop."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.embodiments.drive.bridge import DriveBridge, DriveBridgeConfig, EgoState, Outcome, PoseHistory
from plan_stack.embodiments.drive.errors import DriveError
from plan_stack.embodiments.drive.trajectory import DriveTrajectoryConfig
from plan_stack.embodiments.drive.vehicle import VehicleParams

VEH = VehicleParams()


def _straight(speed=5.0, count=8, horizon=4.0):
    t = np.arange(1, count + 1) * horizon / count
    return np.c_[speed * t, np.zeros(count), np.zeros(count)]


def _bridge(**kw) -> DriveBridge:
    b = DriveBridge(VEH, DriveTrajectoryConfig(), DriveBridgeConfig(**kw))
    for i in range(101):  # driving +y (yaw 90 deg) at 5 m/s from (10, 0), 10 ms odometry
        t = 0.01 * i
        b.history.add(EgoState(t, 10.0, 5.0 * t, math.pi / 2, 5.0, 0.0))
    return b


def test_pose_history_interpolates_and_rejects_non_finite():
    h = PoseHistory(keep_s=0.5)
    for i in range(100):
        h.add(EgoState(0.01 * i, 0.01 * i, 0.0, 0.0, 1.0, 0.0))
    assert h.at(0.905, 0.1).x == pytest.approx(0.905)
    assert h.at(0.2, 0.1) is None  # older than what is kept
    assert h.at(1.05, 0.1).x == pytest.approx(0.99)  # nearest within tolerance
    with pytest.raises(DriveError, match="^odometry"):
        h.add(EgoState(1.0, math.nan, 0.0, 0.0, 0.0, 0.0))


def test_plan_is_anchored_with_the_pose_at_its_stamp():
    b = _bridge()
    d = b.on_plan([("box", np.zeros((2, 3)), 0.0), ("drive_3d", _straight(), 4.0)], stamp_s=0.5, now_s=1.0)
    assert d.outcome is Outcome.FORWARDED and d.stamp_s == 0.5
    tr = d.trajectory
    assert tr.frame_id == "odom"
    assert (tr.x[0], tr.y[0]) == pytest.approx((10.0, 2.5))  # where the ego was at 0.5 s
    assert (tr.x[-1], tr.y[-1]) == pytest.approx((10.0, 22.5))  # 20 m ahead along +y
    assert np.allclose(tr.yaw, math.pi / 2)


def test_stale_bad_and_unanchored_plans_publish_nothing():
    b = _bridge()
    assert b.on_plan([("drive_3d", _straight(), 4.0)], stamp_s=0.5, now_s=4.6).outcome is Outcome.STALE
    bad = _straight()
    bad[3, 1] = math.nan
    d = b.on_plan([("drive_2d3d", bad, 4.0)], stamp_s=0.5, now_s=1.0)
    assert d.outcome is Outcome.REJECTED and d.trajectory is None and "non-finite waypoint 3" in d.message
    d = b.on_plan([("drive_3d", _straight(speed=30.0), 4.0)], 0.5, 1.0)
    assert d.outcome is Outcome.SMOOTHED and d.trajectory.speed.max() <= 15.0 + 1e-9
    strict = DriveBridge(VEH, DriveTrajectoryConfig(infeasible="reject"), DriveBridgeConfig())
    strict.history.add(EgoState(0.0, 0.0, 0.0, 0.0, 5.0, 0.0))
    d = strict.on_plan([("drive_3d", _straight(speed=30.0), 4.0)], 0.0, 0.1)
    assert d.outcome is Outcome.REJECTED and d.message.startswith("speed")
    assert b.on_plan([("robot_3d", _straight(), 4.0)], 0.5, 1.0).outcome is Outcome.NO_PRIMITIVE
    assert b.on_plan([("drive_3d", _straight(), 4.0)], -1.0, 1.0).outcome is Outcome.NO_ODOMETRY
    assert b.on_plan([("drive_3d", _straight(), 4.0)], 3.0, 1.0).outcome is Outcome.REJECTED  # future stamp
    assert {o.value: n for o, n in b.plan_outcomes.items()} == {  # every outcome counted (episode rows read them)
        "forwarded": 0, "smoothed": 1, "rejected": 2, "stale": 1, "no_primitive": 1, "no_odometry": 1}
    with pytest.raises(ConfigError, match="^watchdog_timeout"):
        DriveBridgeConfig(watchdog_timeout=0.0)


def test_watchdog_stops_smoothly_once_per_lapse():
    b = _bridge(watchdog_timeout=1.0, stop_decel_mps2=2.5)
    assert b.on_plan([("drive_3d", _straight(), 4.0)], 0.9, 1.0).outcome is Outcome.FORWARDED
    assert b.watchdog(1.5) is None  # covered and fresh
    d = b.watchdog(2.1)  # fresh plan older than watchdog_timeout
    assert d is not None and d.stamp_s == pytest.approx(1.0)
    stop = d.trajectory
    assert stop.speed[0] == pytest.approx(5.0) and stop.speed[-1] == 0.0
    assert stop.duration_s == pytest.approx(2.0) and np.allclose(stop.accel[:-1], -2.5)
    assert (stop.x[-1], stop.y[-1]) == pytest.approx((10.0, 5.0 + 5.0))  # v^2 / 2a = 5 m along +y
    assert b.watchdog(2.2) is None and b.stopped
    assert b.on_plan([("drive_3d", _straight(), 4.0)], 1.0, 1.05).outcome is Outcome.FORWARDED
    assert not b.stopped
    # an arc-length plan covers only its own duration
    b2 = _bridge(watchdog_timeout=30.0)
    s = np.arange(1, 11) * 1.0
    d = b2.on_plan([("drive_3d", np.c_[s, 0 * s, 0 * s], 0.0)], 1.0, 1.0)
    assert d.outcome is Outcome.FORWARDED
    assert b2.watchdog(1.0 + d.trajectory.duration_s - 0.01) is None
    assert b2.watchdog(1.0 + d.trajectory.duration_s + 0.01) is not None
