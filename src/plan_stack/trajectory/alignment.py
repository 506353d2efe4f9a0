"""A chunk on the output grid: validated, trimmed to now, and joined to the trajectory being executed.

Timeline. The stitcher keeps the trajectory it emitted last (the *active*
one: what was sent and when sample 0 is due). A new chunk is aligned to the
active trajectory's sample grid (period `dt`), so samples that are already
being executed are copied, never resampled; its reference is read off the
chunk by linear interpolation at those grid times (exact when the grids
coincide, as they do when the chunker and the stitcher share `dt`). The first
new sample is the first grid time no earlier than now (+ command latency) and
no earlier than the chunk's stamp: a late chunk is trimmed by the elapsed
time, never replayed from its start.

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
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.core import GRID_EPS as _TIME_EPS
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import TrajectoryError
from plan_stack.trajectory.stitch_limits import discrete_bounds, joint_columns, limits_from_config

__all__ = ["ChunkError", "Chunk", "Alignment", "Aligner"]


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
    #: [3, D] the controller's predicted reference when it activates the message (`activation_s`)
    initial: np.ndarray | None = None
    #: when the controller activates the message at the earliest: its stamp, or the start of the trajectory
    #: stitched onto when that is a bridge's account of its curve beginning later (None: the stamp)
    activation_s: float | None = None


class Aligner:
    """Checks chunks (and reported trajectories) against the config and lays them on the output grid.

    The stitcher's input side; `lead_s` as the `Stitcher`'s (module doc, "Lead").
    """

    def __init__(self, cfg: StitcherConfig, lead_s: float = 0.0) -> None:
        self.cfg = cfg
        self.lead_s = float(lead_s)
        lim, _ = limits_from_config(cfg)
        d_lo, d_hi = discrete_bounds(cfg)
        cidx, didx = joint_columns(cfg)
        # Columns checked against position bounds (continuous, then discrete) and which of them saturate.
        self._bounded_cols = np.concatenate([cidx, didx])
        self._saturate = np.array([cfg.joint_names[i] in cfg.saturate_joints for i in self._bounded_cols], bool)
        # the bounded columns' position bounds (None when no column has any), fixed with the limits
        self._col_bounds: tuple[np.ndarray, np.ndarray] | None = None
        if lim.has_position_limits or np.isfinite(d_lo).any() or np.isfinite(d_hi).any():
            self._col_bounds = (np.concatenate([np.broadcast_to(lim.q_min, (lim.dof,)), d_lo]),
                                np.concatenate([np.broadcast_to(lim.q_max, (lim.dof,)), d_hi]))

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

    def align(self, chunk: Chunk, R: np.ndarray, now_s: float,
              measured: tuple[np.ndarray, np.ndarray, np.ndarray] | None, active: Trajectory | None) -> Alignment:
        """Lay the validated reference R [H, D] on the output grid and pick the start state (the bridge
        samples of `active`, the trajectory being executed, or the measured state). Raises ChunkError."""
        cfg = self.cfg
        dt = cfg.dt
        H = len(R)
        span_end = chunk.stamp_s + (H - 1) * chunk.dt_s
        if now_s > span_end + _TIME_EPS * chunk.dt_s:
            raise ChunkError("stale", f"chunk ended {now_s - span_end:.3f} s ago (stamp {chunk.stamp_s:.3f}, "
                             f"span {(H - 1) * chunk.dt_s:.3f} s)")
        act = active
        use_active = act is not None and (measured is None or now_s <= act.end_s)
        if not use_active and measured is None:
            raise ChunkError("no_state", "no trajectory is active and no measured robot state is known")
        earliest = max(now_s + cfg.command_latency_s, chunk.stamp_s)
        origin = chunk.stamp_s
        if act is not None and use_active:
            # the trajectory's grid: a bridge's account of ours (`core.followed`) begins at its activation, between
            # two grid times; its last point is on the grid
            origin = act.t0_s if act.dt_s is not None else act.end_s
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
            # The controller activates the message at its stamp, or later: never before the trajectory stitched
            # onto began (a bridge's account of its curve starts at its own activation, already past)
            activation = max(t_start - max(self.lead_s, n_lead * dt), act.t0_s)
            times = np.concatenate([t_start - dt * np.arange(n_lead, 0, -1), [activation], t_start + dt * np.arange(S)])
            q, v, a = act.sample(times)
            bq, bv, ba = q[n_lead + 1:], v[n_lead + 1:], a[n_lead + 1:]
            lead = (q[:n_lead], v[:n_lead], a[:n_lead])
            initial = np.array([q[n_lead], v[n_lead], a[n_lead]])
            exec_state = np.array([bq[0], bv[0], ba[0]])
            x_end = np.array([bq[-1], bv[-1], ba[-1]])
        else:
            exec_state = x_end = initial = self._measured(measured)
            bq, bv, ba = exec_state[0:1], exec_state[1:2], exec_state[2:3]
            activation = None
        return Alignment(t_start, ref, S, trimmed, (bq, bv, ba), exec_state, x_end, lead, initial, activation)

    def _measured(self, measured: Any) -> np.ndarray:
        """The measured (q, v, a) as one [3, D] array; raises on a wrong shape or NaN/inf."""
        D = len(self.cfg.joint_names)
        try:
            m = np.asarray(measured, dtype=float).reshape(3, D)
        except ValueError:
            raise TrajectoryError(f"measured state: expected (q, v, a) with {D} values each") from None
        if not math.isfinite(float(np.add.reduce(m, axis=None))):
            raise ChunkError("no_state", "measured robot state has NaN/inf")
        return m
