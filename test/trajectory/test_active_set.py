"""Dual active-set QP: exact on small problems, warm starts, infeasibility."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.trajectory.active_set import QpStatus, dual_active_set


def _qp(seed, n=6, m=10):
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(n, n))
    H = L @ L.T + n * np.eye(n)
    c = rng.normal(size=n) * 5
    C = rng.normal(size=(m, n))
    lo = -np.abs(rng.normal(size=m))
    hi = np.abs(rng.normal(size=m))
    return H, c, C, lo, hi


def _kkt_ok(H, c, C, lo, hi, x, tol=1e-8):
    """Stationarity with sign-correct multipliers on the active rows (least squares)."""
    Cx = C @ x
    assert np.all(Cx >= lo - tol) and np.all(Cx <= hi + tol)
    act_lo = np.flatnonzero(np.abs(Cx - lo) < 1e-9)
    act_hi = np.flatnonzero(np.abs(Cx - hi) < 1e-9)
    N = np.vstack([C[act_lo], -C[act_hi]]).T if len(act_lo) + len(act_hi) else np.zeros((len(x), 0))
    g = H @ x + c
    if N.shape[1] == 0:
        return np.linalg.norm(g) < tol * 1e3
    u, *_ = np.linalg.lstsq(N, g, rcond=None)
    return np.linalg.norm(N @ u - g) < 1e-6 * (1 + np.linalg.norm(c)) and np.all(u >= -1e-8)


@pytest.mark.parametrize("seed", range(8))
def test_solution_satisfies_kkt(seed):
    H, c, C, lo, hi = _qp(seed)
    Hi = np.linalg.inv(H)
    x, status, steps = dual_active_set(Hi, -Hi @ c, C, lo, hi)
    assert status is QpStatus.OPTIMAL and steps >= 0
    assert _kkt_ok(H, c, C, lo, hi, x)


def test_unconstrained_optimum_takes_no_step():
    H, c, C, _, _ = _qp(1)
    Hi = np.linalg.inv(H)
    x, status, steps = dual_active_set(Hi, -Hi @ c, C, np.full(len(C), -1e9), np.full(len(C), 1e9))
    assert status is QpStatus.OPTIMAL and steps == 0
    np.testing.assert_allclose(x, -Hi @ c)


def test_warm_start_from_the_optimal_active_set_needs_no_step():
    H, c, C, lo, hi = _qp(3)
    Hi = np.linalg.inv(H)
    x, _, cold = dual_active_set(Hi, -Hi @ c, C, lo, hi)
    Cx = C @ x
    guess = [(int(i), 1.0) for i in np.flatnonzero(np.abs(Cx - lo) < 1e-9)] + \
            [(int(i), -1.0) for i in np.flatnonzero(np.abs(Cx - hi) < 1e-9)]
    assert guess and cold > 0
    x2, status, warm = dual_active_set(Hi, -Hi @ c, C, lo, hi, guess=guess)
    assert status is QpStatus.OPTIMAL and warm == 0
    np.testing.assert_allclose(x2, x, atol=1e-10)
    # A wrong guess (opposite signs) is repaired, not trusted.
    x3, status, _ = dual_active_set(Hi, -Hi @ c, C, lo, hi, guess=[(i, -s) for i, s in guess])
    assert status is QpStatus.OPTIMAL
    np.testing.assert_allclose(x3, x, atol=1e-8)


def test_infeasible_box_is_detected():
    H = np.eye(2)
    C = np.array([[1.0, 0.0], [1.0, 0.0]])
    x, status, _ = dual_active_set(np.eye(2), np.zeros(2), C, np.array([1.0, -np.inf]), np.array([np.inf, 0.0]))
    assert status is QpStatus.INFEASIBLE
    assert H.shape == (2, 2)
