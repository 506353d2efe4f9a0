"""Joint-trajectory following with ros2_control `joint_trajectory_controller` semantics.

No ROS imports: simulators interpolate with it, bridges predict the reference
their controllers will track and check limits on exactly that curve.

Rules (as the JTC documents them):

* interpolation per segment: quintic when every point has positions,
  velocities and accelerations; cubic with positions and velocities; linear
  with positions only;
* a trajectory's absolute start is its header stamp, zero meaning "now" (the
  receive time); points whose time has passed at activation are skipped and
  the first remaining segment starts from the reference state at activation;
* a new trajectory replaces the active one at its start time (one pending
  slot: a newer pending trajectory replaces an older pending one);
* after the last point the reference holds the last position with zero
  velocity: a trajectory is never extrapolated.
"""
from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["TrajectoryError", "Trajectory", "Spline", "Reference", "TrajectoryFollower", "interpolation_of"]


class TrajectoryError(ValueError):
    """A trajectory that cannot be interpolated (shape, ordering, non-finite)."""


def interpolation_of(velocities, accelerations) -> str:
    """`quintic` (p, v, a), `cubic` (p, v) or `linear` (p only)."""
    if velocities is not None and accelerations is not None:
        return "quintic"
    if velocities is not None:
        return "cubic"
    return "linear"


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """A joint trajectory in plain arrays (robot units).

    `stamp_s` = 0 means "start when received"; `times_s` are the points'
    time_from_start. `velocities`/`accelerations` are None when not given.
    """

    joint_names: tuple[str, ...]
    stamp_s: float
    times_s: np.ndarray  # [N]
    positions: np.ndarray  # [N, D]
    velocities: np.ndarray | None = None  # [N, D]
    accelerations: np.ndarray | None = None  # [N, D]

    def __post_init__(self) -> None:
        t = np.asarray(self.times_s, dtype=float).reshape(-1)
        n, d = len(t), len(self.joint_names)
        object.__setattr__(self, "times_s", t)
        for field in ("positions", "velocities", "accelerations"):
            arr = getattr(self, field)
            if arr is None:
                continue
            arr = np.asarray(arr, dtype=float)
            if arr.shape != (n, d):
                raise TrajectoryError(f"{field}: expected shape ({n}, {d}), got {arr.shape}")
            object.__setattr__(self, field, arr)
        if n == 0:
            raise TrajectoryError("points: a trajectory needs at least one point")

    @property
    def interpolation(self) -> str:
        return interpolation_of(self.velocities, self.accelerations)

    def start_s(self, now_s: float) -> float:
        """Absolute start time: the stamp, or `now_s` when the stamp is zero."""
        return now_s if self.stamp_s == 0.0 else self.stamp_s


@dataclasses.dataclass(frozen=True)
class Reference:
    """Reference state at one time; `active` is False when holding after (or without) a trajectory."""

    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray
    active: bool


def _coefficients(q0, v0, a0, q1, v1, a1, T: float, mode: str) -> np.ndarray:
    """[6, D] polynomial coefficients c0..c5 of one segment of duration T."""
    h = q1 - q0
    c = np.zeros((6, len(q0)))
    c[0] = q0
    if mode == "linear":
        c[1] = h / T
        return c
    c[1] = v0
    if mode == "cubic":
        c[2] = (3 * h - (2 * v0 + v1) * T) / T**2
        c[3] = (-2 * h + (v0 + v1) * T) / T**3
        return c
    c[2] = a0 / 2
    c[3] = (20 * h - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T**2) / (2 * T**3)
    c[4] = (-30 * h + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T**2) / (2 * T**4)
    c[5] = (12 * h - 6 * (v1 + v0) * T - (a0 - a1) * T**2) / (2 * T**5)
    return c


def _evaluate(c: np.ndarray, s: float | np.ndarray):
    """Position, velocity, acceleration of coefficients [6, D] at local time(s) s."""
    s = np.asarray(s, dtype=float)[..., None]
    q = c[0] + s * (c[1] + s * (c[2] + s * (c[3] + s * (c[4] + s * c[5]))))
    v = c[1] + s * (2 * c[2] + s * (3 * c[3] + s * (4 * c[4] + s * 5 * c[5])))
    a = 2 * c[2] + s * (6 * c[3] + s * (12 * c[4] + s * 20 * c[5]))
    return q, v, a


