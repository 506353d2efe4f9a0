"""Driving bridge logic without ROS: plan -> anchored trajectory, staleness, watchdog stop.

The planner's waypoints live in the ego frame at the observation time
(the plan's stamp). The bridge converts them (`trajectory.convert_waypoints`,
with the ego speed at that time), anchors them in the odometry frame with
the ego pose at that time (`PoseHistory`, interpolated odometry), and
forwards the result only while it still covers the present: a plan whose
stamp is older than its horizon (timed plans) or than its converted
duration (arc-length plans) is dropped as stale. When no forwarded
trajectory covers the present, or no valid plan has arrived for
`watchdog_timeout`, the bridge commands a smooth stop from the latest
odometry state (`stop_trajectory`), once per lapse. Every plan's outcome is
counted (`DriveBridge.plan_outcomes`; the node reports the counts with each
`plans` diagnostic, where an episode's tally reads them).
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
import enum
import math

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.drive.errors import DriveError
from plan_stack.embodiments.drive.trajectory import (
    Conversion,
    DriveTrajectory,
    DriveTrajectoryConfig,
    Status,
    convert_waypoints,
    stop_trajectory,
)
from plan_stack.embodiments.drive.vehicle import VehicleParams

__all__ = ["DriveBridgeConfig", "EgoState", "PoseHistory", "Outcome", "Decision", "DriveBridge", "DRIVE_KINDS"]

DRIVE_KINDS = ("drive_3d", "drive_2d3d")


@dataclasses.dataclass(frozen=True)
class DriveBridgeConfig:
    """Bridge behaviour (node `drive_bridge`); conversion limits are in `DriveTrajectoryConfig`."""

    watchdog_timeout: float = param("s without a valid plan before the bridge commands a smooth stop", 1.0,
                                    min=0.05, max=60.0)
    stop_decel_mps2: float = param("braking of the watchdog's smooth stop (m/s^2)", 2.5, min=0.1, max=15.0)
    stop_dt_s: float = param("time step of the stop trajectory's points (s)", 0.1, min=0.01, max=1.0)
    odom_tolerance_s: float = param("how far a plan stamp may lie outside the odometry history (s)", 0.2,
                                    min=0.0, max=5.0)
    odom_max_lead_s: float = param("odometry stamped further than this ahead of the clock is refused (a wrong "
                                   "clock, or sent before a simulator reset; s)", 1.0, min=0.0, max=60.0)
    odom_history_s: float = param("odometry kept to anchor plans at their stamp (s)", 10.0, min=0.5, max=120.0,
                                  read_only=True)
    odom_frame: str = param("frame of the odometry pose = frame of the published trajectories", "odom")

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass(frozen=True)
class EgoState:
    """Ego state from odometry: rear-axle pose in the odometry frame, speed, yaw rate."""

    t_s: float
    x: float
    y: float
    yaw: float
    v: float
    yaw_rate: float


class PoseHistory:
    """Odometry samples in time order; `at(t)` interpolates (nearest within tolerance outside)."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._t: list[float] = []
        self._s: list[EgoState] = []

    def add(self, s: EgoState) -> None:
        if not all(math.isfinite(v) for v in dataclasses.astuple(s)):
            raise DriveError("odometry: non-finite ego state")
        if self._t and s.t_s < self._t[-1]:  # time went backwards (sim reset): start over
            self._t.clear()
            self._s.clear()
        self._t.append(s.t_s)
        self._s.append(s)
        cut = bisect.bisect_left(self._t, s.t_s - self.keep_s)
        if cut:
            del self._t[:cut], self._s[:cut]

    @property
    def latest(self) -> EgoState | None:
        return self._s[-1] if self._s else None

    def at(self, t_s: float, tolerance_s: float) -> EgoState | None:
        if not self._t or t_s < self._t[0] - tolerance_s or t_s > self._t[-1] + tolerance_s:
            return None
        i = bisect.bisect_left(self._t, t_s)
        if i == 0:
            return self._s[0]
        if i >= len(self._t):
            return self._s[-1]
        a, b = self._s[i - 1], self._s[i]
        w = (t_s - a.t_s) / max(b.t_s - a.t_s, 1e-12)
        dyaw = math.atan2(math.sin(b.yaw - a.yaw), math.cos(b.yaw - a.yaw))
        return EgoState(t_s, a.x + w * (b.x - a.x), a.y + w * (b.y - a.y), a.yaw + w * dyaw,
                        a.v + w * (b.v - a.v), a.yaw_rate + w * (b.yaw_rate - a.yaw_rate))


class Outcome(enum.Enum):
    FORWARDED = "forwarded"
    SMOOTHED = "smoothed"
    REJECTED = "rejected"  # infeasible plan or bad input: nothing published
    STALE = "stale"  # older than its horizon
    NO_PRIMITIVE = "no_primitive"
    NO_ODOMETRY = "no_odometry"


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: Outcome
    trajectory: DriveTrajectory | None = None  # in the odometry frame, t = 0 at `stamp_s`
    stamp_s: float = 0.0
    message: str = ""


