"""Cross-chunk stitching: one ActionChunk in, one executable trajectory out.

Timeline. The stitcher keeps the trajectory it emitted last (the *active*
one: what was sent and when sample 0 is due). A new chunk is aligned to the
active trajectory's sample grid (period `dt`), so samples that are already
being executed are copied, never resampled; its reference is read off the
chunk by linear interpolation at those grid times (exact when the grids
coincide, as they do when the chunker and the stitcher share `dt`). The first
new sample is the first grid time no earlier than now (+ command latency) and
no earlier than the chunk's stamp: a late chunk is trimmed by the elapsed
time, never replayed from its start.

Stitching. The first `stitch_len` samples of the new trajectory are the active
trajectory sampled at those times (the bridge); the continuous joints are then
optimised from the state at the bridge's end, so position, velocity and
acceleration are continuous at the seam by construction. Without an active
trajectory (first chunk, or the last one has run out and a fresh measurement
exists) the start state is the measured robot state with its velocity and
acceleration.

Lead. With a lead (`lead_s`, the node's `point_lead_s`) the message is
stamped that long before its first new sample, and the controller joins its
reference to the first point due after it activates the trajectory with one
quintic. Over a whole lead that one quintic replaces several segments of the
trajectory being executed and can overshoot their limits; so the samples of
the active trajectory on the grid times inside the lead, and back to the last
grid time at or before now, are emitted too (copied, never resampled): the
controller then joins over at most a part of one segment, whose quintic
through the same knots is the curve it already follows, and the stamp stays
at or before now.

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
from collections.abc import Sequence

import numpy as np

# The bridges' own trajectory check (ROS-free): the stitcher runs the very function the bridge runs.
from plan_stack.trajectory.checks import Verdict, check_trajectory
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.core import GRID_EPS as _TIME_EPS
from plan_stack.trajectory.core import Reference, Trajectory
from plan_stack.trajectory.limits import LimitReport, Limits, TrajectoryError, check_limits
from plan_stack.trajectory.mpc import JointMpc, MpcResult, MpcStatus, MpcWeights
from plan_stack.trajectory.ruckig_filter import RuckigFilter, RuckigResult, RuckigStatus

__all__ = [
    "ChunkError", "Chunk", "Trajectory", "StitchStatus", "StitchResult", "Alignment", "Stitcher",
    "limits_from_config", "discrete_bounds", "accept_limits",
]

#: Peak speed of a quintic from rest to rest, in units of its mean speed (dp / h). Discrete channels are
#: emitted at rest at every sample (v = a = 0) and step at most rate * dt / this per sample, so the curve a
#: quintic-interpolating controller follows through them never exceeds the rate limit. (Finite-difference
#: velocities overshoot it by about 1.5x where the rate limiter starts or stops.)
_REST_TO_REST_PEAK = 15.0 / 8.0


class ChunkError(TrajectoryError):
    """A chunk that must not become motion. `reason` is a short machine-readable code:
    `shape`, `non_finite`, `joint_names`, `dt`, `horizon`, `future`, `stale`, `position_limits`,
    `no_state`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A policy's reference: positions [H, D] due at stamp_s + k·dt_s."""

    stamp_s: float
    joint_names: tuple[str, ...]
    dt_s: float
    positions: np.ndarray

    @classmethod
    def from_flat(cls, stamp_s: float, joint_names: Sequence[str], dt_s: float, horizon: int,
                  flat: Sequence[float]) -> Chunk:
        """Build from the ActionChunk layout (H×D row-major). Raises ChunkError on a shape mismatch."""
        names = tuple(joint_names)
        values = np.asarray(flat, dtype=float)
        if not names:
            raise ChunkError("joint_names", "chunk lists no joints")
        if horizon < 1 or values.size != horizon * len(names):
            raise ChunkError("shape", f"{values.size} positions for horizon {horizon} x {len(names)} joints")
        return cls(float(stamp_s), names, float(dt_s), values.reshape(horizon, len(names)))


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


