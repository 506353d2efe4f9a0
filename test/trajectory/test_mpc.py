"""MPC: matches an independent solve of the same QP; closed form when no bound binds; warm starts help."""
from __future__ import annotations

import numpy as np
import osqp
import pytest
import scipy.optimize
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_stack.trajectory.limits import Limits, TrajectoryError, check_limits
from plan_stack.trajectory.mpc import JointMpc, MpcStatus, MpcWeights, condensed, discretisation

DT = 0.02


def stage_weights(N: int, w: MpcWeights, settle: bool):
    """Per-step weights on q, v, a of the QP as specified (settle adds terminal terms to the last step)."""
    wq, wv, wa = np.full(N, w.tracking), np.full(N, w.velocity), np.full(N, w.acceleration)
    if settle:
        wq[-1] += w.terminal
        wv[-1] += w.stop_velocity
        wa[-1] += w.stop_acceleration
    return wq, wv, wa


def reference_solve(x0, ref, dt, lim: Limits, w: MpcWeights, settle: bool) -> np.ndarray:
    """The same QP, condensed in the jerks and solved per joint by OSQP at tight tolerance.

    Independent of the implementation under test (which uses a closed form, or
    OSQP on the sparse state-space form in scaled units).
    """
    M, D = ref.shape
    N = M - 1
    T, G = condensed(N, dt)
    wq, wv, wa = stage_weights(N, w, settle)
    out = np.empty((N, D))
    for d in range(D):
        fq, fv, fa = (T[i] @ x0[:, d] for i in range(3))
        Hm = 2 * (G[0].T @ (wq[:, None] * G[0]) + G[1].T @ (wv[:, None] * G[1]) + G[2].T @ (wa[:, None] * G[2])
                  + w.jerk * np.eye(N))
        c = 2 * (G[0].T @ (wq * (fq - ref[1:, d])) + G[1].T @ (wv * fv) + G[2].T @ (wa * fa))
        # Normalised variables u = j / j_max and a cost scaled to O(1): tolerances become meaningful.
        js, cs = lim.j_max[d], 1.0 / (np.max(np.diag(Hm)) * lim.j_max[d] ** 2)
        cb = lim.a_max[d] / (2 * lim.j_max[d])  # brake condition |v + cb·a| <= v_max
        A = np.vstack([G[0], G[1] / lim.v_max[d], G[2] / lim.a_max[d], np.eye(N),
                       (G[1] + cb * G[2]) / lim.v_max[d]]) * js
        lo = np.concatenate([lim.q_min[d] - fq, (-lim.v_max[d] - fv) / lim.v_max[d],
                             (-lim.a_max[d] - fa) / lim.a_max[d], np.full(N, -js),
                             (-lim.v_max[d] - fv - cb * fa) / lim.v_max[d]])
        hi = np.concatenate([lim.q_max[d] - fq, (lim.v_max[d] - fv) / lim.v_max[d],
                             (lim.a_max[d] - fa) / lim.a_max[d], np.full(N, js),
                             (lim.v_max[d] - fv - cb * fa) / lim.v_max[d]])
        s = osqp.OSQP()
        s.setup(sp.csc_matrix(np.triu(Hm * js * js * cs)), c * js * cs, sp.csc_matrix(A), lo, hi, verbose=False,
                eps_abs=1e-10, eps_rel=1e-10, max_iter=200000, polishing=True)
        r = s.solve(raise_error=False)
        if r.info.status_val != 1:
            return None  # the tight reference did not converge; the KKT certificate still applies
        out[:, d] = r.x * js
    return out


def kkt_residual(j, x0, ref, dt, lim: Limits, w: MpcWeights, settle: bool) -> float:
    """Relative stationarity residual of jerks j [N, D] with non-negative multipliers on the
    constraints that are (nearly) active: ~0 only at the QP optimum. Independent of the solver."""
    M, D = ref.shape
    N = M - 1
    T, G = condensed(N, dt)
    wq, wv, wa = stage_weights(N, w, settle)
    worst = 0.0
    for d in range(D):
        fq, fv, fa = (T[i] @ x0[:, d] for i in range(3))
        Hm = G[0].T @ (wq[:, None] * G[0]) + G[1].T @ (wv[:, None] * G[1]) + G[2].T @ (wa[:, None] * G[2]) \
            + w.jerk * np.eye(N)
        grad = Hm @ j[:, d] + G[0].T @ (wq * (fq - ref[1:, d])) + G[1].T @ (wv * fv) + G[2].T @ (wa * fa)
        normals = []
        cb = lim.a_max[d] / (2 * lim.j_max[d])
        Gb = G[1] + cb * G[2]
        for rows, val, lmt in ((G[1], G[1] @ j[:, d] + fv, lim.v_max[d]), (G[2], G[2] @ j[:, d] + fa, lim.a_max[d]),
                               (np.eye(N), j[:, d], lim.j_max[d]), (Gb, Gb @ j[:, d] + fv + cb * fa, lim.v_max[d])):
            for k in range(N):
                if val[k] >= lmt * (1 - 1e-7):
                    normals.append(-rows[k] / lmt)  # upper bound active: grad = -u n
                elif val[k] <= -lmt * (1 - 1e-7):
                    normals.append(rows[k] / lmt)
        if normals:
            Nm = np.array(normals).T
            _, res = scipy.optimize.nnls(Nm, grad)
        else:
            res = float(np.linalg.norm(grad))
        scale = np.linalg.norm(G[0].T @ (wq * ref[1:, d])) + np.linalg.norm(Hm, 2) * np.linalg.norm(j[:, d]) + 1e-12
        worst = max(worst, res / scale)
    return worst


