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

import numpy as np
from ruckig import ControlInterface, InputParameter, Result, Ruckig, RuckigError, Synchronization, Trajectory

from plan_stack.trajectory.limits import Limits, TrajectoryError

__all__ = ["RuckigStatus", "RuckigResult", "RuckigFilter"]


class RuckigStatus(enum.Enum):
    OK = "ok"
    FAILED = "failed"  # Ruckig rejected the input or could not compute a profile
    NOT_AT_REST = "not_at_rest"  # a tail did not reach rest within its step budget


@dataclasses.dataclass(frozen=True)
class RuckigResult:
    positions: np.ndarray  # [T, D]
    velocities: np.ndarray
    accelerations: np.ndarray
    status: RuckigStatus
    message: str
    solve_ms: float


class _Dof:
    """Ruckig objects for one number of DoF, allocated once."""

    def __init__(self, dof: int) -> None:
        self.otg = Ruckig(dof)
        self.inp = InputParameter(dof)
        self.inp.synchronization = Synchronization.No  # joints are independent (DESIGN §6)
        self.traj = Trajectory(dof)
        self.limits: Limits | None = None  # limits currently loaded into inp


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
        self._scaled_for: Limits | None = None
        self._scaled_lim: Limits | None = None

    def _get(self, dof: int, limits: Limits, interface=ControlInterface.Position) -> _Dof:
        r = self._dofs.get(dof)
        if r is None:
            r = self._dofs[dof] = _Dof(dof)
        if r.limits is not limits:
            lim = self._scaled(limits)
            r.inp.max_velocity = lim.v_max.tolist()
            r.inp.max_acceleration = lim.a_max.tolist()
            r.inp.max_jerk = lim.j_max.tolist()
            r.limits = limits
        r.inp.control_interface = interface
        return r

    def _scaled(self, limits: Limits) -> Limits:
        """Limits the generator aims for (shrunk by the margin), cached per Limits object."""
        if self._scaled_for is not limits:
            self._scaled_for, self._scaled_lim = limits, limits.scaled(1.0 - self.limit_margin)
        return self._scaled_lim

    def _calc(self, r: _Dof) -> str | None:
        try:
            res = r.otg.calculate(r.inp, r.traj)
        except RuckigError as exc:
            return str(exc)
        if res not in (Result.Working, Result.Finished):
            return f"ruckig: {res}"
        return None

    def track(self, x0: np.ndarray, ref: np.ndarray, dt: float, limits: Limits) -> RuckigResult:
        """x0 [3, D] start state; ref [M, D] reference (row 0 unused). Returns M samples."""
        t0 = time.perf_counter()
        M, D = ref.shape
        if x0.shape != (3, D) or limits.dof != D or M < 2:
            raise TrajectoryError(f"ruckig: shapes x0 {x0.shape}, ref {ref.shape}, limits {limits.dof} do not match")
        r = self._get(D, limits)
        lim = self._scaled(limits)
        vcap = lim.v_max * (1.0 - 1e-3)
        # Target positions inside the position box; target velocities by finite differences.
        tq = np.clip(ref, lim.q_min, lim.q_max) if lim.has_position_limits else ref
        L = self.lookahead
        starts = np.arange(0, M - 1, self.stride)
        tgt = np.minimum(starts + L, M - 1)  # the sample each recomputation aims at
        hi = np.minimum(tgt + 1, M - 1)
        lo = np.maximum(tgt - L, 0)
        tv = np.clip((tq[hi] - tq[lo]) / ((hi - lo)[:, None] * dt), -vcap, vcap)
        tq_l, tv_l = tq[tgt].tolist(), tv.tolist()
        zero = [0.0] * D
        P, V, A = x0[0].tolist(), x0[1].tolist(), x0[2].tolist()  # flat, row after row
        inp = r.inp
        inp.current_position, inp.current_velocity, inp.current_acceleration = P, V, A
        P, V, A = list(P), list(V), list(A)
        inp.target_acceleration = zero
        for n, k in enumerate(starts.tolist()):
            step = min(self.stride, M - 1 - k)
            inp.target_position = tq_l[n]
            inp.target_velocity = tv_l[n]
            err = self._calc(r)
            if err:
                return RuckigResult(np.reshape(P, (-1, D)), np.reshape(V, (-1, D)), np.reshape(A, (-1, D)),
                                    RuckigStatus.FAILED, err, (time.perf_counter() - t0) * 1e3)
            at_time = r.traj.at_time
            for i in range(1, step + 1):
                p, v, a = at_time(i * dt)
                P.extend(p)
                V.extend(v)
                A.extend(a)
            inp.current_position, inp.current_velocity, inp.current_acceleration = p, v, a
        out = np.stack([np.fromiter(x, float, M * D) for x in (P, V, A)]).reshape(3, M, D)
        return RuckigResult(out[0], out[1], out[2], RuckigStatus.OK, "", (time.perf_counter() - t0) * 1e3)

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
        inp.target_acceleration = zero
        inp.minimum_duration = None
        err = self._calc(r)
        if err:
            empty = np.empty((0, D))
            return RuckigResult(empty, empty, empty, RuckigStatus.FAILED, err, (time.perf_counter() - t0) * 1e3)
        duration = r.traj.duration
        n = int(np.ceil(duration / dt - 1e-9))
        status, msg = RuckigStatus.OK, ""
        if n > max_steps:
            n, status = max_steps, RuckigStatus.NOT_AT_REST
            msg = f"needs {duration:.3f} s to stop, budget {max_steps * dt:.3f} s"
        at_time = r.traj.at_time
        rows = [at_time(min((i + 1) * dt, duration)) for i in range(n)]
        out = np.array(rows, dtype=float).transpose(1, 0, 2) if n else np.empty((3, 0, D))
        if n and status is RuckigStatus.OK:
            out[1, -1] = 0.0  # at_time(duration) is at rest up to round-off
            out[2, -1] = 0.0
        return RuckigResult(out[0], out[1], out[2], status, msg, (time.perf_counter() - t0) * 1e3)
