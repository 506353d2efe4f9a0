"""Plan waypoints (ego frame) -> a time-stamped, feasibility-checked driving trajectory.

No ROS imports. The planner's `drive_3d`/`drive_2d3d` primitive gives P
waypoints in the ego frame at the observation time (x forward, y left, the
ego's rear axle at the origin heading +x). Two spacings exist:

* uniform in time (`horizon_s > 0`): waypoint i (1-based) is where the ego
  should be at t_i = i · horizon_s / P (8 over 4 s, 20 over 5 s, 64 over
  6.4 s, ...); the origin at t = 0 is prepended;
* spaced by arc length (`horizon_s == 0`): the waypoints are a path, and a
  speed profile is built for it: cruise speed, capped by the speed limit
  and by the lateral-acceleration limit on curves, then backward/forward
  passes under the braking and acceleration limits from the ego's present
  speed.

Both split path and speed: the geometry is a C2 cubic spline through the
origin and the waypoints, leaving the origin along +x (the ego's heading),
which gives heading, curvature and the bicycle model's front wheel angle
atan(wheelbase·curvature); timed plans add progress s(t) through the
waypoints' stations, which gives speed and acceleration: a C2 cubic
spline, or, where that would roll backwards between waypoints (plans that
stop), a monotone PCHIP interpolation, so a plan that stops stays stopped
instead of rocking back and forth.
Heading rate = speed · curvature; the lateral velocity of the rear axle is 0.

Feasibility (checked on the dense curve, `samples_per_segment` per
waypoint interval): speed <= max_speed, acceleration within
[-max_decel, max_accel], |curvature| <= the steering limit
(tan(max_steer)/wheelbase), v²|curvature| <= max_lateral_accel, no reverse
motion. Speed, acceleration and lateral-acceleration violations are timing
problems: with `infeasible: smooth` the same path is re-timed with a
limit-respecting speed profile (result SMOOTHED, the violations listed);
with `infeasible: reject` (or for curvature and reverse violations, which
re-timing cannot fix) the result is REJECTED and no trajectory exists.
Non-finite or malformed waypoints are bad input and raise `DriveError`.
"""
from __future__ import annotations

import bisect
import dataclasses
import enum
import functools
import math
from collections.abc import Sequence

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.drive.errors import DriveConfigError, DriveError
from plan_stack.embodiments.drive.vehicle import VehicleParams, steer_from_curvature

__all__ = ["DriveTrajectoryConfig", "DriveTrajectory", "Infeasible", "Status", "Conversion", "convert_waypoints",
           "interp_scalar", "stop_trajectory"]


class Status(enum.Enum):
    ACCEPTED = "accepted"
    SMOOTHED = "smoothed"
    REJECTED = "rejected"


class Infeasible(enum.StrEnum):
    """What the conversion does with a plan whose timing breaks a limit."""

    SMOOTH = "smooth"  # re-time the same path within the limits
    REJECT = "reject"  # no trajectory


@dataclasses.dataclass(frozen=True)
class DriveTrajectoryConfig:
    """Limits and conversion choices for plan -> trajectory (node `drive_bridge`)."""

    max_speed_mps: float = param("speed limit for planned motion (m/s); also capped by the vehicle", 15.0,
                                 min=0.1, max=80.0)
    max_accel_mps2: float = param("acceleration limit for planned motion (m/s^2)", 2.0, min=0.05, max=10.0)
    max_decel_mps2: float = param("braking limit for planned motion (m/s^2, positive)", 4.0, min=0.05, max=15.0)
    max_lateral_accel_mps2: float = param("lateral acceleration limit v^2*|curvature| (m/s^2)", 3.0,
                                          min=0.05, max=15.0)
    cruise_speed_mps: float = param("target speed of arc-length-spaced plans (m/s)", 8.0, min=0.1, max=80.0)
    infeasible: Infeasible = param(
        "what to do with a plan that breaks speed/acceleration limits: smooth (re-time) or reject", Infeasible.SMOOTH)
    output_dt_s: float = param("time step of the output points (s); 0 = one point per waypoint", 0.1,
                               min=0.0, max=2.0)
    samples_per_segment: int = param("dense samples per waypoint interval for the limit checks", 8, min=2, max=64)
    arc_length_step_m: float = param("path sampling step for arc-length plans (m)", 0.25, min=0.01, max=5.0)
    stop_speed_mps: float = param("below this speed curvature limits are not checked (standing still) (m/s)", 0.2,
                                  min=0.0, max=2.0)
    tolerance: float = param("relative slack on every limit (numerical noise)", 0.02, min=0.0, max=0.5)

    def __post_init__(self) -> None:
        validate(self)
        if self.cruise_speed_mps > self.max_speed_mps:
            raise DriveConfigError(
                f"cruise_speed_mps: {self.cruise_speed_mps} exceeds max_speed_mps {self.max_speed_mps}")


