"""Per-joint triple-integrator MPC (DESIGN §6) with a closed-form fast path.

Each continuous joint is an independent triple integrator with piecewise-
constant jerk over each sample period (exact zero-order-hold discretisation,
so the samples (q, v, a) are the knots of a jerk-limited piecewise cubic that
a quintic-interpolating trajectory controller reproduces exactly):

    q+ = q + dt v + dt²/2 a + dt³/6 j,   v+ = v + dt a + dt²/2 j,   a+ = a + dt j

Sample 0 is the fixed start state x0 = (q, v, a); the decision variables are
the jerks j_0..j_{N-1} (N = M - 1 for M samples). Cost, summed over t = 1..N:

    w_trk (q_t - r_t)² + w_vel v_t² + w_acc a_t² + w_jerk Σ j²
    + settle only: w_term (q_N - r_N)² + w_stop_v v_N² + w_stop_a a_N²

subject to |v_t| <= v_max, |a_t| <= a_max, |j_t| <= j_max, q_min <= q_t <= q_max,
with the limits shrunk by `limit_margin` so the solver's tolerance can never
push an emitted sample past the real limit.

Structure exploited: the Hessian depends only on (N, dt, weights, mode), not on
the joint or the reference, so its Cholesky factorisation is done once per
shape and the unconstrained optimum of all joints is two small matrix
products. The unconstrained optimum of a strictly convex QP that satisfies
every bound *is* the constrained optimum, so OSQP (set up once per shape on
the sparse state-space form, warm-started from the closed-form solution) runs
only for joints where a bound binds. The jerks it returns are re-integrated
exactly from x0, so dynamics and the start state hold to round-off.
"""
from __future__ import annotations

import dataclasses
import enum
import time

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from plan_stack.trajectory.limits import Limits, TrajectoryError

__all__ = ["MpcWeights", "MpcStatus", "MpcResult", "JointMpc", "discretisation", "condensed"]


@dataclasses.dataclass(frozen=True)
class MpcWeights:
    """Cost weights (physical units: rad, rad/s, rad/s², rad/s³)."""

    tracking: float = 1.0
    velocity: float = 0.0
    acceleration: float = 1e-5
    jerk: float = 1e-7
    terminal: float = 10.0
    stop_velocity: float = 1.0
    stop_acceleration: float = 1e-2

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not np.isfinite(v) or v < 0:
                raise TrajectoryError(f"{f.name}: weight must be finite and >= 0, got {v!r}")
        if self.jerk <= 0:
            raise TrajectoryError(f"jerk: weight must be > 0 (it makes the QP strictly convex), got {self.jerk!r}")


class MpcStatus(enum.Enum):
    OK = "ok"  # every joint solved to optimality
    SOLVER_FAILED = "solver_failed"  # OSQP did not converge (or found the QP infeasible) for some joint


@dataclasses.dataclass(frozen=True)
class MpcResult:
    """Samples [M, D] (row 0 = x0), jerks [M-1, D] and solver bookkeeping."""

    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray
    jerks: np.ndarray
    status: MpcStatus
    constrained_joints: tuple[int, ...]  # joints that needed OSQP
    failed_joints: tuple[int, ...]
    iterations: int  # OSQP ADMM iterations summed over joints
    solve_ms: float