class Spline:
    """Piecewise polynomial through knots at absolute times (the JTC's reference curve)."""

    def __init__(self, knot_times_s: np.ndarray, positions: np.ndarray, velocities: np.ndarray | None,
                 accelerations: np.ndarray | None, mode: str) -> None:
        t = np.asarray(knot_times_s, dtype=float)
        if np.any(np.diff(t) <= 0):
            raise TrajectoryError("time_from_start: knot times must be strictly increasing")
        self.times_s = t
        self._tlist = t.tolist()
        self.mode = mode
        self.positions = np.asarray(positions, dtype=float)
        k, d = self.positions.shape
        zeros = np.zeros((k, d))
        v = zeros if velocities is None else np.asarray(velocities, dtype=float)
        a = zeros if accelerations is None else np.asarray(accelerations, dtype=float)
        self._coef = np.stack([
            _coefficients(self.positions[i], v[i], a[i], self.positions[i + 1], v[i + 1], a[i + 1],
                          t[i + 1] - t[i], mode)
            for i in range(k - 1)
        ]) if k > 1 else np.zeros((0, 6, d))

    @property
    def end_s(self) -> float:
        return float(self.times_s[-1])

    def sample(self, time_s: float) -> Reference:
        """Reference at an absolute time; after the last knot: hold it at rest (not active)."""
        t = self._tlist
        if time_s >= t[-1] or len(t) == 1:
            d = self.positions.shape[1]
            return Reference(self.positions[-1].copy(), np.zeros(d), np.zeros(d), False)
        i = max(bisect.bisect_right(t, time_s) - 1, 0)
        s = max(time_s - t[i], 0.0)
        s2 = s * s
        s3 = s2 * s
        c = self._coef[i]
        q = np.dot((1.0, s, s2, s3, s3 * s, s3 * s2), c)
        v = np.dot((0.0, 1.0, 2 * s, 3 * s2, 4 * s3, 5 * s3 * s), c)
        a = np.dot((0.0, 0.0, 2.0, 6 * s, 12 * s2, 20 * s3), c)
        return Reference(q, v, a, True)

    def dense(self, samples_per_segment: int = 16):
        """(q, v, a), each [S, D], sampled on every segment including its ends (for limit checks)."""
        if len(self._coef) == 0:
            d = self.positions.shape[1]
            return self.positions.copy(), np.zeros((1, d)), np.zeros((1, d))
        qs, vs, as_ = [], [], []
        for i, c in enumerate(self._coef):
            s = np.linspace(0.0, self.times_s[i + 1] - self.times_s[i], samples_per_segment)
            q, v, a = _evaluate(c, s)
            qs.append(q), vs.append(v), as_.append(a)
        return np.concatenate(qs), np.concatenate(vs), np.concatenate(as_)

    def dense_jerk(self, samples_per_segment: int = 16) -> np.ndarray:
        """[S, D] jerk on the same samples as `dense` (analytic: 6 c3 + 24 c4 s + 60 c5 s^2), for jerk limits."""
        if len(self._coef) == 0:
            return np.zeros((1, self.positions.shape[1]))
        out = []
        for i, c in enumerate(self._coef):
            s = np.linspace(0.0, self.times_s[i + 1] - self.times_s[i], samples_per_segment)[:, None]
            out.append(6 * c[3] + s * (24 * c[4] + s * 60 * c[5]))
        return np.concatenate(out)


def spline_from(traj: Trajectory, start_s: float, initial: Reference | None, activation_s: float) -> Spline:
    """The reference curve a controller follows after activating `traj` at `activation_s`.

    Points due at or before `activation_s` are skipped; the curve starts from
    `initial` (the previous reference) at `activation_s`. Without `initial`
    (validation of a fresh goal against nothing) the first point is the start.
    """
    due = start_s + traj.times_s
    keep = due > activation_s + 1e-9 if initial is not None else due >= activation_s - 1e-9
    if not np.any(keep):
        keep[-1] = True  # all in the past: go to (and hold) the last point
    idx = np.flatnonzero(keep)
    mode = traj.interpolation
    pos = traj.positions[idx]
    vel = None if traj.velocities is None else traj.velocities[idx]
    acc = None if traj.accelerations is None else traj.accelerations[idx]
    times = due[idx]
    if initial is not None and times[0] > activation_s + 1e-9:
        times = np.concatenate([[activation_s], times])
        pos = np.vstack([initial.positions, pos])
        if vel is not None:
            vel = np.vstack([initial.velocities, vel])
        if acc is not None:
            acc = np.vstack([initial.accelerations, acc])
    return Spline(times, pos, vel, acc, mode)


