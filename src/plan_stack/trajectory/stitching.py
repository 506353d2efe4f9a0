"""Cross-chunk stitching: one ActionChunk in, one executable trajectory out.

How a chunk is checked and laid on the output grid (timeline, lead) is `alignment`'s part; the limits
come from the config by `stitch_limits`.

Stitching. The first `stitch_len` samples of the new trajectory are the active
trajectory sampled at those times (the bridge); the continuous joints are then
optimised from the state at the bridge's end, so position, velocity and
acceleration are continuous at the seam by construction. Without an active
trajectory (first chunk, or the last one has run out and a fresh measurement
exists) the start state is the measured robot state with its velocity and
acceleration.

Safety. Every trajectory is checked against the limits before it is returned:
sample-wise (`check_limits`), then its interpolated curve as published (lead,
stamp, the controller's predicted reference at the stamp) with the bridges'
own check (`trajectory.checks.check_trajectory`, the same function, not a
copy) against the bridge's limits (`bridge_*`, else the stitcher's own). The
MPC's samples are the knots of a piecewise cubic that the quintic reproduces
exactly, and its brake condition keeps the velocity between samples within
v_max; what the samples alone do not bound (a position dipping past a bound
between two samples, the Ruckig profiles' switches between samples) is what
the second check catches. A solver failure or a failed check is never
returned as is: the stitcher falls back to the Ruckig chaser, then to a
jerk-limited stop from the same state, and says so in the result (failed
interpolated checks are counted in `interpolation_rejects`); if nothing
passes, no trajectory is returned and the active one stays in force.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from plan_stack.trajectory.alignment import Aligner, Alignment, Chunk

# The bridges' own trajectory check (ROS-free): the stitcher runs the very function the bridge runs.
from plan_stack.trajectory.checks import Verdict, check_trajectory
from plan_stack.trajectory.config import Backend, StitcherConfig
from plan_stack.trajectory.core import Reference, Trajectory, followed
from plan_stack.trajectory.limits import LimitReport, Limits, TrajectoryError, check_limits
from plan_stack.trajectory.mpc import JointMpc, MpcStatus, MpcWeights
from plan_stack.trajectory.ruckig_filter import RuckigFilter, RuckigStatus
from plan_stack.trajectory.stitch_limits import (
    accept_limits,
    discrete_bounds,
    interpolation_safe,
    joint_columns,
    limits_from_config,
)

__all__ = ["StitchStatus", "StitchResult", "Stitcher", "BRAKE"]

#: Peak speed of a quintic from rest to rest, in units of its mean speed (dp / h). Discrete channels are
#: emitted at rest at every sample (v = a = 0) and step at most rate * dt / this per sample, so the curve a
#: quintic-interpolating controller follows through them never exceeds the rate limit. (Finite-difference
#: velocities overshoot it by about 1.5x where the rate limiter starts or stops.)
_REST_TO_REST_PEAK = 15.0 / 8.0

BRAKE = "brake"  #: the last generator of every chain: a jerk-limited stop from the start state
#: the backends a configured backend falls back to, in order, before the brake
_FALLBACKS: dict[Backend, tuple[Backend, ...]] = {Backend.MPC: (Backend.MPC, Backend.RUCKIG),
                                                  Backend.RUCKIG: (Backend.RUCKIG,)}
#: continuous-joint samples [3 (q, v, a), T, Dc] (None: failed), a message, joints where a bound was active
_Generated = tuple[np.ndarray | None, str, int]
_Generator = Callable[[np.ndarray, np.ndarray, bool], _Generated]


def _rate_limited(start: np.ndarray, targets: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Rows x_i = x_{i-1} + clip(targets_i - x_{i-1}, -step, step) from x_{-1} = start ([n, Dd]).

    A sequential recurrence: run on Python floats, per channel (numpy's per-call overhead on rows of one
    or two values costs ten times more)."""
    out = np.empty(targets.shape)
    for j in range(targets.shape[1]):
        x, s = float(start[j]), float(step[j])
        col = []
        for t in targets[:, j].tolist():
            x += min(max(t - x, -s), s)
            col.append(x)
        out[:, j] = col
    return out


