"""Kinematic limits and the check every emitted trajectory must pass.

A trajectory is a grid of samples (period dt) with positions, velocities and
accelerations per joint. The executed motion between samples is the quintic
Hermite interpolation a joint_trajectory_controller performs; for the MPC
backend (constant jerk per interval, exact discretisation) it reproduces the
optimised piecewise cubic exactly. Limits are checked on the samples:
|v| and |a| at every sample, jerk as the finite difference of accelerations
between consecutive samples (the mean jerk over the interval), positions
against optional bounds. Discrete channels (grippers) are checked against
their own rate limit on consecutive position differences.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

__all__ = ["TrajectoryError", "Limits", "LimitReport", "SampledStates", "check_limits", "CHECK_RTOL"]

#: Relative slack of the final check: covers floating-point round-off only.
CHECK_RTOL = 1e-9


class TrajectoryError(ValueError):
    """Base error of the trajectory library (bad limits, bad shapes, bad chunks)."""


class SampledStates:
    """Mixin for generator results that keep their samples as one `states` array [3, T, D]
    (positions, velocities, accelerations: one allocation, concatenated in one call)."""

    states: np.ndarray

    @property
    def positions(self) -> np.ndarray:
        return self.states[0]

    @property
    def velocities(self) -> np.ndarray:
        return self.states[1]

    @property
    def accelerations(self) -> np.ndarray:
        return self.states[2]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-joint box limits of the continuous joints ([D] arrays, robot units)."""

    v_max: np.ndarray
    a_max: np.ndarray
    j_max: np.ndarray
    q_min: np.ndarray
    q_max: np.ndarray

    @classmethod
    def create(cls, dof: int, v_max, a_max, j_max, q_min=None, q_max=None) -> Limits:
        """Broadcast scalars or per-joint sequences to [dof] arrays and validate them."""

        def arr(name: str, value, default: float) -> np.ndarray:
            if value is None or (np.ndim(value) == 1 and len(value) == 0):
                return np.full(dof, default)
            a = np.asarray(value, dtype=float)
            if a.ndim == 0:
                a = np.full(dof, float(a))
            if a.shape != (dof,):
                raise TrajectoryError(f"{name}: expected a scalar or {dof} values, got shape {a.shape}")
            return a.copy()

        lim = cls(arr("v_max", v_max, np.nan), arr("a_max", a_max, np.nan), arr("j_max", j_max, np.nan),
                  arr("q_min", q_min, -np.inf), arr("q_max", q_max, np.inf))
        for name in ("v_max", "a_max", "j_max"):
            a = getattr(lim, name)
            if not np.all(np.isfinite(a)) or np.any(a <= 0):
                raise TrajectoryError(f"{name}: every limit must be finite and > 0, got {a.tolist()}")
        if np.any(np.isnan(lim.q_min)) or np.any(np.isnan(lim.q_max)) or np.any(lim.q_min >= lim.q_max):
            raise TrajectoryError(
                f"q_min: must be below q_max for every joint ({lim.q_min.tolist()} vs {lim.q_max.tolist()})")
        for a in (lim.v_max, lim.a_max, lim.j_max, lim.q_min, lim.q_max):
            a.setflags(write=False)
        return lim

    @functools.cached_property
    def has_position_limits(self) -> bool:
        return bool(np.isfinite(self.q_min).any() or np.isfinite(self.q_max).any())

    @functools.cached_property
    def inv_v_max(self) -> np.ndarray:
        return 1.0 / self.v_max

    @functools.cached_property
    def inv_a_max(self) -> np.ndarray:
        return 1.0 / self.a_max

    @functools.cached_property
    def inv_j_max(self) -> np.ndarray:
        return 1.0 / self.j_max

    @functools.cached_property
    def q_scale(self) -> float:
        """Largest finite |position bound| (1 if none): the scale of the position check's tolerance."""
        finite = np.concatenate([self.q_min, self.q_max])
        return float(np.abs(finite[np.isfinite(finite)]).max(initial=1.0))

    @property
    def dof(self) -> int:
        return int(self.v_max.shape[0])

    def scaled(self, factor: float) -> Limits:
        """Limits shrunk by `factor` (< 1) toward zero / the middle of the position range."""
        finite = np.isfinite(self.q_min) & np.isfinite(self.q_max)
        mid = np.where(finite, 0.5 * (np.where(finite, self.q_min, 0.0) + np.where(finite, self.q_max, 0.0)), 0.0)
        return Limits(self.v_max * factor, self.a_max * factor, self.j_max * factor,
                      np.where(np.isfinite(self.q_min), mid + (self.q_min - mid) * factor, -np.inf),
                      np.where(np.isfinite(self.q_max), mid + (self.q_max - mid) * factor, np.inf))

    def subset(self, idx) -> Limits:
        return Limits(self.v_max[idx], self.a_max[idx], self.j_max[idx], self.q_min[idx], self.q_max[idx])

    def state_ok(self, q: np.ndarray, v: np.ndarray, a: np.ndarray, rtol: float = CHECK_RTOL) -> bool:
        """True when one state [D] lies inside the position/velocity/acceleration box."""
        return bool(np.all(np.abs(v) <= self.v_max * (1 + rtol))
                    and np.all(np.abs(a) <= self.a_max * (1 + rtol))
                    and np.all(q >= self.q_min - rtol * np.abs(self.q_min))
                    and np.all(q <= self.q_max + rtol * np.abs(self.q_max)))


