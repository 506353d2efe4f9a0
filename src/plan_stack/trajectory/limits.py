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

`Limits` is the one limits type of the stack: the stitcher builds it for its
continuous joints from its configuration; the bridges build it per named joint
(`Limits.for_joints`) from the URDF and their configuration, with no jerk
limit (infinite) where the robot has none; `limits_from_urdf` reads a URDF's
position and velocity limits (`find_urdf` finds the package's own).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from plan_stack.config import ConfigError
from plan_stack.paths import find_data
from plan_stack.trajectory.core import TrajectoryError

__all__ = ["TrajectoryError", "LimitsError", "Limits", "LimitRule", "LimitReport", "SampledStates", "check_limits",
           "CHECK_RTOL", "find_urdf", "limits_from_urdf"]

#: Relative slack of the final check: covers floating-point round-off only.
CHECK_RTOL = 1e-9


class LimitsError(ConfigError, TrajectoryError):
    """Missing or malformed joint limits (URDF or config)."""


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
    """Per-joint box limits ([D] arrays, robot units); `joint_names` when built for named joints."""

    v_max: np.ndarray
    a_max: np.ndarray
    j_max: np.ndarray
    q_min: np.ndarray
    q_max: np.ndarray
    joint_names: tuple[str, ...] = ()

    @classmethod
    def for_joints(cls, joint_names: Sequence[str], lower: Any, upper: Any, velocity: Any, acceleration: Any,
                   jerk: Any = None) -> Limits:
        """Limits of named joints ([D] each; jerk None = no jerk limit); raises LimitsError when malformed.

        Position bounds may be infinite (continuous joints) and equal (a joint that must not move).
        """
        names = tuple(joint_names)
        d = len(names)
        arrays = {}
        for f, value in (("lower", lower), ("upper", upper), ("velocity", velocity), ("acceleration", acceleration),
                         ("jerk", np.full(d, np.inf) if jerk is None else jerk)):
            arr = np.array(value, dtype=float).reshape(-1)
            if arr.shape != (d,):
                raise LimitsError(f"{f}: expected {d} values, got {arr.shape[0]}")
            arrays[f] = arr
        if np.any(np.isnan(arrays["lower"])) or np.any(np.isnan(arrays["upper"])) \
                or np.any(arrays["lower"] > arrays["upper"]):
            raise LimitsError("lower: a lower position limit is above its upper limit")
        if np.any(~(arrays["velocity"] > 0)) or np.any(~(arrays["acceleration"] > 0)):
            raise LimitsError("velocity/acceleration: limits must be positive")
        if np.any(~(arrays["jerk"] > 0)):
            raise LimitsError("jerk: limits must be positive")
        for a in arrays.values():
            a.setflags(write=False)
        return cls(arrays["velocity"], arrays["acceleration"], arrays["jerk"], arrays["lower"], arrays["upper"],
                   names)

    @functools.cached_property
    def has_jerk_limits(self) -> bool:
        return bool(np.isfinite(self.j_max).any())

    @classmethod
    def create(cls, dof: int, v_max: Any, a_max: Any, j_max: Any, q_min: Any = None, q_max: Any = None) -> Limits:
        """Broadcast scalars or per-joint sequences to [dof] arrays and validate them."""

        def arr(name: str, value: Any, default: float) -> np.ndarray:
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
                      np.where(np.isfinite(self.q_max), mid + (self.q_max - mid) * factor, np.inf), self.joint_names)

    def subset(self, idx: Any) -> Limits:
        names = tuple(np.asarray(self.joint_names, dtype=object)[idx]) if self.joint_names else ()
        return Limits(self.v_max[idx], self.a_max[idx], self.j_max[idx], self.q_min[idx], self.q_max[idx], names)

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
    if discrete_q is not None and discrete_rate is not None and discrete_q.size and len(discrete_q) > 1:
        rr = _max(np.abs(discrete_q[1:] - discrete_q[:-1]) / (dt * discrete_rate))
    bound = 1.0 + rtol
    ok = vr <= bound and ar <= bound and jr <= bound and rr <= bound and qv <= rtol * limits.q_scale
    if math.isnan(vr + ar + jr + qv + rr):  # NaN samples: report them as infinitely far out
        vr, ar, jr, qv, rr = (np.inf if math.isnan(x) else x for x in (vr, ar, jr, qv, rr))
    return LimitReport(vr, ar, jr, qv, rr, ok)