@dataclasses.dataclass(frozen=True)
class DriveTrajectory:
    """Time-stamped trajectory arrays, all [N]; poses of the rear axle in `frame_id`.

    `times_s` are relative to the plan stamp (strictly increasing, from 0).
    """

    times_s: np.ndarray
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed: np.ndarray
    accel: np.ndarray
    yaw_rate: np.ndarray
    curvature: np.ndarray
    steer: np.ndarray
    frame_id: str = "base_link"

    FIELDS = ("times_s", "x", "y", "yaw", "speed", "accel", "yaw_rate", "curvature", "steer")

    def __post_init__(self) -> None:
        n = len(np.asarray(self.times_s).reshape(-1))
        for f in self.FIELDS:
            arr = np.asarray(getattr(self, f), dtype=float).reshape(-1)
            if arr.shape != (n,):
                raise DriveError(f"{f}: expected {n} values, got {arr.shape[0]}")
            if not np.all(np.isfinite(arr)):
                raise DriveError(f"{f}: non-finite value")
            object.__setattr__(self, f, arr)
        if n == 0:
            raise DriveError("points: a trajectory needs at least one point")
        if np.any(np.diff(self.times_s) <= 0):
            raise DriveError("times_s: not strictly increasing")

    def __len__(self) -> int:
        return len(self.times_s)

    @property
    def duration_s(self) -> float:
        return float(self.times_s[-1])

    def transformed(self, x0: float, y0: float, yaw0: float, frame_id: str) -> DriveTrajectory:
        """The same trajectory with poses expressed in a frame where the ego origin is at (x0, y0, yaw0)."""
        c, s = math.cos(yaw0), math.sin(yaw0)
        return dataclasses.replace(self, x=x0 + c * self.x - s * self.y, y=y0 + s * self.x + c * self.y,
                                   yaw=np.unwrap(self.yaw + yaw0), frame_id=frame_id)

    def speed_at(self, t_s: float) -> tuple[float, float]:
        """(speed, acceleration) reference at relative time `t_s`; (0, 0) after the end (never extrapolated)."""
        times, speed, accel = self._speed_lists
        if t_s > times[-1]:
            return 0.0, 0.0
        return interp_scalar(t_s, times, speed), interp_scalar(t_s, times, accel)

    @functools.cached_property
    def _speed_lists(self) -> tuple[list[float], list[float], list[float]]:
        # the followers look the speed up every physics step: plain lists, converted once per trajectory
        return self.times_s.tolist(), self.speed.tolist(), self.accel.tolist()


@dataclasses.dataclass(frozen=True)
class Conversion:
    """Outcome of a conversion: the trajectory (None when rejected) and every violation found."""

    status: Status
    trajectory: DriveTrajectory | None
    violations: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return "; ".join(self.violations)


def _as_points(points) -> np.ndarray:
    p = np.asarray(points, dtype=float)
    if p.ndim != 2 or p.shape[1] not in (2, 3):
        raise DriveError(f"points: expected [P, 2] or [P, 3] ego-frame waypoints, got shape {p.shape}")
    if len(p) == 0:
        raise DriveError("points: a plan needs at least one waypoint")
    if not np.all(np.isfinite(p)):
        i = int(np.argwhere(~np.isfinite(p))[0][0])
        raise DriveError(f"points: non-finite waypoint {i}")
    return p[:, :2]


def _check(t, v, a, k, vehicle: VehicleParams, cfg: DriveTrajectoryConfig, moving) -> tuple[list[str], list[str]]:
    """(fixable, unfixable) violation messages on dense samples."""
    tol = 1.0 + cfg.tolerance
    fixable: list[str] = []
    unfixable: list[str] = []
    v_max = min(cfg.max_speed_mps, vehicle.max_speed_mps)
    k_max = vehicle.max_curvature_1pm

    def first(mask, label, values, limit, unit, bucket):
        if np.any(mask):
            i = int(np.argmax(mask))
            bucket.append(f"{label}: {values[i]:.3g} {unit} at t={t[i]:.2f} s exceeds {limit:.3g} {unit}")

    first(v > v_max * tol, "speed", v, v_max, "m/s", fixable)
    first(a > cfg.max_accel_mps2 * tol, "acceleration", a, cfg.max_accel_mps2, "m/s^2", fixable)
    first(-a > cfg.max_decel_mps2 * tol, "deceleration", -a, cfg.max_decel_mps2, "m/s^2", fixable)
    first(moving & (np.abs(k) > k_max * tol), "curvature", np.abs(k), k_max, "1/m", unfixable)
    lat = v**2 * np.abs(k)
    first(moving & (lat > cfg.max_lateral_accel_mps2 * tol), "lateral acceleration", lat,
          cfg.max_lateral_accel_mps2, "m/s^2", fixable)
    return fixable, unfixable


