"""Kinematic bicycle: limits are enforced, arcs are exact, footprint geometry."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.embodiments.drive.errors import DriveError
from plan_stack.embodiments.drive.vehicle import BicycleState, VehicleParams, steer_from_curvature, step


def test_config_validation():
    with pytest.raises(ConfigError, match="^wheelbase_m"):
        VehicleParams(wheelbase_m=0.1)
    with pytest.raises(ConfigError, match="^rear_overhang_m"):
        VehicleParams(length_m=3.0, wheelbase_m=2.7, rear_overhang_m=0.9)


def test_constant_steer_drives_an_exact_circle():
    veh = VehicleParams(max_steer_rate_rps=10.0)
    steer = 0.2
    s = BicycleState(v=5.0, steer=steer)
    radius = veh.wheelbase_m / math.tan(steer)
    for _ in range(1000):
        step(s, veh, 0.0, steer, 0.01)
    # centre of the circle is at (0, R); the rear axle stays on it
    assert math.hypot(s.x, s.y - radius) == pytest.approx(radius, abs=1e-9)
    assert s.yaw_rate == pytest.approx(5.0 / radius, rel=1e-9)


def test_limits_are_enforced():
    veh = VehicleParams()
    s = BicycleState(v=1.0)
    step(s, veh, 100.0, 5.0, 0.1)
    assert s.accel == pytest.approx(veh.max_accel_mps2)
    assert s.steer == pytest.approx(veh.max_steer_rate_rps * 0.1)  # slew-limited
    for _ in range(100):
        step(s, veh, 100.0, 5.0, 0.1)
    assert s.steer == pytest.approx(veh.max_steer_rad) and s.v == pytest.approx(veh.max_speed_mps)
    for _ in range(100):
        step(s, veh, -100.0, 0.0, 0.1)
    assert s.v == 0.0  # no reverse
    with pytest.raises(DriveError, match="^command"):
        step(s, veh, float("nan"), 0.0, 0.1)
    with pytest.raises(DriveError, match="^dt_s"):
        step(s, veh, 0.0, 0.0, 0.0)


def test_footprint_and_curvature_helpers():
    veh = VehicleParams()
    fp = veh.footprint(0.0, 0.0, math.pi / 2)
    assert np.allclose(fp.min(axis=0), [-veh.width_m / 2, -veh.rear_overhang_m])
    assert steer_from_curvature(veh.max_curvature_1pm, veh.wheelbase_m) == pytest.approx(veh.max_steer_rad)


def test_vehicle_urdf_matches_the_default_parameters():
    import xml.etree.ElementTree as ET
    from pathlib import Path

    root = ET.parse(Path(__file__).resolve().parents[3] / "urdf" / "drive_vehicle.urdf").getroot()
    joints = {j.get("name"): j for j in root.iter("joint")}
    veh = VehicleParams()
    axle = [float(v) for v in joints["front_axle_joint"].find("origin").get("xyz").split()]
    assert axle[0] == pytest.approx(veh.wheelbase_m)
    assert float(joints["front_left_steer"].find("limit").get("upper")) == pytest.approx(veh.max_steer_rad)
    body = [float(v) for v in joints["body_joint"].find("origin").get("xyz").split()]
    assert body[0] == pytest.approx(veh.length_m / 2 - veh.rear_overhang_m)