@dataclasses.dataclass(frozen=True)
class LimitRule:
    """How the stitcher's limits follow from the bridge's, so the stitcher emits only what the bridge accepts.

    Per joint: stitcher velocity / acceleration / jerk / discrete rate = the bridge's limit x its scale
    (each <= 1: headroom for the bridge's dense check of the interpolated curve and for tracking); position
    range = the bridge's range moved inward by `position_margin` on each side. Where the bridge sets no limit
    (an infinite jerk limit) nothing is derived and the stitcher's own value stands.
    """

    velocity_scale: float = 0.9
    acceleration_scale: float = 0.8
    jerk_scale: float = 0.8
    discrete_rate_scale: float = 0.8
    position_margin: float = 0.03
    #: End-stop joints (grippers): they keep the bridge's position range without the margin (they rest at
    #: its ends, closed on an object or fully open, and a start there must not count as outside the range),
    #: and the stitcher saturates their references into that range (`saturate_joints`): a gripper commanded
    #: past fully open or closed stops there on every real gripper, so such a sample is clamped and counted,
    #: never a reason to drop the whole chunk (other joints beyond `position_tolerance` still are).
    exact_range_joints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "exact_range_joints", tuple(self.exact_range_joints))
        for name in ("velocity_scale", "acceleration_scale", "jerk_scale", "discrete_rate_scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 < value <= 1.0):
                raise LimitsError(f"{name}: must be in (0, 1], got {value!r}")
        if not (isinstance(self.position_margin, (int, float)) and 0.0 <= self.position_margin < math.inf):
            raise LimitsError(f"position_margin: must be finite and >= 0, got {self.position_margin!r}")

    def stitcher_limits(self, bridge: Limits, joint_names: Sequence[str],
                        discrete_joints: Sequence[str] = ()) -> dict[str, tuple]:
        """Stitcher limit parameters (`StitcherConfig` field -> values) from the bridge's named limits.

        `v_max`, `a_max`, `j_max` hold one value per continuous joint (in `joint_names` order),
        `discrete_rate` one per discrete joint; `j_max` only when the bridge limits the jerk of every
        continuous joint. `q_min`/`q_max` list every joint when the bridge bounds every one (discrete joints
        at the bridge's own range), else the continuous joints when those are all bounded, else nothing.
        `saturate_joints` lists the `exact_range_joints` (when there are any). `bridge_v_max`, `bridge_a_max`
        (and `bridge_j_max`, `bridge_q_min`/`bridge_q_max` where the bridge bounds every joint) are the bridge's
        own limits, one per joint: what the stitcher's final check of the interpolated curve uses.
        """
        index = {n: i for i, n in enumerate(bridge.joint_names)}
        missing = [n for n in joint_names if n not in index]
        if missing:
            raise LimitsError(f"joint_names: the bridge has no limits for {missing}")
        stray = [n for n in self.exact_range_joints if n not in joint_names]
        if stray:
            raise LimitsError(f"exact_range_joints: {stray} not in the stitcher's joint_names")
        cont = [index[n] for n in joint_names if n not in discrete_joints]
        disc = [index[n] for n in joint_names if n in discrete_joints]
        out: dict[str, tuple] = {
            "v_max": tuple(float(x) for x in bridge.v_max[cont] * self.velocity_scale),
            "a_max": tuple(float(x) for x in bridge.a_max[cont] * self.acceleration_scale),
        }
        if cont and np.all(np.isfinite(bridge.j_max[cont])):
            out["j_max"] = tuple(float(x) for x in bridge.j_max[cont] * self.jerk_scale)
        every = [index[n] for n in joint_names]
        lo_all, hi_all = bridge.q_min[every], bridge.q_max[every]
        lo, hi = bridge.q_min[cont], bridge.q_max[cont]
        if disc and np.all(np.isfinite(lo_all)) and np.all(np.isfinite(hi_all)):
            # Every joint bounded: one entry per joint (joint_names order). Discrete channels (grippers) keep
            # the bridge's range itself: their references are clipped to it and they rest at its ends.
            inset = np.array([0.0 if n in discrete_joints or n in self.exact_range_joints else self.position_margin
                              for n in joint_names])
            m = np.minimum(inset, 0.25 * (hi_all - lo_all))
            out["q_min"] = tuple(float(x) for x in lo_all + m)
            out["q_max"] = tuple(float(x) for x in hi_all - m)
        elif cont and np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)):
            inset = np.array([0.0 if joint_names[k] in self.exact_range_joints else self.position_margin
                              for k in range(len(joint_names)) if joint_names[k] not in discrete_joints])
            m = np.minimum(inset, 0.25 * (hi - lo))  # never cross the middle of a short range
            out["q_min"] = tuple(float(x) for x in lo + m)
            out["q_max"] = tuple(float(x) for x in hi - m)
        if disc:
            out["discrete_rate"] = tuple(float(x) for x in bridge.v_max[disc] * self.discrete_rate_scale)
        # The bridge's own limits, one per joint: the stitcher checks every trajectory's interpolated curve
        # against them with the bridge's own check before publishing it.
        out["bridge_v_max"] = tuple(float(x) for x in bridge.v_max[every])
        out["bridge_a_max"] = tuple(float(x) for x in bridge.a_max[every])
        if np.all(np.isfinite(bridge.j_max[every])):
            out["bridge_j_max"] = tuple(float(x) for x in bridge.j_max[every])
        if np.all(np.isfinite(lo_all)) and np.all(np.isfinite(hi_all)):
            out["bridge_q_min"] = tuple(float(x) for x in lo_all)
            out["bridge_q_max"] = tuple(float(x) for x in hi_all)
        if self.exact_range_joints:
            if "q_min" not in out:
                raise LimitsError(f"exact_range_joints: {list(self.exact_range_joints)} need a position range, "
                                  "but the bridge does not bound every joint")
            out["saturate_joints"] = self.exact_range_joints
        return out