def interp_scalar(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """`np.interp(x, xp, fp)` for one finite `x` and increasing `xp` given as lists: the same arithmetic, so
    the same result to the bit, without numpy's per-call cost (the followers call it every physics step)."""
    j = bisect.bisect_right(xp, x) - 1  # the last knot at or before x, as numpy's search finds it
    if j < 0:
        return fp[0]
    if j == len(xp) - 1 or xp[j] == x:
        return fp[j]
    return (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]) * (x - xp[j]) + fp[j]


def _speed_profile(s: np.ndarray, curvature: np.ndarray, v_cap: np.ndarray, v_start: float,
                   vehicle: VehicleParams, cfg: DriveTrajectoryConfig) -> np.ndarray:
    """Limit-respecting speeds at path stations `s`: capped by `v_cap`, the speed limit and the
    lateral-acceleration limit, reachable from `v_start` under the acceleration/braking limits."""
    v_max = min(cfg.max_speed_mps, vehicle.max_speed_mps)
    with np.errstate(divide="ignore"):
        v_lat = np.sqrt(cfg.max_lateral_accel_mps2 / np.maximum(np.abs(curvature), 1e-12))
    v = np.minimum(np.minimum(v_cap, v_lat), v_max)
    v[0] = min(v[0], v_start) if v_start >= 0 else v[0]
    # the two passes run on lists: numpy's per-element indexing made them most of a conversion's time
    vs, ds = v.tolist(), np.diff(s).tolist()
    for j in reversed(range(len(ds))):  # backward: be able to brake for what comes
        vs[j] = min(vs[j], math.sqrt(vs[j + 1] ** 2 + 2 * cfg.max_decel_mps2 * ds[j]))
    for i in range(len(ds)):  # forward: acceleration limit
        vs[i + 1] = min(vs[i + 1], math.sqrt(vs[i] ** 2 + 2 * cfg.max_accel_mps2 * ds[i]))
    return np.array(vs)


def _timed_path(s: np.ndarray, x, y, yaw, k, v, vehicle: VehicleParams, cfg: DriveTrajectoryConfig,
                ) -> DriveTrajectory:
    """Path stations with speeds -> trajectory sampled every `output_dt_s` (or at the stations)."""
    ds = np.diff(s)
    v_mid = 0.5 * (v[1:] + v[:-1])
    if np.any(v_mid <= 1e-9):
        # A zero-speed stretch cuts the path: the vehicle stops there (nothing beyond is reachable).
        cut = int(np.argmax(v_mid <= 1e-9)) + 1
        s, x, y, yaw, k, v = s[:cut], x[:cut], y[:cut], yaw[:cut], k[:cut], v[:cut]
        ds, v_mid = ds[:cut - 1], v_mid[:cut - 1]
    t = np.concatenate([[0.0], np.cumsum(ds / v_mid)]) if len(ds) else np.zeros(1)
    if len(t) < 2:
        return _single(x[0], y[0], yaw[0], v[0], cfg)
    a_seg = np.diff(v) / np.diff(t)
    if cfg.output_dt_s > 0:
        n = max(int(math.floor(t[-1] / cfg.output_dt_s + 1e-9)), 1)
        t_out = np.arange(n + 1) * cfg.output_dt_s
        if t[-1] - t_out[-1] > 1e-6:
            t_out = np.append(t_out, t[-1])
    else:
        t_out = t
    seg = np.clip(np.searchsorted(t, t_out, side="right") - 1, 0, len(a_seg) - 1)
    k_out = np.interp(t_out, t, k)
    v_out = np.interp(t_out, t, v)
    return DriveTrajectory(t_out, np.interp(t_out, t, x), np.interp(t_out, t, y), np.interp(t_out, t, yaw), v_out,
                           a_seg[seg], v_out * k_out, k_out, steer_from_curvature(k_out, vehicle.wheelbase_m))


def _single(x, y, yaw, v, cfg) -> DriveTrajectory:
    one = np.zeros(1)
    return DriveTrajectory(one.copy(), one + x, one + y, one + yaw, one + v, one.copy(), one.copy(), one.copy(),
                           one.copy())