class DriveBridge:
    """Stateful bridge: feed odometry and plans, ask the watchdog each tick. Not thread-safe."""

    def __init__(self, vehicle: VehicleParams, conversion: DriveTrajectoryConfig, cfg: DriveBridgeConfig) -> None:
        self.vehicle, self.conversion, self.cfg = vehicle, conversion, cfg
        self.history = PoseHistory(cfg.odom_history_s)
        self._covered_until_s = -math.inf  # end of the last forwarded trajectory
        self._last_valid_s: float | None = None  # receive time of the last forwarded plan
        self._stopped = False  # a stop was commanded for the present lapse
        #: plans seen so far by outcome (every Outcome present; never reset: the counts only grow)
        self.plan_outcomes: collections.Counter[Outcome] = collections.Counter({o: 0 for o in Outcome})

    def add_odometry(self, ego: EgoState, now_s: float) -> None:
        """Record an odometry sample; raises DriveError for one stamped more than `odom_max_lead_s` ahead."""
        if ego.t_s > now_s + self.cfg.odom_max_lead_s:
            raise DriveError(f"odometry: stamped {ego.t_s - now_s:.3f} s ahead of the clock (odom_max_lead_s "
                             f"{self.cfg.odom_max_lead_s})")
        self.history.add(ego)

    def reset(self) -> None:
        """Forget odometry, the forwarded plan and the stop state (time went back: a simulator reset).
        Nothing from before is anchored to or covers the present; the watchdog stops from fresh odometry."""
        self.history = PoseHistory(self.cfg.odom_history_s)
        self._covered_until_s = -math.inf
        self._last_valid_s = None
        self._stopped = False

    def on_plan(self, primitives, stamp_s: float, now_s: float) -> Decision:
        """`primitives`: sequence of (kind, points [P, 3], horizon_s); the first drive one is used.
        The decision's outcome is counted in `plan_outcomes`."""
        decision = self._decide(primitives, stamp_s, now_s)
        self.plan_outcomes[decision.outcome] += 1
        return decision

    def _decide(self, primitives, stamp_s: float, now_s: float) -> Decision:
        chosen = next((p for p in primitives if p[0] in DRIVE_KINDS), None)
        if chosen is None:
            return Decision(Outcome.NO_PRIMITIVE, message=f"plan has no {' or '.join(DRIVE_KINDS)} primitive")
        _, points, horizon_s = chosen
        try:
            pts = np.asarray(points, dtype=float).reshape(-1, 3)
            if not math.isfinite(stamp_s):
                raise DriveError("header.stamp: non-finite")
            if not np.all(np.isfinite(pts)):
                i = int(np.argwhere(~np.isfinite(pts))[0][0])
                raise DriveError(f"points: non-finite waypoint {i}")
            if not (math.isfinite(horizon_s) and horizon_s >= 0):
                raise DriveError(f"horizon_s: must be finite and >= 0, got {horizon_s}")
        except (DriveError, ValueError) as exc:
            return Decision(Outcome.REJECTED, message=str(exc))
        if stamp_s > now_s + self.cfg.odom_tolerance_s:
            return Decision(Outcome.REJECTED, message=f"header.stamp: {stamp_s - now_s:.3f} s in the future")
        if horizon_s > 0 and now_s - stamp_s > horizon_s:
            return Decision(Outcome.STALE, message=f"plan is {now_s - stamp_s:.3f} s old, beyond its {horizon_s:g} s horizon")
        ego = self.history.at(stamp_s, self.cfg.odom_tolerance_s)
        if ego is None:
            return Decision(Outcome.NO_ODOMETRY, message="no odometry at the plan's stamp: cannot anchor the plan")
        try:
            conv: Conversion = convert_waypoints(pts, horizon_s, self.vehicle, self.conversion, v0=max(ego.v, 0.0))
        except DriveError as exc:
            return Decision(Outcome.REJECTED, message=str(exc))
        traj = conv.trajectory
        if conv.status is Status.REJECTED or traj is None:  # a trajectory unless rejected
            return Decision(Outcome.REJECTED, message=conv.message)
        if now_s - stamp_s > traj.duration_s:
            return Decision(Outcome.STALE, message=f"plan is {now_s - stamp_s:.3f} s old, beyond its {traj.duration_s:.3g} s trajectory")
        traj = traj.transformed(ego.x, ego.y, ego.yaw, self.cfg.odom_frame)
        self._covered_until_s = stamp_s + traj.duration_s
        self._last_valid_s = now_s
        self._stopped = False
        outcome = Outcome.SMOOTHED if conv.status is Status.SMOOTHED else Outcome.FORWARDED
        return Decision(outcome, traj, stamp_s, conv.message)

    def watchdog(self, now_s: float) -> Decision | None:
        """A stop trajectory when nothing valid covers the present (once per lapse), else None."""
        lapsed = now_s > self._covered_until_s or (
            self._last_valid_s is not None and now_s - self._last_valid_s > self.cfg.watchdog_timeout)
        if not lapsed or self._stopped:
            return None
        ego = self.history.latest
        if ego is None:
            return None
        v = max(ego.v, 0.0)
        curvature = ego.yaw_rate / v if v > 0.5 else 0.0
        stop = stop_trajectory(v, self.cfg.stop_decel_mps2, self.cfg.stop_dt_s, self.vehicle, curvature)
        self._stopped = True
        self._covered_until_s = -math.inf
        return Decision(Outcome.FORWARDED, stop.transformed(ego.x, ego.y, ego.yaw, self.cfg.odom_frame), ego.t_s,
                        "no valid plan covers the present: smooth stop")

    @property
    def stopped(self) -> bool:
        return self._stopped