@dataclasses.dataclass(frozen=True)
class LimitReport:
    """Largest |value| / limit over a trajectory (1.0 = exactly at the limit)."""

    v_ratio: float
    a_ratio: float
    j_ratio: float
    q_violation: float  # largest excursion outside [q_min, q_max] (robot units), 0 if none
    rate_ratio: float  # discrete channels: largest |dq/dt| / rate limit, 0 if none
    ok: bool

    @property
    def margin(self) -> float:
        """1 - the worst ratio: how much headroom is left (negative = violated)."""
        return 1.0 - max(self.v_ratio, self.a_ratio, self.j_ratio, self.rate_ratio)


_MAX = np.maximum.reduce  # the ufunc reductions themselves: no Python wrapper per call
_SUM = np.add.reduce


def _max(x: np.ndarray) -> float:
    return float(_MAX(x, axis=None))


def _total(x: np.ndarray) -> float:
    return float(_SUM(x, axis=None))


def check_limits(
    dt: float,
    q: np.ndarray,
    v: np.ndarray,
    a: np.ndarray,
    limits: Limits,
    discrete_q: np.ndarray | None = None,
    discrete_rate: np.ndarray | None = None,
    rtol: float = CHECK_RTOL,
) -> LimitReport:
    """Check samples [T, D] (and discrete channels [T, Dd]) against the limits.

    Runs on every emitted trajectory, so it is written as few whole-array
    reductions (a max propagates NaN, and NaN fails every comparison below).
    """
    vr = ar = jr = qv = rr = 0.0
    if q.size:
        if not math.isfinite(_total(q)):  # NaN/inf positions (v and a propagate NaN through their max)
            return LimitReport(np.inf, np.inf, np.inf, np.inf, np.inf, False)
        vr = _max(np.abs(v) * limits.inv_v_max)
        ar = _max(np.abs(a) * limits.inv_a_max)
        if len(a) > 1:
            jr = _max(np.abs(a[1:] - a[:-1]) * (limits.inv_j_max / dt))
        if limits.has_position_limits:
            qv = max(_max(limits.q_min - q), _max(q - limits.q_max), 0.0)
    if discrete_q is not None and discrete_q.size and len(discrete_q) > 1:
        rr = _max(np.abs(discrete_q[1:] - discrete_q[:-1]) / (dt * discrete_rate))
    bound = 1.0 + rtol
    ok = vr <= bound and ar <= bound and jr <= bound and rr <= bound and qv <= rtol * limits.q_scale
    if math.isnan(vr + ar + jr + qv + rr):  # NaN samples: report them as infinitely far out
        vr, ar, jr, qv, rr = (np.inf if math.isnan(x) else x for x in (vr, ar, jr, qv, rr))
    return LimitReport(vr, ar, jr, qv, rr, ok)

