"""Jerk-limited online chaser (Ruckig) and jerk-limited tails to rest.

Tracking: every `stride` samples the chaser computes the time-optimal,
jerk-limited trajectory from its current state toward the reference sample
`lookahead` steps ahead (target velocity: the reference's secant velocity over
the lookahead window, clipped inside the limit; joints unsynchronised, each
time-optimal, so it tends to run slightly ahead of the reference) and follows
it for `stride` samples. Every sample is a state *on* a Ruckig trajectory, so
|v|, |a| and the mean jerk between samples are inside the limits whenever the
start state is; nothing is resampled or compressed (the known failure of
resampled settle trajectories). `to_rest` generates the jerk-limited tail that brings a state
to rest at a target and samples it on the same grid until it has arrived.
"""
from __future__ import annotations

import dataclasses
import enum
import time
from typing import Any

import numpy as np
from ruckig import ControlInterface, InputParameter, Result, Ruckig, RuckigError, Synchronization, Trajectory

from plan_stack.trajectory.limits import Limits, SampledStates, TrajectoryError

__all__ = ["RuckigStatus", "RuckigResult", "RuckigFilter"]


class RuckigStatus(enum.Enum):
    OK = "ok"
    FAILED = "failed"  # Ruckig rejected the input or could not compute a profile
    NOT_AT_REST = "not_at_rest"  # a tail did not reach rest within its step budget


@dataclasses.dataclass(frozen=True)
class RuckigResult(SampledStates):
    states: np.ndarray  # [3, T, D]: positions, velocities, accelerations
    status: RuckigStatus
    message: str
    solve_ms: float


class _Dof:
    """Ruckig objects for one number of DoF, allocated once."""

    def __init__(self, dof: int) -> None:
        self.otg = Ruckig(dof)
        self.inp = InputParameter(dof)
        self.inp.synchronization = Synchronization.No  # joints are independent
        self.inp.target_acceleration = [0.0] * dof  # every target here is reached with a = 0
        self.traj = Trajectory(dof)
        self.limits: Limits | None = None  # limits currently loaded into inp


@dataclasses.dataclass(frozen=True)
class _Schedule:
    """When the chaser recomputes and what it aims at, for one (samples, dt): index
    arithmetic done once per shape, not per chunk."""

    steps: tuple[int, ...]  # samples followed after each recomputation (sum = M - 1)
    target: np.ndarray  # reference row each recomputation aims at
    hi: np.ndarray  # secant rows for the target velocity
    lo: np.ndarray
    inv_span: np.ndarray  # [n, 1] 1 / secant duration
    times: tuple[tuple[float, ...], ...]  # sample times after a recomputation, for each number of samples

    @classmethod
    def create(cls, M: int, dt: float, stride: int, lookahead: int) -> _Schedule:
        starts = list(range(0, M - 1, stride))
        # Near the end every recomputation would aim at the last sample with the same velocity:
        # the first of them is followed to the end instead (the rest of a time-optimal profile is
        # the time-optimal profile from any state on it, so recomputing would only add round-off).
        last = next((i for i, k in enumerate(starts) if k + lookahead >= M - 1), len(starts) - 1)
        starts = starts[:last + 1]
        steps = tuple(b - a for a, b in zip(starts, starts[1:] + [M - 1]))
        k = np.array(starts)
        tgt = np.minimum(k + lookahead, M - 1)
        hi = np.minimum(tgt + 1, M - 1)
        lo = np.maximum(tgt - lookahead, 0)
        return cls(steps, tgt, hi, lo, (1.0 / ((hi - lo) * dt))[:, None],
                   tuple(tuple(i * dt for i in range(1, n + 1)) for n in range(max(steps) + 1)))


_OK = (Result.Working, Result.Finished)


def _unpack(samples: list[float], D: int) -> np.ndarray:
    """Flat q, v, a of each sample -> contiguous [3, n, D]."""
    flat = np.fromiter(samples, float, len(samples))
    return np.ascontiguousarray(flat.reshape(-1, 3, D).transpose(1, 0, 2))


