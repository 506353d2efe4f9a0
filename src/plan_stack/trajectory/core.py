"""The one in-memory joint trajectory and its evaluation, shared by the stitcher, the bridges and the simulators.

No ROS imports. The stitcher predicts the motion a controller will execute
from the same polynomials the bridges check and the simulated controllers
follow, so the three cannot drift apart.

A `Trajectory` is points (positions, optional velocities and accelerations)
due at `stamp_s + times_s[i]`. The stitcher's output is the special case on
a uniform grid (`Trajectory.on_grid`: `times_s[i] = i·dt_s`, all three
fields given).

Interpolation follows the ros2_control `joint_trajectory_controller` rules:

* per segment: quintic when every point has positions, velocities and
  accelerations; cubic with positions and velocities; linear with positions
  only;
* a trajectory's absolute start is its stamp, zero meaning "now" (the
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
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "TrajectoryError", "Trajectory", "Spline", "Reference", "TrajectoryFollower", "interpolation_of",
    "segment_coefficients", "evaluate", "spline_from", "knots_from", "followed", "KnotSamples", "GRID_EPS",
]

#: Fraction of a sample period within which a time counts as "on the grid" (20 ns at 50 Hz).
GRID_EPS = 1e-6


class TrajectoryError(ValueError):
    """Base error of the trajectory library: a trajectory, chunk or limit that cannot be used."""


def interpolation_of(velocities: Any, accelerations: Any) -> str:
    """`quintic` (p, v, a), `cubic` (p, v) or `linear` (p only)."""
    if velocities is not None and accelerations is not None:
        return "quintic"
    if velocities is not None:
        return "cubic"
    return "linear"


def segment_coefficients(q0: Any, v0: Any, a0: Any, q1: Any, v1: Any, a1: Any, T: Any,
                         mode: str = "quintic") -> np.ndarray:
    """Polynomial coefficients c0..c5 of segments from (q0, v0, a0) to (q1, v1, a1) in time T.

    Inputs [..., D] (T broadcasts as [..., 1] or a scalar); returns [..., 6, D].
    Quintic: the Hermite segment matching position, velocity and acceleration
    at both ends; cubic: position and velocity; linear: position.
    """
    q0 = np.asarray(q0, dtype=float)
    q1 = np.asarray(q1, dtype=float)
    T = np.asarray(T, dtype=float)
    h = q1 - q0
    c = np.zeros(q0.shape[:-1] + (6, q0.shape[-1]))
    c[..., 0, :] = q0
    if mode == "linear":
        c[..., 1, :] = h / T
        return c
    v0 = np.asarray(v0, dtype=float)
    v1 = np.asarray(v1, dtype=float)
    c[..., 1, :] = v0
    if mode == "cubic":
        c[..., 2, :] = (3 * h - (2 * v0 + v1) * T) / T**2
        c[..., 3, :] = (-2 * h + (v0 + v1) * T) / T**3
        return c
    a0 = np.asarray(a0, dtype=float)
    a1 = np.asarray(a1, dtype=float)
    c[..., 2, :] = a0 / 2
    c[..., 3, :] = (20 * h - (8 * v1 + 12 * v0) * T - (3 * a0 - a1) * T**2) / (2 * T**3)
    c[..., 4, :] = (-30 * h + (14 * v1 + 16 * v0) * T + (3 * a0 - 2 * a1) * T**2) / (2 * T**4)
    c[..., 5, :] = (12 * h - 6 * (v1 + v0) * T - (a0 - a1) * T**2) / (2 * T**5)
    return c


def evaluate(c: np.ndarray, s: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Position, velocity, acceleration of coefficients [..., 6, D] at local time(s) s (broadcast as [..., 1])."""
    s = np.asarray(s, dtype=float)[..., None]
    c0, c1, c2, c3, c4, c5 = (c[..., k, :] for k in range(6))
    q = c0 + s * (c1 + s * (c2 + s * (c3 + s * (c4 + s * c5))))
    v = c1 + s * (2 * c2 + s * (3 * c3 + s * (4 * c4 + s * 5 * c5)))
    a = 2 * c2 + s * (6 * c3 + s * (12 * c4 + s * 20 * c5))
    return q, v, a