def find_urdf(path: str, filename: str) -> str:
    """The URDF to read limits from: `path`, else urdf/<filename> of the package (see plan_stack.paths)."""
    if path:
        if not os.path.isfile(path):
            raise LimitsError(f"urdf_path: no such file {path!r}")
        return path
    try:
        return str(find_data("urdf", filename))
    except FileNotFoundError as exc:
        raise LimitsError(f"urdf_path: {exc}") from None


def limits_from_urdf(path: str) -> dict[str, tuple[float, float, float]]:
    """Joint name -> (lower, upper, velocity) of every limited joint in a URDF.

    Continuous joints get infinite position limits; a revolute/prismatic
    joint without a `<limit>` element is an error (the URDF spec requires one).
    """
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise LimitsError(f"urdf: cannot read {path}: {exc}") from None
    out: dict[str, tuple[float, float, float]] = {}
    for joint in root.iter("joint"):
        kind, name = joint.get("type"), joint.get("name") or ""
        if kind in ("fixed", "floating", "planar"):
            continue
        lim = joint.find("limit")
        if lim is None:
            raise LimitsError(f"urdf: joint {name!r} ({kind}) has no <limit>")
        vel = float(lim.get("velocity", "inf"))
        if kind == "continuous":
            out[name] = (-math.inf, math.inf, vel)
        else:
            out[name] = (float(lim.get("lower", "0")), float(lim.get("upper", "0")), vel)
    return out