class _Path:
    """The plan's geometry: a C2 cubic spline through the origin and the waypoints, parametrised by
    chord length u and leaving the origin along +x (the ego's heading), with stations of every waypoint."""

    def __init__(self, pts: np.ndarray) -> None:
        from scipy.interpolate import CubicSpline

        path = np.vstack([[0.0, 0.0], pts])
        chords = np.linalg.norm(np.diff(path, axis=0), axis=1)
        self.stations = np.concatenate([[0.0], np.cumsum(chords)])  # [P+1], repeats where the plan stops
        keep = np.concatenate([[True], chords > 1e-6])
        self.knots, self.points = self.stations[keep], path[keep]
        self.length = float(self.knots[-1])
        self.reverse_at = None  # waypoint index where the direction turns back by more than 90 degrees
        d = np.diff(self.points, axis=0)
        if len(d) > 1:
            back = np.einsum("ij,ij->i", d[1:], d[:-1]) < 0
            if np.any(back):
                self.reverse_at = int(np.flatnonzero(keep)[int(np.argmax(back)) + 1])
        if len(self.knots) >= 2:
            end = "not-a-knot" if len(self.knots) >= 4 else (2, [0.0, 0.0])  # natural end would flatten curves
            self._spline = CubicSpline(self.knots, self.points, axis=0, bc_type=((1, [1.0, 0.0]), end))

    def at(self, u: np.ndarray):
        """Position [M, 2], heading [M] and curvature [M] at chord stations `u`."""
        if len(self.knots) < 2:
            z = np.zeros(len(u))
            return np.zeros((len(u), 2)), z, z.copy()
        u = np.clip(u, 0.0, self.length)
        p, d1, d2 = self._spline(u), self._spline(u, 1), self._spline(u, 2)
        norm = np.maximum(np.hypot(d1[:, 0], d1[:, 1]), 1e-9)
        yaw = np.unwrap(np.arctan2(d1[:, 1], d1[:, 0]))
        return p, yaw, (d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]) / norm**3


def _arc_length_plan(pts: np.ndarray, vehicle: VehicleParams, cfg: DriveTrajectoryConfig, v0: float | None,
                     ) -> Conversion:
    path = _Path(pts)
    if path.length <= 1e-6:
        return Conversion(Status.REJECTED, None, ("points: every waypoint is at the ego origin: no path to follow",))
    if path.reverse_at is not None:
        return Conversion(Status.REJECTED, None, (f"reverse: the path turns back at waypoint {path.reverse_at - 1}",))
    n = max(int(math.ceil(path.length / cfg.arc_length_step_m)), 1)
    s = np.linspace(0.0, path.length, n + 1)
    p, yaw, curvature = path.at(s)
    k_max = vehicle.max_curvature_1pm
    bad = np.abs(curvature) > k_max * (1 + cfg.tolerance)
    if np.any(bad):
        i = int(np.argmax(bad))
        return Conversion(Status.REJECTED, None, (
            f"curvature: {abs(curvature[i]):.3g} 1/m at s={s[i]:.2f} m exceeds {k_max:.3g} 1/m (steering limit)",))
    v_start = -1.0 if v0 is None else v0
    v = _speed_profile(s, curvature, np.full(len(s), cfg.cruise_speed_mps), v_start, vehicle, cfg)
    if v[0] <= 1e-9 and len(v) > 1:  # starting from rest: the first step is reached by accelerating
        v[1] = min(v[1], math.sqrt(2 * cfg.max_accel_mps2 * (s[1] - s[0])))
    return Conversion(Status.ACCEPTED, _timed_path(s, p[:, 0], p[:, 1], yaw, curvature, v, vehicle, cfg))


