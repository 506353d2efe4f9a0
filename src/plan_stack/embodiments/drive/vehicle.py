"""Kinematic bicycle model of the ego car (reference point: rear-axle centre).

State `(x, y, yaw, v, steer)` in a planar world frame (x forward at yaw 0,
y left). Inputs are an acceleration and a front-wheel angle command; the
model enforces the vehicle's limits the way a drive-by-wire layer does:
acceleration clipped to [-max_decel, max_accel], steering angle clipped to
±max_steer and slewed at max_steer_rate, speed kept in [0, max_speed] (no
reverse). Between steps the steering angle is constant, so the rear axle
moves on an exact circular arc (no Euler drift on long curves).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.drive.errors import DriveConfigError, DriveError

__all__ = ["VehicleParams", "BicycleState", "step", "curvature_from_steer", "steer_from_curvature"]


@dataclasses.dataclass(frozen=True)
class VehicleParams:
    """Geometry and actuation limits of the ego vehicle (a mid-size car by default)."""

    wheelbase_m: float = param("distance between the axles (m)", 2.7, min=0.5, max=10.0)
    length_m: float = param("body length (m)", 4.5, min=0.5, max=20.0)
    width_m: float = param("body width (m)", 1.8, min=0.3, max=4.0)
    rear_overhang_m: float = param("rear bumper to rear axle (m)", 0.9, min=0.0, max=5.0)
    max_steer_rad: float = param("front wheel angle limit (rad)", 0.6, min=0.01, max=1.2)
    max_steer_rate_rps: float = param("front wheel angle slew limit (rad/s)", 1.0, min=0.01, max=10.0)
    max_accel_mps2: float = param("acceleration limit (m/s^2)", 2.5, min=0.1, max=10.0)
    max_decel_mps2: float = param("braking limit (m/s^2, positive)", 6.0, min=0.1, max=15.0)
    max_speed_mps: float = param("speed limit of the vehicle (m/s)", 20.0, min=0.1, max=80.0)

    def __post_init__(self) -> None:
        validate(self)
        if self.rear_overhang_m + self.wheelbase_m > self.length_m:
            raise DriveConfigError("rear_overhang_m: rear overhang + wheelbase exceed the body length")

    @property
    def max_curvature_1pm(self) -> float:
        """Tightest curvature the steering allows: tan(max_steer) / wheelbase."""
        return math.tan(self.max_steer_rad) / self.wheelbase_m

    def footprint(self, x: float, y: float, yaw: float) -> np.ndarray:
        """[4, 2] body corners (rear-left, rear-right, front-right, front-left) for a rear-axle pose."""
        c, s = math.cos(yaw), math.sin(yaw)
        rear, front, half = -self.rear_overhang_m, self.length_m - self.rear_overhang_m, self.width_m / 2
        local = np.array([[rear, half], [rear, -half], [front, -half], [front, half]])
        return local @ np.array([[c, s], [-s, c]]) + np.array([x, y])


def curvature_from_steer(steer_rad, wheelbase_m: float):
    return np.tan(steer_rad) / wheelbase_m


def steer_from_curvature(curvature_1pm, wheelbase_m: float):
    return np.arctan(wheelbase_m * np.asarray(curvature_1pm))


@dataclasses.dataclass
class BicycleState:
    """Mutable vehicle state; `steer` is the actual front wheel angle (rad)."""

    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0
    v: float = 0.0
    steer: float = 0.0
    accel: float = 0.0  # last applied acceleration (m/s^2)
    yaw_rate: float = 0.0  # over the last step (rad/s)


def step(state: BicycleState, params: VehicleParams, accel_cmd: float, steer_cmd: float, dt_s: float) -> BicycleState:
    """Advance `state` in place by `dt_s` under the commands (clipped to the limits); returns it."""
    if not (math.isfinite(accel_cmd) and math.isfinite(steer_cmd)):
        raise DriveError("command: non-finite acceleration or steering command")
    if not dt_s > 0:
        raise DriveError(f"dt_s: must be positive, got {dt_s}")
    target = min(max(steer_cmd, -params.max_steer_rad), params.max_steer_rad)
    max_delta = params.max_steer_rate_rps * dt_s
    state.steer += min(max(target - state.steer, -max_delta), max_delta)
    a = min(max(accel_cmd, -params.max_decel_mps2), params.max_accel_mps2)
    v0 = state.v
    v1 = min(max(v0 + a * dt_s, 0.0), params.max_speed_mps)
    state.accel = (v1 - v0) / dt_s
    ds = 0.5 * (v0 + v1) * dt_s
    kappa = math.tan(state.steer) / params.wheelbase_m
    dyaw = kappa * ds
    if abs(dyaw) < 1e-9:
        state.x += ds * math.cos(state.yaw + 0.5 * dyaw)
        state.y += ds * math.sin(state.yaw + 0.5 * dyaw)
    else:
        state.x += (math.sin(state.yaw + dyaw) - math.sin(state.yaw)) / kappa
        state.y += (math.cos(state.yaw) - math.cos(state.yaw + dyaw)) / kappa
    state.yaw = math.atan2(math.sin(state.yaw + dyaw), math.cos(state.yaw + dyaw))
    state.v = v1
    state.yaw_rate = dyaw / dt_s
    return state
