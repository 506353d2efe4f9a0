"""The stitcher's limits, from its config: the generators', the Ruckig chaser's and the bridge's check's.

A limit parameter is a scalar, one value per joint, or one value per joint of the subset it applies to
(`_per_joint`); continuous joints get position, velocity, acceleration and jerk limits, discrete ones a rate.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.limits import Limits

__all__ = ["joint_columns", "limits_from_config", "accept_limits", "interpolation_safe", "discrete_bounds"]


def _per_joint(value: Any, cfg: StitcherConfig, idx: np.ndarray, n_sub: int) -> Any:
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