@functools.lru_cache(maxsize=64)
def _derivative_basis(samples: int) -> np.ndarray:
    """Read-only [3 S, 6]: rows k·S + i hold n!/(n-k)! u_i^(n-k) (0 for n < k), the k-th derivative of u^n
    at S normalised times u_i in [0, 1] (k = 0, 1, 2)."""
    u = np.linspace(0.0, 1.0, samples)
    out = np.zeros((3, samples, 6))
    for k in range(3):
        for n in range(k, 6):
            out[k, :, n] = math.perm(n, k) * u ** (n - k)
    flat = out.reshape(3 * samples, 6)
    flat.setflags(write=False)
    return flat


@functools.lru_cache(maxsize=64)
def _basis(samples: int, terms: int) -> np.ndarray:
    """Read-only [S, terms] powers u^0..u^(terms-1) of `samples` normalised times u in [0, 1], ends included."""
    u = np.linspace(0.0, 1.0, samples)
    b = u[:, None] ** np.arange(terms)[None, :]
    b.setflags(write=False)
    return b


@functools.lru_cache(maxsize=64)
def _grid_times(n: int, dt_s: float) -> np.ndarray:
    """Read-only [n] times i·dt_s (shared by every grid trajectory of that length)."""
    t = np.arange(n) * dt_s
    t.setflags(write=False)
    return t