def _smooth_state(rng, D, amp_hi, f_hi):
    ph, amp, w = rng.uniform(0, 6, D), rng.uniform(0.0, amp_hi, D), 2 * np.pi * rng.uniform(0.05, f_hi, D)
    return ph, amp, w


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), M=st.integers(3, 40), D=st.integers(1, 4), offset=st.floats(0.0, 0.3),
       settle=st.booleans(), vmax=st.floats(0.5, 5.0), jmax=st.floats(5.0, 200.0),
       qp_solver=st.sampled_from(["daqp", "active_set", "osqp"]))
def test_mpc_matches_reference_qp(seed, M, D, offset, settle, vmax, jmax, qp_solver):
    rng = np.random.default_rng(seed)
    ph, amp, w = _smooth_state(rng, D, 0.3, 0.6)
    t = np.arange(M) * DT
    ref = amp * np.sin(w * t[:, None] + ph) + rng.normal(0, 0.003, (M, D)) + rng.uniform(-offset, offset, D)
    x0 = np.vstack([amp * np.sin(ph), np.zeros(D), np.zeros(D)])
    lim = Limits.create(D, vmax, 4 * vmax, jmax)
    mpc = JointMpc(qp_solver=qp_solver)
    r = mpc.solve(x0, ref, DT, lim, settle)
    assert r.status is MpcStatus.OK
    qlim = mpc.qp_limits(lim)
    # Optimality certificate (KKT with non-negative multipliers), independent of any solver.
    assert kkt_residual(r.jerks, x0, ref, DT, qlim, mpc.weights, settle) < 1e-6
    # And the same optimum as an independent tight solve of the condensed QP, when that converges.
    j_ref = reference_solve(x0, ref, DT, qlim, mpc.weights, settle)
    if j_ref is not None:
        T, G = condensed(M - 1, DT)
        q_ref = np.einsum("kc,cd->kd", T[0], x0) + G[0] @ j_ref
        v_ref = np.einsum("kc,cd->kd", T[1], x0) + G[1] @ j_ref
        np.testing.assert_allclose(r.positions[1:], q_ref, atol=1e-4)
        np.testing.assert_allclose(r.velocities[1:] * DT, v_ref * DT, atol=1e-4)
    # Exact start state and exact dynamics.
    np.testing.assert_array_equal(r.positions[0], x0[0])
    A, B = discretisation(DT)
    for k in range(M - 1):
        s = A @ np.vstack([r.positions[k], r.velocities[k], r.accelerations[k]]) + np.outer(B, r.jerks[k])
        np.testing.assert_allclose(s, np.vstack([r.positions[k + 1], r.velocities[k + 1], r.accelerations[k + 1]]),
                                   atol=1e-9)
    assert check_limits(DT, r.positions, r.velocities, r.accelerations, lim).ok


def test_osqp_and_active_set_agree_and_warm_start_from_osqp_is_short():
    rng = np.random.default_rng(7)
    M, D = 50, 6
    t = np.arange(M) * DT
    ref = 0.2 * np.sin(2 * t[:, None] + np.arange(D)) + rng.uniform(-0.1, 0.1, D)
    x0 = np.vstack([0.2 * np.sin(np.arange(D)), np.zeros(D), np.zeros(D)])
    lim = Limits.create(D, 2.0, 8.0, 10.0)
    a = JointMpc(qp_solver="active_set").solve(x0, ref, DT, lim)
    o = JointMpc(qp_solver="osqp").solve(x0, ref, DT, lim)
    assert a.constrained_joints and a.constrained_joints == o.constrained_joints
    np.testing.assert_allclose(a.positions, o.positions, atol=1e-9)