def _timed_plan(pts: np.ndarray, horizon_s: float, vehicle: VehicleParams, cfg: DriveTrajectoryConfig,
                v0: float | None) -> Conversion:
    """Path-speed split: geometry from `_Path`, progress s(t) by a monotone (PCHIP) interpolation of
    the waypoint stations, so a plan never moves backwards between waypoints and a stop stays a stop."""
    from scipy.interpolate import CubicSpline, PchipInterpolator

    path = _Path(pts)
    n = len(pts)
    t_knots = np.arange(n + 1) * (horizon_s / n)
    t = np.linspace(0.0, horizon_s, n * cfg.samples_per_segment + 1)
    progress = CubicSpline(t_knots, path.stations, bc_type="not-a-knot" if n >= 3 else "natural")
    if np.min(progress(t, 1)) < -1e-6:  # the C2 spline would roll backwards (stops): monotone instead
        progress = PchipInterpolator(t_knots, path.stations)
    s, speed, accel = progress(t), progress(t, 1), progress(t, 2)
    p, yaw, curvature = path.at(s)
    moving = speed > cfg.stop_speed_mps
    fixable, unfixable = _check(t, speed, accel, curvature, vehicle, cfg, moving)
    if path.reverse_at is not None:
        unfixable.insert(0, f"reverse: the plan turns back at waypoint {path.reverse_at - 1} "
                            f"(t={t_knots[path.reverse_at]:.2f} s)")
    if unfixable or (fixable and cfg.infeasible == "reject"):
        return Conversion(Status.REJECTED, None, tuple(unfixable + fixable))
    if fixable:
        keep = np.concatenate([[True], np.diff(s) > 1e-9])  # stops collapse onto one station
        v_start = -1.0 if v0 is None else v0
        v = _speed_profile(s[keep], curvature[keep], speed[keep], v_start, vehicle, cfg)
        traj = _timed_path(s[keep], p[keep, 0], p[keep, 1], yaw[keep], curvature[keep], v, vehicle, cfg)
        return Conversion(Status.SMOOTHED, traj, tuple(fixable))
    if cfg.output_dt_s > 0:
        k = max(int(math.floor(horizon_s / cfg.output_dt_s + 1e-9)), 1)
        t_out = np.arange(k + 1) * cfg.output_dt_s
        if horizon_s - t_out[-1] > 1e-6:
            t_out = np.append(t_out, horizon_s)
    else:
        t_out = t_knots
    s_o, v_o, a_o = progress(t_out), progress(t_out, 1), progress(t_out, 2)
    p_o, yaw_o, k_o = path.at(s_o)
    traj = DriveTrajectory(t_out, p_o[:, 0], p_o[:, 1], yaw_o, v_o, a_o, v_o * k_o, k_o,
                           steer_from_curvature(k_o, vehicle.wheelbase_m))
    return Conversion(Status.ACCEPTED, traj)


def convert_waypoints(points, horizon_s: float, vehicle: VehicleParams, cfg: DriveTrajectoryConfig,
                      v0: float | None = None) -> Conversion:
    """Ego-frame waypoints [P, 2|3] (z ignored) -> Conversion (see module doc).

    `horizon_s` > 0: waypoints uniform in time over the horizon; 0: spaced by
    arc length. `v0` is the ego's present speed (m/s) when known: the start
    of arc-length and re-timed speed profiles.
    """
    pts = _as_points(points)
    if not math.isfinite(horizon_s) or horizon_s < 0:
        raise DriveError(f"horizon_s: must be finite and >= 0, got {horizon_s}")
    if v0 is not None and not (math.isfinite(v0) and v0 >= 0):
        raise DriveError(f"v0: the ego speed must be finite and >= 0, got {v0}")
    if horizon_s == 0:
        return _arc_length_plan(pts, vehicle, cfg, v0)
    return _timed_plan(pts, horizon_s, vehicle, cfg, v0)


def stop_trajectory(v0: float, decel_mps2: float, dt_s: float, vehicle: VehicleParams,
                    curvature_1pm: float = 0.0) -> DriveTrajectory:
    """Brake from `v0` to rest at `decel_mps2`, on the present arc (curvature clipped to the
    steering limit), in the ego frame; one point at rest when already stopped."""
    if not (math.isfinite(v0) and math.isfinite(curvature_1pm)):
        raise DriveError("v0: non-finite ego state")
    v0 = max(v0, 0.0)
    if v0 < 1e-3:
        return _single(0.0, 0.0, 0.0, 0.0, None)
    k = float(np.clip(curvature_1pm, -vehicle.max_curvature_1pm, vehicle.max_curvature_1pm))
    t_stop = v0 / decel_mps2
    n = max(int(math.ceil(t_stop / dt_s)), 1)
    t = np.linspace(0.0, t_stop, n + 1)
    s = v0 * t - 0.5 * decel_mps2 * t**2
    v = v0 - decel_mps2 * t
    v[-1] = 0.0
    yaw = k * s
    if abs(k) < 1e-9:
        x, y = s, np.zeros_like(s)
    else:
        x, y = np.sin(yaw) / k, (1 - np.cos(yaw)) / k
    a = np.full_like(t, -decel_mps2)
    a[-1] = 0.0
    return DriveTrajectory(t, x, y, yaw, v, a, v * k, np.full_like(t, k),
                           np.full_like(t, float(steer_from_curvature(k, vehicle.wheelbase_m))))