def discretisation(dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact ZOH matrices (A [3,3], B [3]) of the triple integrator."""
    A = np.array([[1.0, dt, dt * dt / 2], [0.0, 1.0, dt], [0.0, 0.0, 1.0]])
    B = np.array([dt**3 / 6, dt * dt / 2, dt])
    return A, B


def condensed(n_steps: int, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """States after each step as T x0 + G j.

    Returns T [3, N, 3] and G [3, N, N] (component q/v/a, step k -> state k+1).
    """
    A, B = discretisation(dt)
    T = np.zeros((3, n_steps, 3))
    G = np.zeros((3, n_steps, n_steps))
    Ak = np.eye(3)
    AkB = [B]
    for k in range(n_steps):
        Ak = A @ Ak
        T[:, k, :] = Ak
        if k:
            AkB.append(A @ AkB[-1])
    for k in range(n_steps):
        for i in range(k + 1):
            G[:, k, i] = AkB[k - i]
    return T, G


class _Shape:
    """Everything that depends only on (N, dt, weights, settle): built once, reused."""

    def __init__(self, n_steps: int, dt: float, w: MpcWeights, settle: bool) -> None:
        N = n_steps
        self.n = N
        self.dt = dt
        T, G = condensed(N, dt)
        self.T_all = T.reshape(3 * N, 3)
        self.G_all = G.reshape(3 * N, N)
        wq = np.full(N, w.tracking)
        wv = np.full(N, w.velocity)
        wa = np.full(N, w.acceleration)
        if settle:
            wq[-1] += w.terminal
            wv[-1] += w.stop_velocity
            wa[-1] += w.stop_acceleration
        self.wq, self.wv, self.wa, self.wj = wq, wv, wa, w.jerk
        Gq, Gv, Ga = G
        Tq, Tv, Ta = T
        H = Gq.T @ (wq[:, None] * Gq) + Gv.T @ (wv[:, None] * Gv) + Ga.T @ (wa[:, None] * Ga) + w.jerk * np.eye(N)
        self.hessian = H  # cost = j'Hj + 2 j'c + const
        cho = scipy.linalg.cho_factor(H)
        Cx = Gq.T @ (wq[:, None] * Tq) + Gv.T @ (wv[:, None] * Tv) + Ga.T @ (wa[:, None] * Ta)
        self.Kx = -scipy.linalg.cho_solve(cho, Cx)  # [N, 3]
        self.Kr = scipy.linalg.cho_solve(cho, Gq.T * wq[None, :])  # [N, N]
        self.Lx = self.T_all + self.G_all @ self.Kx  # [3N, 3]
        self.Lr = self.G_all @ self.Kr  # [3N, N]
        self._osqp = None

    # --- sparse state-space QP for OSQP, in scaled units (q, dt v, dt² a, dt³ j) --------

    def osqp(self, settings: dict):
        """The OSQP solver of this shape (set up on first use, then only updated)."""
        if self._osqp is None:
            import osqp

            N, dt = self.n, self.dt
            nv = 4 * N
            pd = np.empty(nv)
            pd[0::4] = 2 * self.wq
            pd[1::4] = 2 * self.wv / dt**2
            pd[2::4] = 2 * self.wa / dt**4
            pd[3::4] = 2 * self.wj / dt**6
            P = sp.diags(pd, format="csc")
            As = np.array([[1.0, 1.0, 0.5], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
            Bs = np.array([1 / 6, 0.5, 1.0])
            rows, cols, vals = [], [], []
            for k in range(N):
                for c in range(3):
                    r = 3 * k + c
                    rows.append(r); cols.append(4 * k + c); vals.append(1.0)  # s_{k+1}
                    rows.append(r); cols.append(4 * k + 3); vals.append(-Bs[c])  # j_k
                    if k:
                        for cc in range(3):
                            if As[c, cc]:
                                rows.append(r); cols.append(4 * (k - 1) + cc); vals.append(-As[c, cc])
            dyn = sp.csc_matrix((vals, (rows, cols)), shape=(3 * N, nv))
            A = sp.vstack([dyn, sp.identity(nv)], format="csc")
            self._As = As
            solver = osqp.OSQP()
            solver.setup(P, np.zeros(nv), A, np.zeros(A.shape[0]), np.zeros(A.shape[0]), **settings)
            self._osqp = solver
        return self._osqp

    def osqp_vectors(self, x0: np.ndarray, ref: np.ndarray, lim: Limits, d: int):
        """q, l, u of joint d (x0 [3], ref [N]) in the scaled sparse form."""
        N, dt = self.n, self.dt
        s0 = np.array([x0[0], dt * x0[1], dt * dt * x0[2]])
        qv = np.zeros(4 * N)
        qv[0::4] = -2 * self.wq * ref
        dyn = np.zeros(3 * N)
        dyn[:3] = self._As @ s0
        lo = np.empty(4 * N)
        hi = np.empty(4 * N)
        lo[0::4], hi[0::4] = lim.q_min[d], lim.q_max[d]
        lo[1::4], hi[1::4] = -dt * lim.v_max[d], dt * lim.v_max[d]
        lo[2::4], hi[2::4] = -dt**2 * lim.a_max[d], dt**2 * lim.a_max[d]
        lo[3::4], hi[3::4] = -dt**3 * lim.j_max[d], dt**3 * lim.j_max[d]
        return qv, np.concatenate([dyn, lo]), np.concatenate([dyn, hi])

    def scaled_x(self, states: np.ndarray, jerks: np.ndarray) -> np.ndarray:
        """Pack states [3N] (q..,v..,a..) and jerks [N] of one joint into the OSQP vector."""
        N, dt = self.n, self.dt
        x = np.empty(4 * N)
        x[0::4] = states[:N]
        x[1::4] = dt * states[N:2 * N]
        x[2::4] = dt * dt * states[2 * N:]
        x[3::4] = dt**3 * jerks
        return x


def _violates(S: np.ndarray, J: np.ndarray, lim: Limits, n: int) -> np.ndarray:
    """Joints [D] whose states S [3N, D] or jerks J [N, D] leave the box."""
    q, v, a = S[:n], S[n:2 * n], S[2 * n:]
    return (
        np.any(np.abs(v) > lim.v_max, axis=0)
        | np.any(np.abs(a) > lim.a_max, axis=0)
        | np.any(np.abs(J) > lim.j_max, axis=0)
        | np.any(q < lim.q_min, axis=0)
        | np.any(q > lim.q_max, axis=0)
    )


class JointMpc:
    """Solves the per-joint MPC for all joints of a chunk at once.

    Shapes (horizon, dt, mode) are cached: the first call of a shape pays for
    the factorisation and the OSQP setup, later calls only update vectors.
    Not thread-safe (one instance per stitcher).
    """

    def __init__(
        self,
        weights: MpcWeights = MpcWeights(),
        limit_margin: float = 1e-3,
        eps: float = 1e-7,
        max_iter: int = 4000,
        time_limit_s: float = 0.0,
    ) -> None:
        if not 0 <= limit_margin < 0.5:
            raise TrajectoryError(f"limit_margin: must be in [0, 0.5), got {limit_margin!r}")
        self.weights = weights
        self.limit_margin = limit_margin
        self._settings = dict(
            verbose=False, eps_abs=eps, eps_rel=eps, max_iter=max_iter, polish=True,
            polish_refine_iter=5, warm_starting=True,
        )
        if time_limit_s > 0:
            self._settings["time_limit"] = time_limit_s
        self._shapes: dict[tuple[int, float, bool], _Shape] = {}

    def shape(self, n_steps: int, dt: float, settle: bool) -> _Shape:
        key = (n_steps, float(dt), bool(settle))
        s = self._shapes.get(key)
        if s is None:
            s = self._shapes[key] = _Shape(n_steps, dt, self.weights, settle)
        return s

    def qp_limits(self, limits: Limits) -> Limits:
        """The (shrunk) limits the QP is posed with."""
        return limits.scaled(1.0 - self.limit_margin)

    def solve(self, x0: np.ndarray, ref: np.ndarray, dt: float, limits: Limits, settle: bool = False) -> MpcResult:
        """x0 [3, D] start state (q, v, a rows); ref [M, D] reference (row 0 unused)."""
        t0 = time.perf_counter()
        M, D = ref.shape
        if x0.shape != (3, D) or limits.dof != D or M < 2:
            raise TrajectoryError(f"mpc: shapes x0 {x0.shape}, ref {ref.shape}, limits {limits.dof} do not match")
        N = M - 1
        sh = self.shape(N, dt, settle)
        lim = self.qp_limits(limits)
        R = ref[1:]
        J = sh.Kx @ x0 + sh.Kr @ R  # [N, D]
        S = sh.Lx @ x0 + sh.Lr @ R  # [3N, D]
        bad = np.flatnonzero(_violates(S, J, lim, N))
        failed: list[int] = []
        iters = 0
        if bad.size:
            solver = sh.osqp(self._settings)
            for d in bad:
                qv, lo, hi = sh.osqp_vectors(x0[:, d], R[:, d], lim, int(d))
                solver.update(q=qv, l=lo, u=hi)
                solver.warm_start(x=sh.scaled_x(S[:, d], J[:, d]))
                res = solver.solve()
                iters += int(res.info.iter)
                if res.info.status_val != 1 or res.x is None or not np.all(np.isfinite(res.x)):
                    failed.append(int(d))
                    continue
                jd = np.clip(res.x[3::4] / dt**3, -lim.j_max[d], lim.j_max[d])
                J[:, d] = jd
                S[:, d] = sh.T_all @ x0[:, d] + sh.G_all @ jd
        q = np.vstack([x0[0:1], S[:N]])
        v = np.vstack([x0[1:2], S[N:2 * N]])
        a = np.vstack([x0[2:3], S[2 * N:]])
        return MpcResult(
            q, v, a, J,
            MpcStatus.SOLVER_FAILED if failed else MpcStatus.OK,
            tuple(int(d) for d in bad), tuple(failed), iters, (time.perf_counter() - t0) * 1e3,
        )
