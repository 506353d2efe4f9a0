"""Exact dense dual active-set QP solver (Goldfarb–Idnani) for small per-joint MPC problems.

    minimise ½ xᵀHx + cᵀx   subject to   lo <= C x <= hi

Why: the MPC Hessian is fixed per shape, so H⁻¹ is computed once and the
unconstrained optimum x = -H⁻¹c is already known; the dual method starts
there and adds the most violated constraint at a time while keeping the
multipliers non-negative, so it needs no feasible start point and ends on the
exact optimum (to round-off) after about as many steps as constraints are
active. It is the exact alternative and the safety net for OSQP's
ADMM (which can stall on ill-conditioned, heavily constrained horizons).
"""
from __future__ import annotations

import enum
from typing import Any

import numpy as np

__all__ = ["QpStatus", "dual_active_set"]


class QpStatus(enum.Enum):
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    MAX_ITER = "max_iter"


def _start(H_inv: np.ndarray, x_unc: np.ndarray, C: np.ndarray, lo: np.ndarray, hi: np.ndarray,
           guess: Any) -> Any:
    """Dual-feasible start from a guessed active set: solve its KKT system and drop
    constraints with negative multipliers until none is left (warm start)."""
    act = [int(i) for i, _ in guess]
    sgn = [float(s) for _, s in guess]
    while act:
        sg = np.asarray(sgn)
        N = C[act] * sg[:, None]  # [k, n]
        HN = H_inv @ N.T
        b = sg * np.where(sg > 0, lo[act], hi[act])
        try:
            u = np.linalg.solve(N @ HN, b - N @ x_unc)
        except np.linalg.LinAlgError:
            break  # dependent guess: start cold
        if not np.all(np.isfinite(u)):
            break
        k = int(np.argmin(u))
        if u[k] >= 0:
            return x_unc + HN @ u, act, sgn, u, HN
        del act[k], sgn[k]
    return x_unc.astype(float).copy(), [], [], np.zeros(0), np.zeros((len(x_unc), 0))


def dual_active_set(H_inv: np.ndarray, x_unc: np.ndarray, C: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    tol: float = 1e-10, max_iter: int = 1000,
                    guess: list[tuple[int, float]] | None = None) -> tuple[np.ndarray, QpStatus, int]:
    """Returns (x, status, steps). H_inv [n, n]; x_unc = -H⁻¹c [n]; C [m, n]; lo, hi [m] (±inf allowed).

    Each constraint row should be scaled so that its bounds are O(1): `tol`
    is an absolute feasibility tolerance on C x. `guess` (row, +1 lower /
    -1 upper) warm-starts from a likely active set, e.g. OSQP's.
    """
    x, act, sgn, u, HN = _start(H_inv, x_unc, C, lo, hi, guess or [])
    Cx = C @ x
    steps = 0
    while True:
        v_lo = lo - Cx
        v_hi = Cx - hi
        if act:
            v_lo[act] = -np.inf
            v_hi[act] = -np.inf
        p_lo, p_hi = int(np.argmax(v_lo)), int(np.argmax(v_hi))
        if max(v_lo[p_lo], v_hi[p_hi]) <= tol:
            return x, QpStatus.OPTIMAL, steps
        if v_lo[p_lo] >= v_hi[p_hi]:
            p, sp = p_lo, 1.0
        else:
            p, sp = p_hi, -1.0
        npv = sp * C[p]
        bp = sp * (lo[p] if sp > 0 else hi[p])
        Hn = H_inv @ npv
        curv = float(npv @ Hn)
        u_p = 0.0
        while True:
            steps += 1
            if steps > max_iter:
                return x, QpStatus.MAX_ITER, steps
            if act:
                N = C[act] * np.asarray(sgn)[:, None]  # [k, n]
                r = np.linalg.solve(N @ HN, N @ Hn)
                z = Hn - HN @ r
            else:
                r = np.zeros(0)
                z = Hn
            zn = float(z @ npv)
            s_p = float(npv @ x) - bp
            t2 = -s_p / zn if zn > 1e-13 * curv else np.inf
            pos = r > 1e-12 * max(1.0, float(np.max(np.abs(r), initial=0.0)))
            if np.any(pos):
                ratios = np.where(pos, u / np.where(pos, r, 1.0), np.inf)
                k_drop = int(np.argmin(ratios))
                t1 = float(ratios[k_drop])
            else:
                k_drop, t1 = -1, np.inf
            t = min(t1, t2)
            if not np.isfinite(t):
                return x, QpStatus.INFEASIBLE, steps
            if np.isfinite(t2):
                x = x + t * z
                Cx = Cx + t * (C @ z)
            u = u - t * r
            u_p += t
            if t2 <= t1:  # full step: p becomes active
                act.append(p)
                sgn.append(sp)
                u = np.append(u, u_p)
                HN = np.column_stack([HN, Hn])
                break
            # partial step: a constraint's multiplier reached zero; drop it and retry p
            del act[k_drop], sgn[k_drop]
            u = np.delete(u, k_drop)
            HN = np.delete(HN, k_drop, axis=1)