@dataclasses.dataclass(frozen=True)
class Alignment:
    """A validated chunk laid on the output grid: what `Stitcher.solve` needs, nothing about the chunk."""

    t_start: float  # when output sample 0 is due
    reference: np.ndarray  # [n, D] reference at the output grid times from t_start, config joint order
    bridge_len: int  # S: samples copied from the active trajectory (1 = start state only)
    trimmed: int  # chunk samples skipped because their time had passed
    bridge: tuple[np.ndarray, np.ndarray, np.ndarray]  # (q, v, a) [S, D] of the bridge samples
    exec_state: np.ndarray  # [3, D] what is executing at t_start (for the seam check)
    x_end: np.ndarray  # [3, D] the optimisation's start state (the bridge's last sample)
    #: (q, v, a) [L, D]: the active trajectory's samples on the grid times inside the lead (before t_start)
    lead: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    initial: np.ndarray | None = None  # [3, D] the controller's predicted reference at the message's stamp


def _per_joint(value, cfg: StitcherConfig, idx: np.ndarray, n_sub: int):
    """Pick a scalar / all-joints / subset-length parameter for the joints in idx."""
    if not isinstance(value, tuple):
        return float(value)
    if len(value) == 0:
        return None
    if len(value) == 1:
        return float(value[0])
    arr = np.asarray(value, dtype=float)
    return arr[idx] if len(arr) == len(cfg.joint_names) and len(arr) != n_sub else arr


def joint_columns(cfg: StitcherConfig) -> tuple[np.ndarray, np.ndarray]:
    """Columns (in `joint_names` order) of the continuous and of the discrete joints."""
    return (np.array([cfg.joint_names.index(j) for j in cfg.continuous_joints], dtype=int),
            np.array([cfg.joint_names.index(j) for j in cfg.discrete_joints], dtype=int))


def limits_from_config(cfg: StitcherConfig) -> tuple[Limits, np.ndarray]:
    """Limits of the continuous joints and the rate limits [Dd] of the discrete ones."""
    cidx, didx = joint_columns(cfg)
    nc = len(cidx)
    lim = Limits.create(nc, _per_joint(cfg.v_max, cfg, cidx, nc), _per_joint(cfg.a_max, cfg, cidx, nc),
                        _per_joint(cfg.j_max, cfg, cidx, nc), _per_joint(cfg.q_min, cfg, cidx, nc),
                        _per_joint(cfg.q_max, cfg, cidx, nc))
    rate = np.broadcast_to(np.asarray(_per_joint(cfg.discrete_rate, cfg, didx, len(didx)), dtype=float),
                           (len(didx),)).copy()
    return lim, rate


def accept_limits(cfg: StitcherConfig) -> Limits:
    """Per-joint limits (joint_names order) the interpolated curve of every trajectory must satisfy: the
    bridge's (`bridge_*`) where given, else the stitcher's own (discrete joints: the rate limit as velocity,
    no acceleration limit), and no jerk limit unless `bridge_j_max` gives one (the sample check bounds jerk)."""
    lim, rate = limits_from_config(cfg)
    cidx, didx = joint_columns(cfg)
    d_lo, d_hi = discrete_bounds(cfg)
    D = len(cfg.joint_names)
    v, a, lo, hi = np.empty(D), np.empty(D), np.empty(D), np.empty(D)
    v[cidx], a[cidx], lo[cidx], hi[cidx] = lim.v_max, lim.a_max, lim.q_min, lim.q_max
    v[didx], a[didx], lo[didx], hi[didx] = rate, np.inf, d_lo, d_hi
    given = {name: np.asarray(getattr(cfg, f"bridge_{name}"), dtype=float) for name in
             ("v_max", "a_max", "j_max", "q_min", "q_max")}
    pick = {name: given[name] if given[name].size else own for name, own in
            (("v_max", v), ("a_max", a), ("j_max", np.full(D, np.inf)), ("q_min", lo), ("q_max", hi))}
    return Limits.for_joints(cfg.joint_names, pick["q_min"], pick["q_max"], pick["v_max"], pick["a_max"],
                             pick["j_max"])


#: Worst-case excess of the quintic through the samples of a jerk-limited profile over the profile itself,
#: per switch of the jerk between two samples (from +j_max to -j_max, anywhere in the period), in units of
#: j_max·dt (acceleration), j_max·dt² (velocity) and j_max·dt³ (position); computed on a fine grid of switch
#: times (0.125, 0.0095, 0.0026), rounded up and doubled for two switches in one period.
_QUINTIC_EXCESS = (0.25, 0.02, 0.006)