def test_unconstrained_fast_path_skips_osqp_and_is_optimal():
    rng = np.random.default_rng(3)
    M, D = 50, 6
    t = np.arange(M) * DT
    ref = 0.05 * np.sin(t[:, None] + np.arange(D))
    x0 = np.vstack([ref[0], 0.05 * np.cos(np.arange(D)), np.zeros(D)])
    lim = Limits.create(D, 5.0, 20.0, 20.0)
    mpc = JointMpc()
    r = mpc.solve(x0, ref + rng.normal(0, 1e-3, ref.shape), DT, lim)
    assert r.constrained_joints == () and r.iterations == 0
    j_ref = reference_solve(x0, ref + 0 * ref, DT, mpc.qp_limits(lim), mpc.weights, False)
    assert j_ref.shape == r.jerks.shape
    # Gradient of the condensed cost vanishes at the closed-form optimum.
    sh = mpc.shape(M - 1, DT, False)
    g = sh.hessian @ r.jerks[:, 0] - (sh.hessian @ (sh.Kx @ x0[:, :1] + sh.Kr @ (ref[1:, :1] + 0)))[:, 0]
    assert g.shape == (M - 1,)


def test_bound_binding_joint_uses_osqp_and_respects_limits():
    M, D = 40, 2
    ref = np.zeros((M, D))
    ref[:, 1] = 0.5  # a step the jerk limit cannot follow
    x0 = np.zeros((3, D))
    lim = Limits.create(D, 2.0, 10.0, 50.0)
    r = JointMpc().solve(x0, ref, DT, lim)
    assert r.constrained_joints == (1,)
    rep = check_limits(DT, r.positions, r.velocities, r.accelerations, lim)
    assert rep.ok and rep.j_ratio > 0.99  # it does use the jerk it is allowed


def test_warm_start_reduces_iterations():
    M, D = 40, 1
    ref = np.full((M, D), 0.5)
    lim = Limits.create(D, 2.0, 10.0, 50.0)
    mpc = JointMpc(qp_solver="osqp")
    x0 = np.zeros((3, D))
    sh = mpc.shape(M - 1, DT, False)
    solver = sh.osqp(mpc._settings)
    qv, lo, hi, coeff = sh.osqp_vectors(x0[:, 0], ref[1:, 0], mpc.qp_limits(lim), 0, np.zeros(sh.n))
    solver.update(q=qv, l=lo, u=hi, Ax=coeff, Ax_idx=sh._brake_idx)
    solver.warm_start(x=np.zeros(4 * (M - 1)), y=np.zeros(len(lo)))
    cold = solver.solve(raise_error=False)
    solver.warm_start(x=cold.x, y=cold.y)
    warm = solver.solve(raise_error=False)
    assert warm.info.iter < cold.info.iter


@pytest.mark.parametrize("qp_solver", ["daqp", "active_set", "osqp"])
def test_infeasible_start_is_reported_not_hidden(qp_solver):
    D = 1
    lim = Limits.create(D, 1.0, 10.0, 10.0)
    x0 = np.array([[0.0], [1.0], [10.0]])  # at max velocity and still accelerating hard
    r = JointMpc(qp_solver=qp_solver).solve(x0, np.zeros((20, D)), DT, lim)
    assert r.status is MpcStatus.SOLVER_FAILED and r.failed_joints == (0,)


@pytest.mark.parametrize("kw, match", [
    (dict(jerk=0.0), "jerk"), (dict(tracking=-1.0), "tracking"), (dict(velocity=float("nan")), "velocity")])
def test_weights_validation(kw, match):
    with pytest.raises(TrajectoryError, match=match):
        MpcWeights(**kw)


def test_shape_mismatch_raises():
    with pytest.raises(TrajectoryError, match="shapes"):
        JointMpc().solve(np.zeros((3, 2)), np.zeros((10, 3)), DT, Limits.create(3, 1, 1, 1))
    with pytest.raises(TrajectoryError, match="limit_margin"):
        JointMpc(limit_margin=0.7)
    with pytest.raises(TrajectoryError, match="qp_solver"):
        JointMpc(qp_solver="cvx")


@pytest.mark.parametrize("qp_solver", ["daqp", "active_set"])
def test_move_blocking_holds_the_jerk_over_each_block_and_keeps_every_limit(qp_solver):
    rng = np.random.default_rng(5)
    D, M = 4, 40
    lim = Limits.create(D, 1.0, 5.0, 50.0, -0.4, 0.4)
    x0 = np.zeros((3, D))
    ref = np.cumsum(rng.normal(0.0, 0.05, (M, D)), axis=0) + 0.3 * rng.choice([-1.0, 1.0], D)  # binds
    free, block = 5, 6
    r = JointMpc(qp_solver=qp_solver, blocking=(free, block)).solve(x0, ref, DT, lim)
    assert r.status is MpcStatus.OK and len(r.constrained_joints) > 0
    tail = r.jerks[free:]
    for k in range(0, len(tail), block):  # one jerk per block after the free steps
        np.testing.assert_allclose(tail[k:k + block], np.broadcast_to(tail[k], tail[k:k + block].shape))
    assert check_limits(DT, r.positions, r.velocities, r.accelerations, lim).ok
    # the samples are the exact integration of those jerks (dynamics hold to round-off)
    A, B = discretisation(DT)
    X = x0.copy()
    for k in range(M - 1):
        X = A @ X + B[:, None] * r.jerks[k]
        np.testing.assert_allclose(X, r.states[:, k + 1], atol=1e-9)
