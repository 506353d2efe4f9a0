"""Pure-pursuit trajectory follower: plays the driving stack's controller inside the simulator.

No ROS imports. Steering: pure pursuit on the trajectory's path (the point
`lookahead = max(min_lookahead, lookahead_time · v)` ahead of the path point
nearest to the rear axle; δ = atan(2 L sin α / lookahead)). Speed: the
trajectory's speed and acceleration at the present time (feed-forward) plus
a proportional correction. After the trajectory's last point, or without a
trajectory, the follower brakes to a stop and holds: it never extrapolates.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.drive.trajectory import DriveTrajectory, interp_scalar
from plan_stack.embodiments.drive.vehicle import BicycleState, VehicleParams

__all__ = ["FollowerConfig", "PurePursuit", "Command"]


@dataclasses.dataclass(frozen=True)
class FollowerConfig:
    """Pure-pursuit gains (node `drive_sim`)."""

    min_lookahead_m: float = param("shortest pure-pursuit lookahead (m)", 3.0, min=0.1, max=50.0)
    lookahead_time_s: float = param("lookahead = lookahead_time x speed when longer (s)", 0.8, min=0.0, max=5.0)
    speed_gain: float = param("acceleration per m/s of speed error (1/s)", 1.5, min=0.0, max=20.0)
    stop_decel_mps2: float = param("braking used to stop after the trajectory ends (m/s^2)", 3.0, min=0.1,
                                   max=15.0)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass(frozen=True)
class Command:
    accel_mps2: float
    steer_rad: float
    following: bool  # False: braking/holding (no trajectory covers the present)


class PurePursuit:
    """Follows one DriveTrajectory at a time, in the same frame as the vehicle state."""

    def __init__(self, vehicle: VehicleParams, cfg: FollowerConfig) -> None:
        self.vehicle, self.cfg = vehicle, cfg
        self._traj: DriveTrajectory | None = None
        self._stamp_s = 0.0

    def set_trajectory(self, traj: DriveTrajectory, stamp_s: float) -> None:
        """Replace the trajectory; `stamp_s` is the absolute time of its t = 0."""
        self._traj, self._stamp_s = traj, float(stamp_s)
        # the path polyline, prepared once per trajectory (the steering runs every physics step)
        pts = np.stack([traj.x, traj.y], axis=1)
        d = pts[1:] - pts[:-1]
        seg_len = np.linalg.norm(d, axis=1)
        station = np.concatenate([[0.0], np.cumsum(seg_len)])
        self._path = _Polyline(pts[:-1, 0].copy(), pts[:-1, 1].copy(), d[:, 0].copy(), d[:, 1].copy(), seg_len,
                               np.maximum(seg_len**2, 1e-12), station.tolist(), traj.x.tolist(), traj.y.tolist())

    def clear(self) -> None:
        self._traj = None

    def command(self, state: BicycleState, now_s: float) -> Command:
        traj = self._traj
        if traj is None or now_s - self._stamp_s > traj.duration_s or len(traj) < 2:
            return Command(-self.cfg.stop_decel_mps2 if state.v > 0 else 0.0, state.steer, False)
        v_ref, a_ref = traj.speed_at(now_s - self._stamp_s)
        accel = a_ref + self.cfg.speed_gain * (v_ref - state.v)
        return Command(accel, self._steer(traj, state), True)

    def _steer(self, traj: DriveTrajectory, state: BicycleState) -> float:
        path = self._path
        if path.station[-1] < 1e-6:
            return state.steer
        # nearest point on the polyline (per-coordinate columns: the same arithmetic as on [N, 2] rows, fewer
        # numpy calls; this runs every physics step)
        rel_x, rel_y = state.x - path.start_x, state.y - path.start_y
        w = np.minimum(np.maximum((rel_x * path.d_x + rel_y * path.d_y) / path.seg_len2, 0.0), 1.0)
        gap_x, gap_y = rel_x - w * path.d_x, rel_y - w * path.d_y
        i = int(np.argmin(gap_x**2 + gap_y**2))
        s_near = path.station[i] + float(w[i]) * float(path.seg_len[i])
        lookahead = max(self.cfg.min_lookahead_m, self.cfg.lookahead_time_s * state.v)
        s_goal = s_near + lookahead
        if s_goal <= path.station[-1]:
            goal_x, goal_y = interp_scalar(s_goal, path.station, path.x), interp_scalar(s_goal, path.station, path.y)
        else:  # past the end of the path: aim along its last heading
            extra = s_goal - path.station[-1]
            goal_x = path.x[-1] + extra * math.cos(traj.yaw[-1])
            goal_y = path.y[-1] + extra * math.sin(traj.yaw[-1])
        dx, dy = goal_x - state.x, goal_y - state.y
        alpha = math.atan2(dy, dx) - state.yaw
        dist = max(math.hypot(dx, dy), 1e-6)
        return math.atan2(2.0 * self.vehicle.wheelbase_m * math.sin(alpha), dist)


class _Polyline(NamedTuple):
    """A trajectory's path as the steering reads it: segment starts and directions as columns, lengths,
    squared lengths (floored) and the stations and points as lists for `interp_scalar`."""

    start_x: np.ndarray
    start_y: np.ndarray
    d_x: np.ndarray
    d_y: np.ndarray
    seg_len: np.ndarray
    seg_len2: np.ndarray
    station: list[float]
    x: list[float]
    y: list[float]