def interpolation_safe(lim: Limits, dt: float) -> Limits:
    """`lim` less the quintic interpolant's worst-case excess over a jerk-limited profile sampled every dt:
    the limits the Ruckig generators run with, whose switches fall between samples (the MPC's constant jerk
    per period needs none). Never below half of a limit."""
    ka, kv, kq = (k * lim.j_max * dt ** p for k, p in zip(_QUINTIC_EXCESS, (1, 2, 3), strict=True))
    v = np.maximum(lim.v_max - kv, 0.5 * lim.v_max)
    a = np.maximum(lim.a_max - ka, 0.5 * lim.a_max)
    span = np.where(np.isfinite(lim.q_max - lim.q_min), lim.q_max - lim.q_min, np.inf)
    inset = np.minimum(kq, 0.25 * span)
    return Limits.create(lim.dof, v, a, lim.j_max, lim.q_min + inset, lim.q_max - inset)


def discrete_bounds(cfg: StitcherConfig) -> tuple[np.ndarray, np.ndarray]:
    """Position bounds [Dd] of the discrete joints: from q_min/q_max when those list every joint, else none."""
    _, didx = joint_columns(cfg)
    if len(cfg.q_min) == len(cfg.joint_names):
        return np.asarray(cfg.q_min, float)[didx], np.asarray(cfg.q_max, float)[didx]
    return np.full(len(didx), -np.inf), np.full(len(didx), np.inf)


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
        # Columns checked against position bounds (continuous, then discrete) and which of them saturate.
        self._bounded_cols = np.concatenate([self._cidx, self._didx])
        self._saturate = np.array([cfg.joint_names[i] in cfg.saturate_joints for i in self._bounded_cols], bool)
        lim = self.limits
        # the brake condition's coefficient c = a_max / 2 j_max and the v, a limits with round-off slack
        self._brake_test = (lim.a_max / (2.0 * lim.j_max), lim.v_max * (1.0 + 1e-9), lim.a_max * (1.0 + 1e-9))
        # the bounded columns' position bounds (None when no column has any), fixed with the limits
        self._col_bounds: tuple[np.ndarray, np.ndarray] | None = None
        if lim.has_position_limits or np.isfinite(self._d_lo).any() or np.isfinite(self._d_hi).any():
            self._col_bounds = (np.concatenate([np.broadcast_to(lim.q_min, (lim.dof,)), self._d_lo]),
                                np.concatenate([np.broadcast_to(lim.q_max, (lim.dof,)), self._d_hi]))
        # Column selector of the continuous joints: a slice (a view, no copy) when they are all of them.
        all_joints = np.array_equal(self._cidx, np.arange(len(cfg.joint_names)))
        self._c = slice(None) if all_joints else self._cidx
        weights = MpcWeights(cfg.w_tracking, cfg.w_velocity, cfg.w_acceleration, cfg.w_jerk, cfg.w_terminal,
                             cfg.w_stop_velocity, cfg.w_stop_acceleration)
        self._mpc = JointMpc(weights, cfg.limit_margin, cfg.osqp_eps, cfg.osqp_max_iter, qp_solver=cfg.qp_solver,
                             blocking=(cfg.mpc_free_steps, cfg.mpc_block))
        self._ruckig = RuckigFilter(cfg.limit_margin, cfg.ruckig_stride, cfg.ruckig_lookahead)
        self._active: Trajectory | None = None

    @property
    def active(self) -> Trajectory | None:
        """The trajectory emitted last (what the robot is executing)."""
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

    # --- input ------------------------------------------------------------------

    def validate(self, chunk: Chunk, now_s: float) -> tuple[np.ndarray, int]:
        """(chunk positions [H, D] in config joint order with samples beyond a position limit clamped to it,
        how many were clamped: those within `position_tolerance`, and any of `saturate_joints`). Raises
        ChunkError on input that must not become motion: bad names, shape, dt, non-finite values, a length
        outside [min_horizon, max_horizon], a stamp more than `max_chunk_lead_s` ahead or `max_chunk_age_s`
        behind now, samples of other joints beyond the position limits by more than `position_tolerance`."""
        cfg = self.cfg
        if not (math.isfinite(chunk.dt_s) and chunk.dt_s > 0):
            raise ChunkError("dt", f"sample period must be finite and > 0, got {chunk.dt_s!r}")
        if not math.isfinite(chunk.stamp_s):
            raise ChunkError("non_finite", f"stamp is {chunk.stamp_s!r}")
        same_order = chunk.joint_names == cfg.joint_names
        if not same_order and (len(chunk.joint_names) != len(cfg.joint_names)
                               or set(chunk.joint_names) != set(cfg.joint_names)):
            missing = sorted(set(cfg.joint_names) - set(chunk.joint_names))
            extra = sorted(set(chunk.joint_names) - set(cfg.joint_names))
            dup = sorted({j for j in chunk.joint_names if chunk.joint_names.count(j) > 1})
            raise ChunkError("joint_names", f"expected {len(cfg.joint_names)} joints {list(cfg.joint_names)}; "
                             f"missing {missing}, unexpected {extra}, duplicated {dup}, "
                             f"got {len(chunk.joint_names)}")
        P = np.asarray(chunk.positions, dtype=float)
        if P.ndim != 2 or P.shape[1] != len(cfg.joint_names):
            raise ChunkError("shape", f"positions have shape {P.shape}")
        H = len(P)
        lo_h = max(cfg.min_horizon, cfg.stitch_len + 1)
        if not lo_h <= H <= cfg.max_horizon:
            raise ChunkError("horizon", f"horizon {H} outside [{lo_h}, {cfg.max_horizon}] (min_horizon, "
                             f"stitch_len {cfg.stitch_len} + 1, max_horizon)")
        if not math.isfinite(float(np.add.reduce(P, axis=None))) and not np.isfinite(P).all():
            bad = sorted({chunk.joint_names[j] for j in np.argwhere(~np.isfinite(P))[:, 1]})
            raise ChunkError("non_finite", f"NaN/inf positions for {bad}")
        lead = chunk.stamp_s - now_s
        if lead > cfg.max_chunk_lead_s:
            raise ChunkError("future", f"stamped {lead:.3f} s ahead of now (max_chunk_lead_s "
                             f"{cfg.max_chunk_lead_s}): wrong clock or stamp")
        if -lead > cfg.max_chunk_age_s:
            raise ChunkError("stale", f"stamped {-lead:.3f} s ago (max_chunk_age_s {cfg.max_chunk_age_s})")
        if not same_order:
            P = P[:, [chunk.joint_names.index(j) for j in cfg.joint_names]]
        return self._beyond_limits(P)

    def _beyond_limits(self, P: np.ndarray) -> tuple[np.ndarray, int]:
        """(P with every sample outside [q_min, q_max] clamped into it, how many were) over the continuous
        joints, and the discrete ones when the limits list every joint (P unchanged and 0 without position
        limits). Raises ChunkError when a sample of a joint not in `saturate_joints` lies further out than
        `position_tolerance`; samples of `saturate_joints` are clamped however far out they lie."""
        if self._col_bounds is None:
            return P, 0
        cols = self._bounded_cols
        lo, hi = self._col_bounds
        Pc = P[:, cols]
        over = np.maximum(Pc - hi, lo - Pc)  # > 0: outside by that much
        if float(over.max(initial=-math.inf)) <= 0.0:
            return P, 0
        strict = np.where(self._saturate, -math.inf, over)  # end-stop joints never reject a chunk
        worst = float(strict.max(initial=-math.inf))
        if worst > self.cfg.position_tolerance:
            r, j = np.unravel_index(int(np.argmax(strict)), strict.shape)
            name = self.cfg.joint_names[cols[j]]
            raise ChunkError("position_limits", f"sample {r} of {name} is {worst:.4g} beyond its position "
                             f"limits [{lo[j]:.4g}, {hi[j]:.4g}] (position_tolerance "
                             f"{self.cfg.position_tolerance})")
        P = P.copy()
        P[:, cols] = np.minimum(np.maximum(Pc, lo), hi)
        return P, int(np.count_nonzero(over > 0.0))

    def check_reported(self, traj: Trajectory, now_s: float) -> None:
        """Raise TrajectoryError unless `traj` (config order; what the bridge reports executing) can be
        stitched onto: finite, times starting at >= 0 and increasing, stamped at most `max_chunk_lead_s`
        ahead of `now_s` (a later one is a wrong clock) and inside the position limits within
        `position_tolerance` (a report far outside them is a fault, never a start). A stamp in the past is
        fine: the bridge holds at its last point."""
        if not all(np.isfinite(a).all() for a in (traj.times_s, traj.positions, traj.velocities,
                                                  traj.accelerations) if a is not None):
            raise TrajectoryError("NaN/inf in times or points")
        if np.any(np.diff(traj.times_s) <= 0) or traj.times_s[0] < 0:
            raise TrajectoryError("time_from_start: must start at >= 0 and increase strictly")
        lead = traj.stamp_s - now_s
        if lead > self.cfg.max_chunk_lead_s:
            raise TrajectoryError(f"future: stamped {lead:.3f} s ahead of now (max_chunk_lead_s "
                                  f"{self.cfg.max_chunk_lead_s}): wrong clock or stamp")
        try:
            self._beyond_limits(traj.positions)
        except ChunkError as exc:
            raise TrajectoryError(str(exc).replace("sample", "point", 1)) from None

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

    def align(self, chunk: Chunk, R: np.ndarray, now_s: float,
              measured: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> Alignment:
        """Lay the validated reference R [H, D] on the output grid and pick the start state
        (the active trajectory's bridge samples, or the measured state). Raises ChunkError."""
        cfg = self.cfg
        dt = cfg.dt
        H = len(R)
        span_end = chunk.stamp_s + (H - 1) * chunk.dt_s
        if now_s > span_end + _TIME_EPS * chunk.dt_s:
            raise ChunkError("stale", f"chunk ended {now_s - span_end:.3f} s ago (stamp {chunk.stamp_s:.3f}, "
                             f"span {(H - 1) * chunk.dt_s:.3f} s)")
        act = self._active
        use_active = act is not None and (measured is None or now_s <= act.end_s)
        if not use_active and measured is None:
            raise ChunkError("no_state", "no trajectory is active and no measured robot state is known")
        earliest = max(now_s + cfg.command_latency_s, chunk.stamp_s)
        origin = act.t0_s if act is not None and use_active else chunk.stamp_s
        k = math.ceil((earliest - origin) / dt - _TIME_EPS)
        t_start = origin + k * dt
        n_out = math.floor((span_end - t_start) / dt + _TIME_EPS) + 1
        S = cfg.stitch_len if use_active else 1
        if act is not None and use_active:
            # Bridge only over samples the active trajectory still covers: past its end the
            # robot holds at rest, and that hold state (not a resampled one) is the start.
            S = max(1, min(S, math.floor((act.end_s - t_start) / dt + _TIME_EPS) + 1))
        if n_out < S + 1:
            raise ChunkError("stale", f"only {max(n_out, 0)} samples of the chunk remain after "
                             f"{now_s - chunk.stamp_s:.3f} s of delay; need more than stitch_len {S}")
        offset = (t_start - chunk.stamp_s) / chunk.dt_s  # chunk sample index of the first new sample
        k0 = round(offset)
        if chunk.dt_s == dt and abs(offset - k0) <= _TIME_EPS:  # grids coincide: no interpolation
            ref = R[k0:k0 + n_out]
        else:
            idx = offset + np.arange(n_out) * (dt / chunk.dt_s)
            # np.minimum/np.maximum rather than np.clip: same values, without clip's per-call overhead
            lo = np.minimum(np.maximum(np.floor(idx + _TIME_EPS).astype(int), 0), H - 1)
            frac = np.minimum(np.maximum(idx - lo, 0.0), 1.0)[:, None]
            ref = R[lo] * (1 - frac) + R[np.minimum(lo + 1, H - 1)] * frac  # [n_out, D]
        trimmed = max(0, math.ceil(offset - _TIME_EPS))
        lead = None
        if act is not None and use_active:
            # With a lead: the active trajectory's grid samples over the lead and back to the last grid time at
            # or before now (as far as it covers), then the message's stamp, then the bridge samples.
            n_lead = 0
            if self.lead_s > 0.0:
                back = max(self.lead_s, t_start - now_s)
                n_lead = max(0, min(math.ceil(back / dt - _TIME_EPS),
                                    math.floor((t_start - act.t0_s) / dt + _TIME_EPS)))
            times = np.concatenate([t_start - dt * np.arange(n_lead, 0, -1), [t_start - max(self.lead_s, n_lead * dt)],
                                    t_start + dt * np.arange(S)])
            q, v, a = act.sample(times)
            bq, bv, ba = q[n_lead + 1:], v[n_lead + 1:], a[n_lead + 1:]
            lead = (q[:n_lead], v[:n_lead], a[:n_lead])
            initial = np.array([q[n_lead], v[n_lead], a[n_lead]])
            exec_state = np.array([bq[0], bv[0], ba[0]])
            x_end = np.array([bq[-1], bv[-1], ba[-1]])
        else:
            exec_state = x_end = initial = self._measured(measured)
            bq, bv, ba = exec_state[0:1], exec_state[1:2], exec_state[2:3]
        return Alignment(t_start, ref, S, trimmed, (bq, bv, ba), exec_state, x_end, lead, initial)

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
        chain = ["mpc", "ruckig", "brake"] if cfg.backend == "mpc" else ["ruckig", "brake"]
        limits = self.limits
        brake_limits = self._brake_limits(x0)
        if brake_limits is not None:
            # A start outside the limits (a measured state, or a bridge over samples of another
            # trajectory) makes every generator's problem infeasible: go straight to the brake, checked
            # against limits widened only by the start's own excess (it can only shrink from there).
            messages.append("infeasible start: the start state exceeds the limits; braking")
            chain, limits = ["brake"], brake_limits
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
            traj = self._assemble(al.t_start, bq, bv, ba, out, al.reference, S, settle and gen != "brake")
            v, a = traj.velocities, traj.accelerations
            assert v is not None and a is not None  # the stitcher's trajectories carry both
            rep = check_limits(cfg.dt, traj.positions[:, c], v[:, c], a[:, c],
                               limits, traj.positions[:, self._didx] if len(self._didx) else None,
                               self.discrete_rate)
            if rep.ok:
                traj, lead_s, verdict = self._as_published(traj, al, accept)
                if not verdict.ok:
                    rejects += 1
                    messages.append(f"{gen}: the interpolated curve fails the bridge's check: {verdict.message}")
                    continue
                self._active = traj
                return StitchResult(
                    traj, StitchStatus.OK if attempt == 0 and brake_limits is None else StitchStatus.FALLBACK, gen,
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

    def _as_published(self, traj: Trajectory, al: Alignment, accept: Limits) -> tuple[Trajectory, float, Verdict]:
        """(the trajectory with the lead's samples in front, the lead left to publish with, the bridge's verdict
        on it as published: stamped `lead_s` before sample 0, joined from the predicted reference at the stamp)."""
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
        verdict = check_trajectory(published, self.cfg.joint_names, accept, stamp,
                                   Reference(init[0], init[1], init[2], True))
        return traj, lead_s, verdict

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

    def _measured(self, measured) -> np.ndarray:
        """The measured (q, v, a) as one [3, D] array; raises on a wrong shape or NaN/inf."""
        D = len(self.cfg.joint_names)
        try:
            m = np.asarray(measured, dtype=float).reshape(3, D)
        except ValueError:
            raise TrajectoryError(f"measured state: expected (q, v, a) with {D} values each") from None
        if not math.isfinite(float(np.add.reduce(m, axis=None))):
            raise ChunkError("no_state", "measured robot state has NaN/inf")
        return m

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

    def _generate(self, gen: str, x0: np.ndarray, ref_c: np.ndarray, settle: bool):
        """Continuous-joint samples [3 (q, v, a), T, Dc] starting with x0, or (None, why, n)."""
        dt = self.cfg.dt
        n_con = 0
        if x0.shape[1] == 0:  # only discrete joints
            return np.zeros((3, len(ref_c), 0)), "", 0
        r: MpcResult | RuckigResult
        if gen == "mpc":
            r = self._mpc.solve(x0, ref_c, dt, self.limits, settle)
            n_con = len(r.constrained_joints)
            if r.status is not MpcStatus.OK:
                return None, (f"QP ({self.cfg.qp_solver}) infeasible or not solved for continuous joints "
                              f"{list(r.failed_joints)}"), n_con
        elif gen == "ruckig":
            r = self._ruckig.track(x0, ref_c, dt, self._ruckig_limits)
            if r.status is not RuckigStatus.OK:
                return None, r.message, 0
        else:  # brake: jerk-limited stop from the start state, reference ignored
            r = self._ruckig.to_rest(x0, None, dt, self._ruckig_limits,
                                     max_steps=max(1, round(self.cfg.settle_max_s / dt)))
            if r.status is RuckigStatus.FAILED:
                return None, r.message, 0
            return np.concatenate([x0[:, None], r.states], axis=1), r.message, 0
        X, msg = r.states, ""
        if settle:
            tail = self._ruckig.to_rest(X[:, -1], ref_c[-1], dt, self._ruckig_limits,
                                        max_steps=max(1, round(self.cfg.settle_max_s / dt)))
            if tail.status is RuckigStatus.FAILED:
                return None, f"settle tail: {tail.message}", n_con
            if tail.status is RuckigStatus.NOT_AT_REST:
                msg = f"settle tail {tail.message}"
            X = np.concatenate([X, tail.states], axis=1)
        return X, msg, n_con

    def _assemble(self, t_start, bq, bv, ba, cont, ref, S, settle: bool = False) -> Trajectory:
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
