"""Replay-evaluation metrics, each reported the way driving replay evaluators made familiar:
`count, mean, min, max, p50, p95, p99`, with optional pass/fail conditions.

Pure numpy; no ROS imports. Inputs are plain arrays taken from the messages
of an outputs bag: chunks as (stamp s, [H, D] positions, dt), trajectories as
(stamp s, times [T], positions/velocities/accelerations [T, D]).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["STAT_KEYS", "summarize", "discrete_frechet", "hausdorff", "Chunk", "TrajectorySamples", "chunk_seams",
           "chunk_churn", "jerk_rms", "trajectory_limits", "trajectory_seams", "check_conditions",
           "ConditionError"]

STAT_KEYS = ("count", "mean", "min", "max", "p50", "p95", "p99")


def summarize(values: Iterable[float]) -> dict[str, float | int | None]:
    """count, mean, min, max, p50, p95, p99 of the finite values (None for an empty set, never 0)."""
    v = np.asarray([float(x) for x in values], dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"count": 0, **{k: None for k in STAT_KEYS[1:]}}
    p50, p95, p99 = np.percentile(v, [50, 95, 99])
    return {"count": int(v.size), "mean": float(v.mean()), "min": float(v.min()), "max": float(v.max()),
            "p50": float(p50), "p95": float(p95), "p99": float(p99)}


# --- curve distances (2D plans in pixels, 3D in metres) -------------------------------------

def _finite_rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    return a[np.isfinite(a).all(axis=1)]


def discrete_frechet(a: np.ndarray, b: np.ndarray) -> float:
    """Discrete Fréchet distance of two polylines [N, D], [M, D] (rows with NaN, e.g. `<oof>`, dropped)."""
    a, b = _finite_rows(a), _finite_rows(b)
    if len(a) == 0 or len(b) == 0:
        return math.nan
    d = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
    ca = np.empty_like(d)
    ca[0, 0] = d[0, 0]
    for i in range(1, len(a)):
        ca[i, 0] = max(ca[i - 1, 0], d[i, 0])
    for j in range(1, len(b)):
        ca[0, j] = max(ca[0, j - 1], d[0, j])
    for i in range(1, len(a)):
        for j in range(1, len(b)):
            ca[i, j] = max(min(ca[i - 1, j], ca[i - 1, j - 1], ca[i, j - 1]), d[i, j])
    return float(ca[-1, -1])


def hausdorff(a: np.ndarray, b: np.ndarray) -> float:
    """Symmetric Hausdorff distance of two point sets (rows with NaN dropped)."""
    a, b = _finite_rows(a), _finite_rows(b)
    if len(a) == 0 or len(b) == 0:
        return math.nan
    d = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
    return float(max(d.min(axis=1).max(), d.min(axis=0).max()))


# --- chunks -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Chunk:
    stamp_s: float  # time of sample 0
    dt_s: float
    positions: np.ndarray  # [H, D]

    def sample(self, t_s: np.ndarray) -> np.ndarray:
        """Positions at times t (linear interpolation; NaN outside the chunk)."""
        grid = self.stamp_s + self.dt_s * np.arange(len(self.positions))
        out = np.full((len(t_s), self.positions.shape[1]), np.nan)
        inside = (t_s >= grid[0] - 1e-9) & (t_s <= grid[-1] + 1e-9)
        for j in range(self.positions.shape[1]):
            out[inside, j] = np.interp(t_s[inside], grid, self.positions[:, j])
        return out


def chunk_seams(chunks: Sequence[Chunk]) -> dict[str, list[float]]:
    """Jumps where each chunk takes over from the previous one, at the new chunk's sample 0:
    position (max over joints of |new - previous|) and velocity (finite differences)."""
    pos, vel = [], []
    for prev, new in zip(chunks, chunks[1:]):
        t = new.stamp_s + new.dt_s * np.arange(2)
        old = prev.sample(t)
        if not np.isfinite(old).all():
            continue  # no overlap: the previous chunk had ended (counted by the caller as a gap)
        pos.append(float(np.abs(new.positions[0] - old[0]).max()))
        v_new = (new.positions[1] - new.positions[0]) / new.dt_s
        v_old = (old[1] - old[0]) / new.dt_s
        vel.append(float(np.abs(v_new - v_old).max()))
    return {"seam_jump_pos": pos, "seam_jump_vel": vel}


def chunk_churn(chunks: Sequence[Chunk]) -> list[float]:
    """How much each chunk departs from the previous one over their overlap (mean |Δq| over joints and time)."""
    out = []
    for prev, new in zip(chunks, chunks[1:]):
        t = new.stamp_s + new.dt_s * np.arange(len(new.positions))
        old = prev.sample(t)
        ok = np.isfinite(old).all(axis=1)
        if ok.any():
            out.append(float(np.abs(new.positions[ok] - old[ok]).mean()))
    return out


def jerk_rms(positions: np.ndarray, dt_s: float) -> float:
    """RMS of the third finite difference (per joint, then over joints); NaN for fewer than 4 samples."""
    q = np.asarray(positions, dtype=float)
    if len(q) < 4:
        return math.nan
    j = np.diff(q, n=3, axis=0) / dt_s ** 3
    return float(np.sqrt((j ** 2).mean()))


# --- trajectories ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TrajectorySamples:
    """The samples of one recorded trajectory message, as the replay metrics read them.

    Unlike `plan_stack.trajectory.core.Trajectory` (a command the stitcher
    and bridges validate), a recorded message may lack fields: a missing
    velocity or acceleration column is an empty array, and the metrics skip it.
    """

    stamp_s: float  # when sample 0 is due
    times_s: np.ndarray  # [T] from stamp
    positions: np.ndarray  # [T, D]
    velocities: np.ndarray  # [T, D] (empty: not given)
    accelerations: np.ndarray  # [T, D] (empty: not given)


def trajectory_limits(traj: TrajectorySamples, v_max: np.ndarray, a_max: np.ndarray,
                      q_min: np.ndarray | None = None, q_max: np.ndarray | None = None,
                      tol: float = 1e-6) -> dict[str, float]:
    """Largest ratio to each limit (>1 + tol: violated); limits per joint, inf = unlimited."""
    out = {}
    if traj.velocities.size:
        out["v_ratio"] = float(np.max(np.abs(traj.velocities) / np.asarray(v_max)))
    if traj.accelerations.size:
        out["a_ratio"] = float(np.max(np.abs(traj.accelerations) / np.asarray(a_max)))
    if q_min is not None and q_max is not None:
        below = np.max(np.asarray(q_min) - traj.positions)
        above = np.max(traj.positions - np.asarray(q_max))
        out["q_excess"] = float(max(below, above, 0.0))
    out["violated"] = float(out.get("v_ratio", 0) > 1 + tol or out.get("a_ratio", 0) > 1 + tol
                            or out.get("q_excess", 0) > tol)
    return out


def trajectory_seams(trajs: Sequence[TrajectorySamples]) -> dict[str, list[float]]:
    """Position/velocity/acceleration jumps where each trajectory replaces the previous one (C2 check)."""
    out: dict[str, list[float]] = {"c2_jump_pos": [], "c2_jump_vel": [], "c2_jump_acc": []}
    for prev, new in zip(trajs, trajs[1:]):
        t0 = new.stamp_s + new.times_s[0]
        tp = prev.stamp_s + prev.times_s
        if not tp[0] - 1e-9 <= t0 <= tp[-1] + 1e-9:
            continue
        for key, a, b in (("c2_jump_pos", prev.positions, new.positions),
                          ("c2_jump_vel", prev.velocities, new.velocities),
                          ("c2_jump_acc", prev.accelerations, new.accelerations)):
            if a.size and b.size:
                old = np.array([np.interp(t0, tp, a[:, j]) for j in range(a.shape[1])])
                out[key].append(float(np.abs(b[0] - old).max()))
    return out


# --- pass/fail conditions ---------------------------------------------------------------------

class ConditionError(ValueError):
    """A conditions file is malformed (names the entry)."""


def _lookup(report: Mapping[str, Any], path: str) -> Any:
    node: Any = report
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def check_conditions(report: Mapping[str, Any], conditions: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Evaluate `{"metric.path.stat": {"max": x, "min": y}}` against a report.

    A metric that is missing or None fails with the reason (a condition on
    something not computed must not pass silently).
    """
    results = []
    for path, rule in conditions.items():
        if not isinstance(rule, Mapping) or not set(rule) <= {"min", "max"} or not rule:
            raise ConditionError(f"condition {path!r}: expected a mapping with 'min' and/or 'max', got {rule!r}")
        value = _lookup(report, path)
        if value is None or not isinstance(value, (int, float)):
            results.append({"metric": path, "value": value, **rule, "passed": False,
                            "reason": "not computed in this report"})
            continue
        ok = ("min" not in rule or value >= rule["min"]) and ("max" not in rule or value <= rule["max"])
        results.append({"metric": path, "value": value, **rule, "passed": bool(ok),
                        "reason": "" if ok else
                        f"{value} outside [{rule.get('min', '-inf')}, {rule.get('max', 'inf')}]"})
    return results