class TrajectoryFollower:
    """Reference generator for one controller (a fixed joint set), JTC semantics.

    Not thread-safe: guard with the owner's lock when commands and stepping
    run on different threads.
    """

    def __init__(self, joint_names: Sequence[str], initial_positions: np.ndarray) -> None:
        self.joint_names = tuple(joint_names)
        q = np.asarray(initial_positions, dtype=float).reshape(len(self.joint_names))
        self._active: Spline | None = None
        self._hold = Reference(q.copy(), np.zeros_like(q), np.zeros_like(q), False)
        self._pending: tuple[float, Trajectory, float] | None = None  # (start, trajectory, received)
        self._last_time_s = -np.inf

    def reset(self, positions: np.ndarray) -> None:
        q = np.asarray(positions, dtype=float).reshape(len(self.joint_names))
        self._active, self._pending = None, None
        self._hold = Reference(q.copy(), np.zeros_like(q), np.zeros_like(q), False)

    def set_trajectory(self, traj: Trajectory, now_s: float) -> bool:
        """Queue `traj`; it takes over at its start time. Joint order is reordered to ours.

        Returns False (and changes nothing) when every point is already in
        the past: a stale trajectory is never replayed.
        """
        if set(traj.joint_names) != set(self.joint_names) or len(traj.joint_names) != len(self.joint_names):
            raise TrajectoryError(
                f"joint_names: expected {list(self.joint_names)}, got {list(traj.joint_names)}"
            )
        order = [traj.joint_names.index(n) for n in self.joint_names]
        traj = dataclasses.replace(
            traj,
            joint_names=self.joint_names,
            positions=traj.positions[:, order],
            velocities=None if traj.velocities is None else traj.velocities[:, order],
            accelerations=None if traj.accelerations is None else traj.accelerations[:, order],
        )
        t = traj.times_s
        if len(t) == 0 or t[0] < 0 or np.any(np.diff(t) <= 0):
            raise TrajectoryError("time_from_start: must start at >= 0 and increase strictly")
        start = traj.start_s(now_s)
        if start + traj.times_s[-1] < now_s and traj.times_s[-1] > 0:
            return False
        spline_from(traj, start, None, start)  # anything that cannot be followed fails here, not mid-control
        self._pending = (start, traj, now_s)
        return True

    def sample(self, now_s: float) -> Reference:
        """Reference at `now_s` (call with non-decreasing times).

        A pending trajectory takes over at its start time: the new curve is
        anchored on the old reference at that instant (or when it was
        received, if it started in the past), not at `now_s`, so a switch
        between two samples does not shift the new curve in time.
        """
        if self._pending is not None and self._pending[0] <= now_s:
            start, traj, received = self._pending
            self._pending = None
            t_act = min(max(start, received, self._last_time_s), now_s)
            self._active = spline_from(traj, start, self._current(t_act), t_act)
        self._last_time_s = now_s
        return self._current(now_s)

    def peek(self, time_s: float) -> Reference:
        """Reference the follower will have at `time_s` (>= the last sample) if nothing new arrives; no side effects."""
        active = self._active
        if self._pending is not None and self._pending[0] <= time_s:
            start, traj, received = self._pending
            t_act = max(start, received, self._last_time_s)
            initial = self._hold if active is None else active.sample(t_act)
            active = spline_from(traj, start, initial, t_act)
        if active is None:
            return self._hold
        return active.sample(time_s)

    def _current(self, now_s: float) -> Reference:
        if self._active is None:
            return self._hold
        ref = self._active.sample(now_s)
        if not ref.active:
            self._hold = ref
            self._active = None
        return ref

    @property
    def end_s(self) -> float | None:
        """When the active (or pending) trajectory ends; None when holding."""
        if self._pending is not None:
            start, traj, _ = self._pending
            return start + float(traj.times_s[-1])
        return None if self._active is None else self._active.end_s

    @property
    def final_positions(self) -> np.ndarray:
        """Where the reference will come to rest: last point of the pending or active trajectory."""
        if self._pending is not None:
            return self._pending[1].positions[-1].copy()
        if self._active is not None:
            return self._active.positions[-1].copy()
        return self._hold.positions.copy()

    @property
    def holding(self) -> bool:
        return self._active is None and self._pending is None