class StitchStatus(enum.Enum):
    OK = "ok"  # the configured backend's trajectory passed the limit check
    FALLBACK = "fallback"  # the primary failed or violated a limit; a fallback passed
    FAILED = "failed"  # nothing passed: no trajectory, the active one continues


@dataclasses.dataclass(frozen=True)
class StitchResult:
    trajectory: Trajectory | None
    status: StitchStatus
    generator: str  # what produced the trajectory: mpc, ruckig, brake, or "" when FAILED
    solve_ms: float
    report: LimitReport | None
    trimmed_steps: int  # chunk samples skipped because their time had passed
    bridge_len: int  # samples copied from the active trajectory (1 = start state only)
    constrained_joints: int  # MPC joints where a bound was active (OSQP ran)
    seam_jump: tuple[float, float, float]  # max |Δq|, |Δv|, |Δa| against the execution state at sample 0
    messages: tuple[str, ...]
    clamped_samples: int = 0  # reference samples beyond a position limit (within tolerance, or saturating) clamped
    lead_s: float = 0.0  # publish with this lead (stamp = first point's time - lead_s): the lead less its samples
    interpolation_rejects: int = 0  # generated trajectories refused by the bridge's check of the interpolated curve


class Stitcher:
    """Turns chunks into limit-checked trajectories that join the one being executed.

    `lead_s`: the message is stamped this long before its first new sample (see the module doc, "Lead").
    Not thread-safe: call `process` from one thread (the node's chunk callback).
    """

    def __init__(self, cfg: StitcherConfig, lead_s: float = 0.0) -> None:
        if not (math.isfinite(lead_s) and lead_s >= 0.0):
            raise TrajectoryError(f"lead_s: must be finite and >= 0, got {lead_s!r}")
        self.cfg = cfg
        self.lead_s = float(lead_s)
        self.limits, self.discrete_rate = limits_from_config(cfg)
        self.accept_limits = accept_limits(cfg)
        self._ruckig_limits = interpolation_safe(self.limits, cfg.dt)
        self._d_lo, self._d_hi = discrete_bounds(cfg)
        self._cidx, self._didx = joint_columns(cfg)
        lim = self.limits
        # the brake condition's coefficient c = a_max / 2 j_max and the v, a limits with round-off slack
        self._brake_test = (lim.a_max / (2.0 * lim.j_max), lim.v_max * (1.0 + 1e-9), lim.a_max * (1.0 + 1e-9))
        # Column selector of the continuous joints: a slice (a view, no copy) when they are all of them.
        all_joints = np.array_equal(self._cidx, np.arange(len(cfg.joint_names)))
        self._c = slice(None) if all_joints else self._cidx
        weights = MpcWeights(cfg.w_tracking, cfg.w_velocity, cfg.w_acceleration, cfg.w_jerk, cfg.w_terminal,
                             cfg.w_stop_velocity, cfg.w_stop_acceleration)
        self._mpc = JointMpc(weights, cfg.limit_margin, cfg.osqp_eps, cfg.osqp_max_iter, qp_solver=cfg.qp_solver,
                             blocking=(cfg.mpc_free_steps, cfg.mpc_block))
        self._ruckig = RuckigFilter(cfg.limit_margin, cfg.ruckig_stride, cfg.ruckig_lookahead)
        #: the backends' trajectory generators (each then settles in settle mode); `_brake` ends every chain
        self._generators: dict[Backend, _Generator] = {Backend.MPC: self._mpc_samples,
                                                       Backend.RUCKIG: self._ruckig_samples}
        self._aligner = Aligner(cfg, self.lead_s)
        self._active: Trajectory | None = None

    @property
    def active(self) -> Trajectory | None:
        """What the controller follows from the trajectory emitted last (what the robot is executing): the
        trajectory itself, or, when its stamp precedes its first point, that trajectory joined from the predicted
        reference at the stamp (`core.followed`), the curve its check passed."""
        return self._active

    def prepare(self, horizon: int) -> None:
        """Build the MPC data for every optimisation length a chunk of `horizon` samples can
        need (trimming shortens it), so no chunk pays for a set-up. Call at start-up."""
        if self.cfg.backend != "mpc":
            return
        for m in range(2, max(2, int(horizon)) + 1):
            self._mpc.shape(m - 1, self.cfg.dt, self.cfg.mode == "settle")

    def reset(self) -> None:
        """Forget the active trajectory (the next chunk starts from a measured state)."""
        self._active = None

    def adopt(self, traj: Trajectory | None) -> None:
        """Stitch the next chunk onto `traj` (config joint order, any point times): what the robot executes
        when that is not the trajectory emitted last (the controller refused it). None = `reset`."""
        if traj is not None and traj.joint_names != self.cfg.joint_names:
            raise TrajectoryError(f"joint_names: expected {list(self.cfg.joint_names)}, got {list(traj.joint_names)}")
        self._active = traj

    # --- input (`alignment.Aligner`) ---------------------------------------------

    def validate(self, chunk: Chunk, now_s: float) -> tuple[np.ndarray, int]:
        """`Aligner.validate`: the chunk's positions [H, D] in config joint order (clamped where allowed) and
        how many samples were clamped. Raises ChunkError."""
        return self._aligner.validate(chunk, now_s)

    def check_reported(self, traj: Trajectory, now_s: float) -> None:
        """`Aligner.check_reported`: raise TrajectoryError unless `traj` can be stitched onto."""
        self._aligner.check_reported(traj, now_s)

    def align(self, chunk: Chunk, R: np.ndarray, now_s: float,
              measured: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> Alignment:
        """`Aligner.align` onto the active trajectory. Raises ChunkError."""
        return self._aligner.align(chunk, R, now_s, measured, self._active)

    # --- main entry -----------------------------------------------------------------

    def process(self, chunk: Chunk, now_s: float,
                measured: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> StitchResult:
        """Stitch one chunk at execution time `now_s`: validate, align, solve.

        `measured` = (q, v, a) [D] in config joint order, the robot's state;
        used when no trajectory is active or the active one has ended. Raises
        ChunkError for input that must not become motion.
        """
        t_begin = time.perf_counter()
        R, clamped = self.validate(chunk, now_s)
        al = self.align(chunk, R, now_s, measured)
        return self.solve(al, t_begin, clamped)

    def solve(self, al: Alignment, t_begin: float | None = None, clamped: int = 0) -> StitchResult:
        """Generate from the alignment's start state down the fallback chain (configured backend,
        Ruckig, brake) and return the first trajectory that passes the limit check; it becomes the
        active one. FAILED (and the active one unchanged) when none passes."""
        if t_begin is None:
            t_begin = time.perf_counter()
        cfg = self.cfg
        c = self._c
        bq, bv, ba = al.bridge
        S = al.bridge_len
        x0 = al.x_end[:, c]
        ref_c = al.reference[S - 1:, c]
        settle = cfg.mode == "settle"
        messages: list[str] = []
        if clamped:
            messages.append(f"{clamped} reference samples beyond the position limits (within "
                            f"position_tolerance, or of saturate_joints) clamped to the limit")
        constrained = 0
        rejects = 0
        chain: list[str] = [*_FALLBACKS[cfg.backend], BRAKE]
        limits = self.limits
        brake_limits = self._brake_limits(x0)
        if brake_limits is not None:
            # A start outside the limits (a measured state, or a bridge over samples of another
            # trajectory) makes every generator's problem infeasible: go straight to the brake, checked
            # against limits widened only by the start's own excess (it can only shrink from there).
            messages.append("infeasible start: the start state exceeds the limits; braking")
            chain, limits = [BRAKE], brake_limits
            accept = self._widened(brake_limits)
        else:
            accept = self.accept_limits
        for attempt, gen in enumerate(chain):
            out, msg, n_con = self._generate(gen, x0, ref_c, settle)
            constrained = max(constrained, n_con)
            if out is None:
                messages.append(f"{gen}: {msg}")
                continue
            if msg:
                messages.append(f"{gen}: {msg}")
            traj = self._assemble(al.t_start, bq, bv, ba, out, al.reference, S, settle and gen != BRAKE)
            v, a = traj.velocities, traj.accelerations
            assert v is not None and a is not None  # the stitcher's trajectories carry both
            rep = check_limits(cfg.dt, traj.positions[:, c], v[:, c], a[:, c],
                               limits, traj.positions[:, self._didx] if len(self._didx) else None,
                               self.discrete_rate)
            if rep.ok:
                traj, lead_s, verdict, followed_curve = self._as_published(traj, al, accept)
                if not verdict.ok:
                    rejects += 1
                    messages.append(f"{gen}: the interpolated curve fails the bridge's check: {verdict.message}")
                    continue
                self._active = followed_curve
                return StitchResult(
                    traj, StitchStatus.OK if attempt == 0 and brake_limits is None else StitchStatus.FALLBACK, str(gen),
                    (time.perf_counter() - t_begin) * 1e3, rep, al.trimmed, S, constrained,
                    self._seam_jump(traj, al.exec_state, round((al.t_start - traj.t0_s) / cfg.dt)),
                    tuple(messages), clamped, lead_s, rejects)
            messages.append(f"{gen}: limit check failed (v {rep.v_ratio:.4f}, a {rep.a_ratio:.4f}, "
                            f"j {rep.j_ratio:.4f}, q out by {rep.q_violation:.2e}, rate {rep.rate_ratio:.4f})")
        return StitchResult(None, StitchStatus.FAILED, "", (time.perf_counter() - t_begin) * 1e3, None, al.trimmed,
                            S, constrained, (0.0, 0.0, 0.0), tuple(messages), clamped, self.lead_s, rejects)

    def _widened(self, brake_limits: Limits) -> Limits:
        """The accept limits widened where the brake's are (an infeasible start: the stop from it is checked
        against what braking from there reaches, as the sample check does)."""
        acc, c = self.accept_limits, self._cidx
        v, a, lo, hi = (np.array(x, dtype=float) for x in (acc.v_max, acc.a_max, acc.q_min, acc.q_max))
        v[c] = np.maximum(v[c], brake_limits.v_max)
        a[c] = np.maximum(a[c], brake_limits.a_max)
        lo[c] = np.minimum(lo[c], brake_limits.q_min)
        hi[c] = np.maximum(hi[c], brake_limits.q_max)
        return Limits.for_joints(acc.joint_names, lo, hi, v, a, acc.j_max)

    def _as_published(self, traj: Trajectory, al: Alignment, accept: Limits
                      ) -> tuple[Trajectory, float, Verdict, Trajectory]:
        """(the trajectory with the lead's samples in front, the lead left to publish with, the bridge's verdict
        on it as published: stamped `lead_s` before sample 0, joined from the predicted reference where the
        controller activates it; the curve the controller then follows: the trajectory itself when its first point
        is due at the stamp, else with that join in front, `core.followed`)."""
        dt = self.cfg.dt
        n_lead = 0 if al.lead is None else len(al.lead[0])
        if n_lead:
            assert al.lead is not None and traj.velocities is not None and traj.accelerations is not None
            traj = Trajectory.on_grid(traj.t0_s - n_lead * dt, dt, traj.joint_names,
                                      np.concatenate([al.lead[0], traj.positions]),
                                      np.concatenate([al.lead[1], traj.velocities]),
                                      np.concatenate([al.lead[2], traj.accelerations]))
        lead_s = max(0.0, self.lead_s - n_lead * dt)  # 0 once the samples reach back over the whole lead
        stamp = traj.t0_s - lead_s
        published = Trajectory(traj.joint_names, stamp, traj.times_s + lead_s, traj.positions, traj.velocities,
                               traj.accelerations)
        init = al.initial if al.initial is not None else al.exec_state
        initial = Reference(init[0], init[1], init[2], True)
        activation = stamp if al.activation_s is None else max(stamp, al.activation_s)
        verdict = check_trajectory(published, self.cfg.joint_names, accept, activation, initial)
        if lead_s == 0.0 and activation == stamp:  # the first point is due at the stamp: the grid is the curve
            return traj, lead_s, verdict, traj
        return traj, lead_s, verdict, followed(published, stamp, initial, activation)

    def _brake_limits(self, x0: np.ndarray) -> Limits | None:
        """None when the start state x0 [3, Dc] lies inside the limits and satisfies the brake condition
        |v + c a| <= v_max (c = a_max / 2 j_max: a jerk-limited stop stays inside v_max), as every sample
        this stitcher emits does; otherwise the limits widened to what braking from x0 reaches."""
        lim = self.limits
        if not x0.shape[1]:
            return None
        q, v, a = x0
        c, v_tol, a_tol = self._brake_test
        q_out = (q < lim.q_min) | (q > lim.q_max)  # e.g. a measured gripper a hair below its range
        if ((np.abs(v) <= v_tol).all() and (np.abs(a) <= a_tol).all() and (np.abs(v + c * a) <= v_tol).all()
                and not q_out.any()):
            return None
        # Braking from (v, a): the speed still grows by a^2 / 2 j while a pushes it outward (j: the
        # brake's jerk, the limit less the generators' margin).
        j = lim.j_max * (1.0 - self.cfg.limit_margin)
        v_peak = np.abs(v) + np.where(v * a > 0, a * a / (2.0 * j), 0.0)
        widen = 1.0 + 1e-6
        # A joint that starts outside its position range may stay there while it brakes (the stop is the
        # only motion; the next chunk starts from where it ends).
        return Limits.create(lim.dof, np.maximum(lim.v_max, v_peak * widen), np.maximum(lim.a_max, np.abs(a) * widen),
                             lim.j_max, np.where(q_out, -np.inf, lim.q_min), np.where(q_out, np.inf, lim.q_max))

    def _seam_jump(self, traj: Trajectory, exec_state: np.ndarray, k: int = 0) -> tuple[float, float, float]:
        """Max |Δq|, |Δv|, |Δa| of sample k (the first new one, after the lead's) against the execution
        state. Discrete channels join in position only (they are at rest at every sample)."""
        c = self._c
        v, a = traj.velocities, traj.accelerations
        assert v is not None and a is not None  # the stitcher's trajectories carry both
        diff = np.abs(np.array([traj.positions[k], v[k], a[k]]) - exec_state)
        return (float(diff[0].max(initial=0.0)), float(diff[1, c].max(initial=0.0)),
                float(diff[2, c].max(initial=0.0)))

    # --- generators -------------------------------------------------------------------

    def _generate(self, gen: str, x0: np.ndarray, ref_c: np.ndarray, settle: bool) -> _Generated:
        """Continuous-joint samples [3 (q, v, a), T, Dc] starting with x0, or (None, why, n): `gen` is a backend
        (its generator, then in settle mode a tail to rest) or `BRAKE`."""
        if x0.shape[1] == 0:  # only discrete joints
            return np.zeros((3, len(ref_c), 0)), "", 0
        if gen == BRAKE:
            return self._brake(x0)
        X, msg, n_con = self._generators[Backend(gen)](x0, ref_c, settle)
        if X is None or not settle:
            return X, msg, n_con
        dt = self.cfg.dt
        tail = self._ruckig.to_rest(X[:, -1], ref_c[-1], dt, self._ruckig_limits,
                                    max_steps=max(1, round(self.cfg.settle_max_s / dt)))
        if tail.status is RuckigStatus.FAILED:
            return None, f"settle tail: {tail.message}", n_con
        if tail.status is RuckigStatus.NOT_AT_REST:
            msg = f"settle tail {tail.message}"
        return np.concatenate([X, tail.states], axis=1), msg, n_con

    def _mpc_samples(self, x0: np.ndarray, ref_c: np.ndarray, settle: bool) -> _Generated:
        """The joint MPC tracking ref_c [T, Dc] from x0 [3, Dc] (n: joints where a bound was active)."""
        r = self._mpc.solve(x0, ref_c, self.cfg.dt, self.limits, settle)
        n_con = len(r.constrained_joints)
        if r.status is not MpcStatus.OK:
            return None, (f"QP ({self.cfg.qp_solver}) infeasible or not solved for continuous joints "
                          f"{list(r.failed_joints)}"), n_con
        return r.states, "", n_con

    def _ruckig_samples(self, x0: np.ndarray, ref_c: np.ndarray, settle: bool) -> _Generated:
        """The Ruckig chaser following ref_c [T, Dc] from x0 [3, Dc] (limits safe for the interpolation)."""
        r = self._ruckig.track(x0, ref_c, self.cfg.dt, self._ruckig_limits)
        if r.status is not RuckigStatus.OK:
            return None, r.message, 0
        return r.states, "", 0

    def _brake(self, x0: np.ndarray) -> _Generated:
        """A jerk-limited stop from x0 [3, Dc], the reference ignored: x0 then the stop's samples."""
        dt = self.cfg.dt
        r = self._ruckig.to_rest(x0, None, dt, self._ruckig_limits, max_steps=max(1, round(self.cfg.settle_max_s / dt)))
        if r.status is RuckigStatus.FAILED:
            return None, r.message, 0
        return np.concatenate([x0[:, None], r.states], axis=1), r.message, 0

    def _assemble(self, t_start: float, bq: np.ndarray, bv: np.ndarray, ba: np.ndarray, cont: np.ndarray, ref: Any,
                  S: int, settle: bool = False) -> Trajectory:
        """Bridge rows + generated continuous rows + rate-limited discrete rows (at rest at every sample,
        so that the interpolated curve stays within the rate limit).

        In settle mode, when the continuous joints end at rest, rows holding them are
        appended until the discrete channels have reached their final reference too
        (within `settle_max_s`).
        """
        cfg = self.cfg
        q_c, v_c, a_c = cont
        c, d = self._c, self._didx
        n_c = len(q_c)
        T = S - 1 + n_c
        if not len(d) and S == 1:  # the common case: nothing to copy or rate-limit
            return Trajectory.on_grid(t_start, cfg.dt, cfg.joint_names, q_c, v_c, a_c)
        step = self.discrete_rate * cfg.dt / _REST_TO_REST_PEAK
        Pd = np.empty((T, len(d)))
        if len(d):
            target_d = np.minimum(np.maximum(ref[np.minimum(np.arange(T), len(ref) - 1)][:, d], self._d_lo),
                                  self._d_hi)
            Pd[:S] = bq[:, d]
            Pd[S:] = _rate_limited(Pd[S - 1], target_d[S:], step)
        extra = 0
        if settle and len(d) and not np.any(v_c[-1]) and not np.any(a_c[-1]):
            final_d = np.minimum(np.maximum(ref[-1, d], self._d_lo), self._d_hi)
            gap = float(np.max(np.abs(final_d - Pd[-1]) / step, initial=0.0))
            extra = min(math.ceil(gap - 1e-9), round(cfg.settle_max_s / cfg.dt))
            tail = _rate_limited(Pd[-1], np.broadcast_to(final_d, (extra, len(d))), step)
            Pd = np.vstack([Pd, tail])
        T += extra
        D = len(cfg.joint_names)
        P = np.empty((T, D))
        V = np.empty((T, D))
        A = np.empty((T, D))
        P[:S], V[:S], A[:S] = bq, bv, ba
        P[S - 1:S - 1 + n_c, c], V[S - 1:S - 1 + n_c, c], A[S - 1:S - 1 + n_c, c] = q_c, v_c, a_c
        if extra:  # hold the continuous joints at rest while the discrete ones finish
            P[S - 1 + n_c:, c], V[S - 1 + n_c:, c], A[S - 1 + n_c:, c] = q_c[-1], 0.0, 0.0
        if len(d):
            P[:, d] = Pd
            V[:, d] = 0.0  # at rest at every sample: see _REST_TO_REST_PEAK
            A[:, d] = 0.0
        return Trajectory.on_grid(t_start, cfg.dt, cfg.joint_names, P, V, A)