@dataclasses.dataclass(frozen=True)
class Reference:
    """Reference state at one time; `active` is False when holding after (or without) a trajectory."""

    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray
    active: bool


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """A joint trajectory in plain arrays (robot units).

    Points are due at `stamp_s + times_s[i]`. For a command, `stamp_s` = 0
    means "start when received". `velocities`/`accelerations` are None when
    not given. `dt_s` is the grid period when `times_s[i] = i·dt_s` (set by
    `on_grid`), else None.
    """

    joint_names: tuple[str, ...]
    stamp_s: float
    times_s: np.ndarray  # [N]
    positions: np.ndarray  # [N, D]
    velocities: np.ndarray | None = None  # [N, D]
    accelerations: np.ndarray | None = None  # [N, D]
    dt_s: float | None = None

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

    @classmethod
    def on_grid(cls, t0_s: float, dt_s: float, joint_names: Sequence[str], positions: np.ndarray,
                velocities: np.ndarray, accelerations: np.ndarray) -> Trajectory:
        """Samples [T, D] due at t0_s + i·dt_s (the stitcher's output: float arrays of one shape, not re-checked).

        Built without `__post_init__`: the stitcher emits one per chunk and its arrays already have the shape.
        """
        traj = object.__new__(cls)
        dt_s = float(dt_s)
        traj.__dict__.update(joint_names=tuple(joint_names), stamp_s=float(t0_s),
                             times_s=_grid_times(len(positions), dt_s), positions=positions,
                             velocities=velocities, accelerations=accelerations, dt_s=dt_s)
        return traj

    @property
    def interpolation(self) -> str:
        return interpolation_of(self.velocities, self.accelerations)

    @property
    def t0_s(self) -> float:
        """When the first point is due."""
        return self.stamp_s if self.dt_s is not None else self.stamp_s + float(self.times_s[0])

    @property
    def end_s(self) -> float:
        """When the last point is due."""
        if self.dt_s is not None:
            return self.stamp_s + (len(self.positions) - 1) * self.dt_s
        return self.stamp_s + float(self.times_s[-1])

    def start_s(self, now_s: float) -> float:
        """Absolute start time of a command: the stamp, or `now_s` when the stamp is zero."""
        return now_s if self.stamp_s == 0.0 else self.stamp_s

    def reordered(self, joint_names: Sequence[str]) -> Trajectory:
        """The same trajectory with its columns in `joint_names` order (a permutation of ours)."""
        names = tuple(joint_names)
        if names == self.joint_names:
            return self
        if sorted(names) != sorted(self.joint_names):
            raise TrajectoryError(f"joint_names: expected {list(names)}, got {list(self.joint_names)}")
        order = [self.joint_names.index(n) for n in names]
        return dataclasses.replace(
            self, joint_names=names, positions=self.positions[:, order],
            velocities=None if self.velocities is None else self.velocities[:, order],
            accelerations=None if self.accelerations is None else self.accelerations[:, order])

    @functools.cached_property
    def spline(self) -> Spline:
        """The curve a controller follows when it executes every point from the first (stamp taken as given)."""
        return Spline(self.stamp_s + self.times_s, self.positions, self.velocities, self.accelerations,
                      self.interpolation)

    def sample(self, times: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, v, a) [n, D] at absolute `times` as an interpolating controller executes it.

        Times on a point (within `GRID_EPS` of the grid period for grid
        trajectories) return the stored point exactly; after the end the robot
        holds the last position at rest; before the start, the first point.
        """
        times = np.atleast_1d(np.asarray(times, dtype=float))
        if self.dt_s is None or self.velocities is None or self.accelerations is None:
            refs = [self.spline.sample(float(t)) for t in times]
            return (np.array([r.positions for r in refs]), np.array([r.velocities for r in refs]),
                    np.array([r.accelerations for r in refs]))
        P, V, A = self.positions, self.velocities, self.accelerations
        n_seg = len(P) - 1
        u = (times - self.t0_s) / self.dt_s
        k = np.rint(u)
        on_grid = (np.abs(u - k) <= GRID_EPS) & (k >= 0) & (k <= n_seg)
        if np.all(on_grid):  # the common case: stored samples
            k = k.astype(int)
            return P[k], V[k], A[k]
        q = np.empty((len(times), P.shape[1]))
        v = np.empty_like(q)
        a = np.empty_like(q)
        ki = k.astype(int)
        rows = np.flatnonzero(on_grid)
        q[rows], v[rows], a[rows] = P[ki[rows]], V[ki[rows]], A[ki[rows]]
        after = ~on_grid & (u > n_seg)
        q[after], v[after], a[after] = P[-1], 0.0, 0.0
        before = ~on_grid & (u < 0)
        q[before], v[before], a[before] = P[0], V[0], A[0]
        inside = np.flatnonzero(~on_grid & ~after & ~before)
        if len(inside):
            i = np.floor(u[inside]).astype(int)
            c = segment_coefficients(P[i], V[i], A[i], P[i + 1], V[i + 1], A[i + 1], self.dt_s)
            q[inside], v[inside], a[inside] = evaluate(c, (u[inside] - i) * self.dt_s)
        return q, v, a


class Spline:
    """Piecewise polynomial through knots at absolute times (the controller's reference curve)."""

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
        P = self.positions
        self._coef = segment_coefficients(P[:-1], v[:-1], a[:-1], P[1:], v[1:], a[1:], np.diff(t)[:, None], mode) \
            if k > 1 else np.zeros((0, 6, d))

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

    def _scaled(self, order: int) -> np.ndarray:
        """[K, 6 - order, D] coefficients of the `order`-th derivative in the segment's normalised time
        u = s / T in [0, 1]: the derivative is then one basis matrix of u times these, the same matrix for
        every segment (one batched matrix product instead of a Horner scheme over [K, S, D] arrays)."""
        T = np.diff(self.times_s)[:, None]  # [K, 1]
        m = np.arange(order, 6)
        fall = np.array([math.perm(int(k), order) for k in m], dtype=float)  # k!/(k-order)!
        return self._coef[:, order:, :] * (fall[:, None] * T[..., None] ** (m - order)[None, :, None])

    def dense(self, samples_per_segment: int = 16) -> tuple[np.ndarray, ...]:
        """(q, v, a), each [S, D], sampled on every segment including its ends (for limit checks)."""
        d = self.positions.shape[1]
        if len(self._coef) == 0:
            return self.positions.copy(), np.zeros((1, d)), np.zeros((1, d))
        return tuple((_basis(samples_per_segment, 6 - k) @ self._scaled(k)).reshape(-1, d) for k in range(3))

    def dense_extremes(self, samples_per_segment: int = 16) -> tuple[np.ndarray, np.ndarray]:
        """(min, max), each [3, D]: the extremes of q, v, a over the samples of `dense` (one basis product for
        all three derivatives and two reductions: what a limit check needs when nothing is violated)."""
        d = self.positions.shape[1]
        if len(self._coef) == 0:
            q = self.positions
            zero = np.zeros(d)
            return np.stack([q.min(axis=0), zero, zero]), np.stack([q.max(axis=0), zero, zero])
        T = np.diff(self.times_s)
        K = len(T)
        # k-th derivative at s = u T: T^-k sum_n P(n, k) (c_n T^n) u^(n-k): scale the coefficients once, one
        # basis product for all three derivatives, then T^-k per segment.
        scaled = self._coef * (T[:, None] ** np.arange(6))[:, :, None]  # [K, 6, D]
        S = samples_per_segment
        # one 2-D product [3 S, 6] x [6, D K], then reductions along the contiguous last axis (the fast way)
        vals = (_derivative_basis(S) @ scaled.transpose(1, 2, 0).reshape(6, d * K)).reshape(3, S, d, K)
        vals *= (1.0 / T[None, :] ** np.arange(3)[:, None])[:, None, None, :]
        vals = vals.transpose(0, 2, 1, 3).reshape(3, d, S * K)
        return vals.min(axis=2), vals.max(axis=2)

    def dense_jerk(self, samples_per_segment: int = 16) -> np.ndarray:
        """[S, D] jerk on the same samples as `dense` (analytic: 6 c3 + 24 c4 s + 60 c5 s^2), for jerk limits."""
        if len(self._coef) == 0:
            return np.zeros((1, self.positions.shape[1]))
        return (_basis(samples_per_segment, 3) @ self._scaled(3)).reshape(-1, self.positions.shape[1])


def knots_from(traj: Trajectory, start_s: float, initial: Reference | None, activation_s: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(absolute times, positions, velocities, accelerations) of the knots a controller follows after activating
    `traj` at `activation_s` (see `spline_from`); velocities/accelerations None when the trajectory has none."""
    due = start_s + traj.times_s
    # times increase, so the points kept are a suffix: slices (views), not copies
    if initial is not None:
        first = int(np.searchsorted(due, activation_s + 1e-9, side="right"))
    else:
        first = int(np.searchsorted(due, activation_s - 1e-9, side="left"))
    first = min(first, len(due) - 1)  # all in the past: go to (and hold) the last point
    pos, times = traj.positions[first:], due[first:]
    vel = None if traj.velocities is None else traj.velocities[first:]
    acc = None if traj.accelerations is None else traj.accelerations[first:]
    if initial is not None and times[0] > activation_s + 1e-9:
        times = np.concatenate(([activation_s], times))
        pos = np.concatenate(([initial.positions], pos))
        if vel is not None:
            vel = np.concatenate(([initial.velocities], vel))
        if acc is not None:
            acc = np.concatenate(([initial.accelerations], acc))
    return times, pos, vel, acc


def followed(traj: Trajectory, start_s: float, initial: Reference | None, activation_s: float) -> Trajectory:
    """The curve a controller follows after activating `traj` at `activation_s` (`spline_from`), as a trajectory
    stamped `start_s` whose points are that curve's knots: the points due after the activation, preceded by
    `initial` at the activation when the first of them is due later. Its `sample` is the controller's reference
    from the activation on (a bridge reports this, so that what it executes can be stitched onto exactly)."""
    times, pos, vel, acc = knots_from(traj, start_s, initial, activation_s)
    return Trajectory(traj.joint_names, start_s, times - start_s, pos, vel, acc)


def spline_from(traj: Trajectory, start_s: float, initial: Reference | None, activation_s: float) -> Spline:
    """The reference curve a controller follows after activating `traj` at `activation_s`.

    Points due at or before `activation_s` are skipped; the curve starts from
    `initial` (the previous reference) at `activation_s`. Without `initial`
    (validation of a fresh goal against nothing) the first point is the start.
    """
    return Spline(*knots_from(traj, start_s, initial, activation_s), traj.interpolation)


#: Which of a segment's end data (q0, T v0, T² a0, q1, T v1, T² a1) each interpolation uses.
_MODE_DATA = {"linear": (0, 3), "cubic": (0, 1, 3, 4), "quintic": (0, 1, 2, 3, 4, 5)}


@functools.lru_cache(maxsize=64)
def _hermite_basis(samples: int, mode: str, orders: int) -> np.ndarray:
    """Read-only [orders · S, m]: row k·S + i maps a segment's end data (`_MODE_DATA[mode]`, m entries) to T^k
    times the k-th time derivative at the normalised time u_i = i / (S - 1) (k < orders). The interpolant's
    coefficients in u come from `segment_coefficients` itself (unit data, T = 1), so the two cannot disagree."""
    cols = list(_MODE_DATA[mode])
    unit = np.eye(6)  # column m: the m-th end datum set to 1
    coef = segment_coefficients(unit[0], unit[1], unit[2], unit[3], unit[4], unit[5], 1.0, mode)  # [6 (n), 6 (m)]
    u = np.linspace(0.0, 1.0, samples)
    powers = np.zeros((orders, samples, 6))
    for k in range(orders):
        for n in range(k, 6):
            powers[k, :, n] = math.perm(n, k) * u ** (n - k)
    out = np.ascontiguousarray((powers.reshape(orders * samples, 6) @ coef)[:, cols])
    out.setflags(write=False)
    return out


class KnotSamples:
    """The first `orders` derivatives of the piecewise polynomial through knots, sampled at `samples` points per
    segment (both ends included): the samples `Spline.dense` takes, computed from the knots directly.

    One matrix product maps every segment's end data to its samples (no per-segment coefficients); the
    per-segment scale T^-k is applied after the reduction over a segment's samples (a positive factor does
    not change which sample is the extreme), so `extremes` costs one product and four reductions.
    """

    def __init__(self, times: np.ndarray, positions: np.ndarray, velocities: np.ndarray | None,
                 accelerations: np.ndarray | None, mode: str, samples: int = 16, orders: int = 3) -> None:
        self.orders, self.samples = orders, samples
        P = positions
        K, D = len(P) - 1, P.shape[1]
        self.dof, self.segments = D, K
        if K == 0:
            self._raw = None
            self._p = P
            return
        T = times[1:] - times[:-1]
        cols = _MODE_DATA[mode]
        Y = np.empty((len(cols), K, D))
        Y[0] = P[:-1]
        Y[len(cols) // 2] = P[1:]
        if mode != "linear":
            assert velocities is not None
            Tc = T[:, None]
            np.multiply(velocities[:-1], Tc, out=Y[1])
            np.multiply(velocities[1:], Tc, out=Y[len(cols) // 2 + 1])
            if mode == "quintic":
                assert accelerations is not None
                T2 = Tc * Tc
                np.multiply(accelerations[:-1], T2, out=Y[2])
                np.multiply(accelerations[1:], T2, out=Y[5])
        B = _hermite_basis(samples, mode, orders)
        self._raw = (B @ Y.reshape(len(cols), K * D)).reshape(orders, samples, K, D)  # T^k x derivative k
        scale = np.empty((orders, K))  # [orders, K]: T^-k
        scale[0] = 1.0
        np.divide(1.0, T, out=scale[1])
        for k in range(2, orders):
            np.multiply(scale[k - 1], scale[1], out=scale[k])
        self._scale = scale

    def extremes(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max), each [orders, D], over every sample of every segment."""
        if self._raw is None:
            zero = np.zeros((self.orders - 1, self.dof))
            return (np.vstack([self._p.min(axis=0)[None], zero]), np.vstack([self._p.max(axis=0)[None], zero]))
        lo = self._raw.min(axis=1)  # [orders, K, D]
        hi = self._raw.max(axis=1)
        scale = self._scale[:, :, None]
        lo *= scale
        hi *= scale
        return lo.min(axis=1), hi.max(axis=1)

    def dense(self, k: int) -> np.ndarray:
        """[K·S, D] samples of derivative k in time order (segment by segment), as `Spline.dense` lays them out."""
        if self._raw is None:
            return self._p.copy() if k == 0 else np.zeros((1, self.dof))
        vals = self._raw[k] * self._scale[k][None, :, None]  # [S, K, D]
        return vals.transpose(1, 0, 2).reshape(-1, self.dof)


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
        self._last_time_s = -math.inf

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
        traj = traj.reordered(self.joint_names)
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

    def peek(self, time_s: float, pending: bool = True) -> Reference:
        """Reference the follower will have at `time_s` (>= the last sample) if nothing new arrives; no side effects.
        `pending` False: as if the pending trajectory were dropped (a newer one replaces it before it starts)."""
        active = self._active
        if pending and self._pending is not None and self._pending[0] <= time_s:
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