class RuckigFilter:
    """Per-joint jerk-limited generation on a fixed sample grid. Not thread-safe."""

    def __init__(self, limit_margin: float = 1e-3, stride: int = 5, lookahead: int = 10) -> None:
        if stride < 1:
            raise TrajectoryError(f"ruckig_stride: must be >= 1, got {stride!r}")
        if lookahead < stride:
            raise TrajectoryError(f"ruckig_lookahead: must be >= ruckig_stride ({stride}), got {lookahead!r}")
        self.limit_margin = limit_margin
        self.stride = stride
        self.lookahead = lookahead
        self._dofs: dict[int, _Dof] = {}
        self._schedules: dict[tuple[int, float], _Schedule] = {}
        # (limits, those limits shrunk by the margin, velocity cap) of the last call
        self._scaled_cache: tuple[Limits, Limits, np.ndarray] | None = None

    def _get(self, dof: int, limits: Limits, interface: Any = ControlInterface.Position) -> _Dof:
        r = self._dofs.get(dof)
        if r is None:
            r = self._dofs[dof] = _Dof(dof)
        if r.limits is not limits:
            lim = self._scaled(limits)
            r.inp.max_velocity = lim.v_max.tolist()
            r.inp.max_acceleration = lim.a_max.tolist()
            r.inp.max_jerk = lim.j_max.tolist()
            r.limits = limits
        if r.inp.control_interface is not interface:
            r.inp.control_interface = interface
        return r

    def _scaled(self, limits: Limits) -> Limits:
        """Limits the generator aims for (shrunk by the margin), cached per Limits object."""
        return self._scaled_with_cap(limits)[0]

    def _scaled_with_cap(self, limits: Limits) -> tuple[Limits, np.ndarray]:
        """The scaled limits and the velocity cap targets are kept under."""
        cache = self._scaled_cache
        if cache is None or cache[0] is not limits:
            lim = limits.scaled(1.0 - self.limit_margin)
            cache = self._scaled_cache = (limits, lim, lim.v_max * (1.0 - 1e-3))
        return cache[1], cache[2]

    def _schedule(self, M: int, dt: float) -> _Schedule:
        s = self._schedules.get((M, dt))
        if s is None:
            s = self._schedules[(M, dt)] = _Schedule.create(M, dt, self.stride, self.lookahead)
        return s

    def _calc(self, r: _Dof) -> str | None:
        try:
            res = r.otg.calculate(r.inp, r.traj)
        except RuckigError as exc:
            return str(exc)
        if res not in _OK:
            return f"ruckig: {res}"
        return None

    def track(self, x0: np.ndarray, ref: np.ndarray, dt: float, limits: Limits) -> RuckigResult:
        """x0 [3, D] start state; ref [M, D] reference (row 0 unused). Returns M samples."""
        t0 = time.perf_counter()
        M, D = ref.shape
        if x0.shape != (3, D) or limits.dof != D or M < 2:
            raise TrajectoryError(f"ruckig: shapes x0 {x0.shape}, ref {ref.shape}, limits {limits.dof} do not match")
        r = self._get(D, limits)
        lim, vcap = self._scaled_with_cap(limits)
        plan = self._schedule(M, dt)
        # Target positions inside the position box; target velocities by secants, inside the limit.
        tq = np.minimum(np.maximum(ref, lim.q_min), lim.q_max) if lim.has_position_limits else ref
        tv = np.minimum(np.maximum((tq[plan.hi] - tq[plan.lo]) * plan.inv_span, -vcap), vcap)
        if lim.has_position_limits:  # a target on a position limit is reached at rest: no overshoot past it
            at = tq[plan.target]
            tv = np.where(((at >= lim.q_max) & (tv > 0)) | ((at <= lim.q_min) & (tv < 0)), 0.0, tv)
        tq_l, tv_l = tq[plan.target].tolist(), tv.tolist()
        inp, traj = r.inp, r.traj
        p, v, a = x0.tolist()
        samples: list[float] = []  # q, v, a of each sample, one after the other (the cheapest fill measured)
        put = samples.extend
        put(p), put(v), put(a)
        for n, step in enumerate(plan.steps):
            inp.current_position, inp.current_velocity, inp.current_acceleration = p, v, a
            inp.target_position = tq_l[n]
            inp.target_velocity = tv_l[n]
            err = self._calc(r)
            if err:
                return RuckigResult(_unpack(samples, D), RuckigStatus.FAILED, err, (time.perf_counter() - t0) * 1e3)
            at_time = traj.at_time
            for t in plan.times[step]:
                p, v, a = at_time(t)
                put(p), put(v), put(a)
        out = _unpack(samples, D)
        return RuckigResult(out, RuckigStatus.OK, "", (time.perf_counter() - t0) * 1e3)

    def to_rest(self, x0: np.ndarray, target: np.ndarray | None, dt: float, limits: Limits,
                max_steps: int) -> RuckigResult:
        """Samples after x0 (x0 excluded) of a jerk-limited stop, sampled every dt until at rest.

        With `target` (positions [D]) the joints come to rest there; with None
        they brake to zero velocity wherever that happens (velocity interface).
        """
        t0 = time.perf_counter()
        D = x0.shape[1]
        r = self._get(D, limits, ControlInterface.Position if target is not None else ControlInterface.Velocity)
        inp = r.inp
        inp.current_position, inp.current_velocity, inp.current_acceleration = x0.tolist()
        zero = [0.0] * D
        if target is not None:
            lim = self._scaled(limits)
            inp.target_position = np.clip(target, lim.q_min, lim.q_max).tolist()
        inp.target_velocity = zero
        err = self._calc(r)
        if err:
            return RuckigResult(np.empty((3, 0, D)), RuckigStatus.FAILED, err, (time.perf_counter() - t0) * 1e3)
        duration = r.traj.duration
        n = int(np.ceil(duration / dt - 1e-9))
        status, msg = RuckigStatus.OK, ""
        if n > max_steps:
            n, status = max_steps, RuckigStatus.NOT_AT_REST
            msg = f"needs {duration:.3f} s to stop, budget {max_steps * dt:.3f} s"
        at_time = r.traj.at_time
        samples: list[float] = []
        put = samples.extend
        for i in range(n):
            p, v, a = at_time(min((i + 1) * dt, duration))
            put(p), put(v), put(a)
        out = _unpack(samples, D)
        if n and status is RuckigStatus.OK:
            out[1, -1] = 0.0  # at_time(duration) is at rest up to round-off
            out[2, -1] = 0.0
        return RuckigResult(out, status, msg, (time.perf_counter() - t0) * 1e3)
