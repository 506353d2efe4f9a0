"""Per-joint triple-integrator MPC with a closed-form fast path.

Each continuous joint is an independent triple integrator with piecewise-
constant jerk over each sample period (exact zero-order-hold discretisation,
so the samples (q, v, a) are the knots of a jerk-limited piecewise cubic that
a quintic-interpolating trajectory controller reproduces exactly):

    q+ = q + dt v + dt²/2 a + dt³/6 j,   v+ = v + dt a + dt²/2 j,   a+ = a + dt j

Sample 0 is the fixed start state x0 = (q, v, a); the decision variables are
the jerks j_0..j_{N-1} (N = M - 1 for M samples). Cost, summed over t = 1..N:

    w_trk (q_t - r_t)² + w_vel v_t² + w_acc a_t² + w_jerk Σ j²
    + settle only: w_term (q_N - r_N)² + w_stop_v v_N² + w_stop_a a_N²

subject to |v_t| <= v_max, |a_t| <= a_max, |j_t| <= j_max, q_min <= q_t <= q_max
and the brake condition |v_t + c a_t| <= v_max (c = a_max / 2 j_max: from every
emitted sample a jerk-limited stop stays inside v_max, so any sample can be the
next chunk's start state), with the limits shrunk by `limit_margin` so round-off
can never push an emitted sample past the real limit. Position bounds bind
samples only; between two samples the cubic can still pass a bound where the
velocity changes sign, by at most a_max dt²/8 below the nearer sample. So from
the second step on, the position bounds are moved inward by that much
(`position_inset`): the curve between samples, not only the samples, stays in
range (the first step keeps the plain bound: a start at rest on a bound could
not move that far in one step).

Move blocking (`blocking` = (free steps, block length); the stitcher's
`mpc_free_steps`/`mpc_block`, 8 and 6 by default): the first free steps each
have their own jerk, later steps share one jerk per block. The jerk is still
constant over each sample period, so samples, limits and the interpolated
curve stay exact; what changes is what is optimised: fewer variables in the
tail (which the next chunk replaces anyway), so fewer constraints can be
active at once and an active-set solve takes fewer steps. The jerk cost stays
per step (w_jerk j'j = w_jerk u'B'Bu). OSQP's sparse form keeps a jerk per step.

Structure exploited: the Hessian depends only on (N, dt, weights, mode), not on
the joint or the reference, so its Cholesky factorisation (and H⁻¹) is done
once per shape and the unconstrained optimum of all joints is two small matrix
products. The unconstrained optimum of a strictly convex QP that satisfies
every bound *is* the constrained optimum, so a QP solver runs only for joints
where a bound binds: DAQP (`qp_solver="daqp"`, default: a dual active-set
solver in C that keeps an LDL' factorisation of the active set and updates it
one constraint at a time; one workspace per shape and brake coefficient, set up
once, only the gradient and bounds change per joint), the same dual method in
numpy on the condensed problem (`qp_solver="active_set"`: the readable
reference, about 100x slower because every step refactorises), or OSQP (set up once per shape on
the sparse state-space form, warm-started from the closed-form solution) whose
active set then warm-starts the active-set method, which certifies or
corrects it: OSQP's ADMM alone can stop short of the optimum on these
ill-conditioned problems. The jerks are re-integrated exactly from x0, so
dynamics and the start state hold to round-off.
"""
from __future__ import annotations

import dataclasses
import enum
import time
from typing import Any

import daqp
import numpy as np
import osqp
import scipy.linalg
import scipy.sparse as sp
from osqp import SolverStatus

from plan_stack.trajectory.active_set import QpStatus, dual_active_set
from plan_stack.trajectory.limits import Limits, SampledStates, TrajectoryError

QP_SOLVERS = ("daqp", "active_set", "osqp")

__all__ = ["QP_SOLVERS", "MpcWeights", "MpcStatus", "MpcResult", "JointMpc", "discretisation", "condensed",
           "brake_coefficient", "position_inset"]


@dataclasses.dataclass(frozen=True)
class MpcWeights:
    """Cost weights (physical units: rad, rad/s, rad/s², rad/s³)."""

    tracking: float = 1.0
    velocity: float = 0.0
    acceleration: float = 1e-5
    jerk: float = 1e-6
    terminal: float = 1.0
    stop_velocity: float = 1e-3
    stop_acceleration: float = 1e-6

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
class MpcResult(SampledStates):
    """Samples [M, D] (row 0 = x0), jerks [M-1, D] and solver bookkeeping."""

    states: np.ndarray  # [3, M, D]: positions, velocities, accelerations
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
    T = np.empty((3, n_steps, 3))
    AkB = np.empty((n_steps, 3))  # A^m B
    Ak = np.eye(3)
    for k in range(n_steps):
        AkB[k] = Ak @ B
        Ak = A @ Ak
        T[:, k, :] = Ak
    lag = np.arange(n_steps)[:, None] - np.arange(n_steps)[None, :]  # k - i
    G = np.where(lag[None] >= 0, AkB[np.clip(lag, 0, None)].transpose(2, 0, 1), 0.0)
    return T, G


def blocking(n_steps: int, free_steps: int, block: int) -> np.ndarray:
    """[N, n_u] 0/1 matrix mapping the decision variables to the per-step jerks (move blocking): the first
    `free_steps` steps each have their own jerk, the later ones share one jerk per `block` steps (the last
    block may be shorter). block <= 1: the identity."""
    if block <= 1 or n_steps <= free_steps:
        return np.eye(n_steps)
    group = np.concatenate([np.arange(free_steps),
                            free_steps + (np.arange(n_steps - free_steps) // block)])
    B = np.zeros((n_steps, int(group[-1]) + 1))
    B[np.arange(n_steps), group] = 1.0
    return B


class _Shape:
    """Everything that depends only on (N, dt, weights, settle, blocking): built once, reused.

    With move blocking the decision variables are u (n_u <= N) and the jerks are B u; `G_all`, the
    Hessian and the gains are in u (a blocked shape serves the condensed solvers, not OSQP's sparse form).
    """

    def __init__(self, n_steps: int, dt: float, w: MpcWeights, settle: bool, free_steps: int = 0,
                 block: int = 1) -> None:
        N = n_steps
        self.n = N
        self.dt = dt
        T, G = condensed(N, dt)
        B = blocking(N, free_steps, block)
        self.B = B
        self.nu = nu = B.shape[1]
        G = G @ B  # [3, N, n_u]
        self.T_all = T.reshape(3 * N, 3)
        self.G_all = G.reshape(3 * N, nu)
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
        H = Gq.T @ (wq[:, None] * Gq) + Gv.T @ (wv[:, None] * Gv) + Ga.T @ (wa[:, None] * Ga) + w.jerk * (B.T @ B)
        self.hessian = H  # cost = j'Hj + 2 j'c + const
        cho = scipy.linalg.cho_factor(H)
        Cx = Gq.T @ (wq[:, None] * Tq) + Gv.T @ (wv[:, None] * Tv) + Ga.T @ (wa[:, None] * Ta)
        self.Kx = -scipy.linalg.cho_solve(cho, Cx)  # [N, 3]
        self.Kr = scipy.linalg.cho_solve(cho, Gq.T * wq[None, :])  # [N, N]
        self.Lx = self.T_all + self.G_all @ self.Kx  # [3N, 3]
        self.Lr = self.G_all @ self.Kr  # [3N, N]
        # [jerks; states] of every joint in one product with [x0; r]: [n_u + 3N, 3 + N]
        self.gains = np.ascontiguousarray(np.block([[self.Kx, self.Kr], [self.Lx, self.Lr]]))
        self.T_all_t = np.ascontiguousarray(self.T_all.T)  # [3, 3N]: x0ᵀ Tᵀ gives each joint's free response as a row
        self.H_inv = scipy.linalg.cho_solve(cho, np.eye(nu))
        self.C_all = np.vstack([self.G_all, np.eye(nu)])  # rows: q, v, a (after each step), u
        self._osqp = None

    # --- sparse state-space QP for OSQP, in scaled units (q, dt v, dt² a, dt³ j) --------

    def osqp(self, settings: dict) -> Any:
        """The OSQP solver of this shape (set up on first use, then only updated)."""
        if self._osqp is None:
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
                    rows += [r, r]
                    cols += [4 * k + c, 4 * k + 3]
                    vals += [1.0, -Bs[c]]  # s_{k+1}, j_k
                    if k:
                        for cc in range(3):
                            if As[c, cc]:
                                rows.append(r)
                                cols.append(4 * (k - 1) + cc)
                                vals.append(-As[c, cc])
            dyn = sp.csc_matrix((vals, (rows, cols)), shape=(3 * N, nv))
            # Brake rows: dt·(v + c a) = ṽ + (c/dt) ã; c is per joint, set by `osqp_vectors` via Ax_idx.
            ks = np.arange(N)
            brake = sp.csc_matrix((np.concatenate([np.ones(N), np.ones(N)]),
                                   (np.concatenate([ks, ks]), np.concatenate([4 * ks + 1, 4 * ks + 2]))),
                                  shape=(N, nv))
            A = sp.vstack([dyn, sp.identity(nv), brake], format="csc")
            A.sort_indices()
            first_brake_row = 3 * N + nv
            self._brake_idx = np.array([
                A.indptr[4 * i + 2] + int(np.flatnonzero(A.indices[A.indptr[4 * i + 2]:A.indptr[4 * i + 3]]
                                                         == first_brake_row + i)[0]) for i in range(N)])
            self._As = As
            solver = osqp.OSQP()
            solver.setup(P, np.zeros(nv), A, np.zeros(A.shape[0]), np.zeros(A.shape[0]), **settings)
            self._osqp = solver
        return self._osqp

    def osqp_vectors(self, x0: np.ndarray, ref: np.ndarray, lim: Limits, d: int,
                     inset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
        """q, l, u, brake-row coefficients of joint d (x0 [3], ref [N]) in the scaled sparse form."""
        N, dt = self.n, self.dt
        s0 = np.array([x0[0], dt * x0[1], dt * dt * x0[2]])
        qv = np.zeros(4 * N)
        qv[0::4] = -2 * self.wq * ref
        dyn = np.zeros(3 * N)
        dyn[:3] = self._As @ s0
        lo = np.empty(4 * N)
        hi = np.empty(4 * N)
        lo[0::4], hi[0::4] = lim.q_min[d] + inset, lim.q_max[d] - inset
        lo[1::4], hi[1::4] = -dt * lim.v_max[d], dt * lim.v_max[d]
        lo[2::4], hi[2::4] = -dt**2 * lim.a_max[d], dt**2 * lim.a_max[d]
        lo[3::4], hi[3::4] = -dt**3 * lim.j_max[d], dt**3 * lim.j_max[d]
        vb = np.full(N, dt * lim.v_max[d])
        coeff = np.full(N, brake_coefficient(lim)[d] / dt)
        return qv, np.concatenate([dyn, lo, -vb]), np.concatenate([dyn, hi, vb]), coeff

    def scaled_x(self, states: np.ndarray, jerks: np.ndarray) -> np.ndarray:
        """Pack states [3N] (q..,v..,a..) and jerks [N] of one joint into the OSQP vector."""
        N, dt = self.n, self.dt
        x = np.empty(4 * N)
        x[0::4] = states[:N]
        x[1::4] = dt * states[N:2 * N]
        x[2::4] = dt * dt * states[2 * N:]
        x[3::4] = dt**3 * jerks
        return x


def brake_coefficient(lim: Limits) -> np.ndarray:
    """c [D] such that |v + c·a| <= v_max guarantees a jerk-limited stop without exceeding v_max.

    Braking from acceleration a changes v by a²/(2 j_max) <= |a|·a_max/(2 j_max) = c|a|: every
    sample the MPC emits (any of which can become the next chunk's start state) is recoverable.
    """
    return lim.a_max / (2.0 * lim.j_max)


def position_inset(n_steps: int, dt: float, lim: Limits) -> np.ndarray:
    """[N, D] how far each step's position bound moves inward: a_max dt²/8 (the most a constant-jerk cubic
    dips past the nearer of two samples), from the second step on."""
    inset = np.broadcast_to(lim.a_max * (dt * dt / 8.0), (n_steps, lim.dof)).copy()
    inset[0] = 0.0
    return inset


def _dense_constraints(sh: _Shape, x0: np.ndarray, lim: Limits, d: int,
                       inset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Condensed constraints of joint d, rows scaled by their limit: lo <= C j <= hi.

    Row blocks: q, v, a (after each step; N each), u (n_u), brake (v + c·a; N).
    """
    N, nu = sh.n, sh.nu
    c = float(brake_coefficient(lim)[d])
    free = sh.T_all @ x0
    fq, fv, fa = free[:N], free[N:2 * N], free[2 * N:]
    free_b = fv + c * fa
    finite = [abs(x) for x in (lim.q_min[d], lim.q_max[d]) if np.isfinite(x)]
    qs = max([1.0, *finite])
    vb, ab, jb = np.full(N, lim.v_max[d]), np.full(N, lim.a_max[d]), np.full(nu, lim.j_max[d])
    big = np.concatenate([np.full(N, qs), vb, ab, jb, vb])
    lo = np.concatenate([lim.q_min[d] + inset - fq, -vb - fv, -ab - fa, -jb, -vb - free_b])
    hi = np.concatenate([lim.q_max[d] - inset - fq, vb - fv, ab - fa, jb, vb - free_b])
    C = np.vstack([sh.C_all, sh.G_all[N:2 * N] + c * sh.G_all[2 * N:]])
    return C / big[:, None], lo / big, hi / big


def _osqp_active_set(res: Any, n_steps: int) -> list[tuple[int, float]]:
    """Active bounds from OSQP's duals (< 0: lower, > 0: upper) as condensed rows (q, v, a, j blocks)."""
    if res.y is None or not np.all(np.isfinite(res.y)):
        return []
    yb = res.y[3 * n_steps:]  # after the dynamics rows: 4 bound rows per step (q, v, a, j), then N brake rows
    thr = 1e-6 * max(1.0, float(np.max(np.abs(yb), initial=0.0)))
    out = []
    for idx in np.flatnonzero(np.abs(yb) > thr):
        if idx < 4 * n_steps:
            k, comp = divmod(int(idx), 4)
            row = comp * n_steps + k
        else:
            row = int(idx)  # brake block: condensed rows 4N.. in the same order
        out.append((row, 1.0 if yb[idx] < 0 else -1.0))
    return out


def _violates(S: np.ndarray, J: np.ndarray, lim: Limits, c: np.ndarray, n: int, bounds: tuple) -> np.ndarray:
    """Joints [D] whose states S [3N, D] or jerks J [N, D] leave the box (or the brake condition).

    `bounds` = (|v|, |a| bounds stacked [2N, D], lower and upper position bounds [N, D] (the inset applied;
    None without position limits)), as `JointMpc._inset_and_bounds` caches them."""
    va, q_lo, q_hi = bounds
    v, a = S[n:2 * n], S[2 * n:]
    bad = (np.abs(S[n:]) > va).any(0)
    bad |= (np.abs(v + c * a) > lim.v_max).any(0)
    bad |= (np.abs(J) > lim.j_max).any(0)
    if q_lo is not None:
        q = S[:n]
        bad |= ((q < q_lo) | (q > q_hi)).any(0)
    return bad


def _bounds(n: int, lim: Limits, inset: np.ndarray) -> tuple[Any, Any, Any]:
    """(|v| then |a| bounds [2N, D], position bounds moved inward by `inset` [N, D] or None): what `_violates`
    compares the unconstrained solution with, built once per (N, limits)."""
    va = np.concatenate([np.broadcast_to(lim.v_max, (n, lim.dof)), np.broadcast_to(lim.a_max, (n, lim.dof))])
    if not lim.has_position_limits:
        return va, None, None
    return va, lim.q_min + inset, lim.q_max - inset


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
        eps: float = 1e-4,
        max_iter: int = 4000,
        time_limit_s: float = 0.0,
        qp_solver: str = "daqp",
        active_set_max_iter: int = 0,
        blocking: tuple[int, int] = (0, 1),
    ) -> None:
        if not 0 <= limit_margin < 0.5:
            raise TrajectoryError(f"limit_margin: must be in [0, 0.5), got {limit_margin!r}")
        if qp_solver not in QP_SOLVERS:
            raise TrajectoryError(f"qp_solver: must be one of {QP_SOLVERS}, got {qp_solver!r}")
        #: cap on active-set steps per joint (DAQP and numpy); 0 = 10 x the number of jerks, more than
        #: any solve of these problems has needed (each step adds or drops one of <= 5N constraints)
        self.active_set_max_iter = active_set_max_iter
        self.weights = weights
        self.qp_solver = qp_solver
        if blocking[0] < 0 or blocking[1] < 1:
            raise TrajectoryError(f"blocking: (free steps >= 0, block length >= 1), got {blocking!r}")
        #: move blocking (free steps, block length) of the condensed solvers (DAQP, active set); OSQP: none
        self.blocking = (int(blocking[0]), int(blocking[1]))
        self.limit_margin = limit_margin
        self._settings = dict(
            verbose=False, eps_abs=eps, eps_rel=eps, max_iter=max_iter, polishing=True,
            polish_refine_iter=3, warm_starting=True, rho=1.0, check_termination=5,
        )
        if time_limit_s > 0:
            self._settings["time_limit"] = time_limit_s
        self._shapes: dict[tuple[int, float, bool], _Shape] = {}
        self._daqp: dict[tuple, daqp.Model] = {}
        self._qp_cache: tuple[Limits, Limits] | None = None  # (limits, the QP's shrunk limits) of the last call
        self._brake = np.zeros(0)
        self._inset_cache: dict[tuple[int, float], tuple[Limits, np.ndarray, tuple]] = {}
        self._daqp_per_joint: dict[int, tuple[Limits, tuple]] = {}  # id(shape) -> (QP limits, `_daqp_data`)

    def shape(self, n_steps: int, dt: float, settle: bool) -> _Shape:
        key = (n_steps, float(dt), bool(settle))
        s = self._shapes.get(key)
        if s is None:
            free, block = self.blocking if self.qp_solver != "osqp" else (0, 1)
            s = self._shapes[key] = _Shape(n_steps, dt, self.weights, settle, free, block)
        return s

    def _osqp_solve(self, sh: _Shape, x0: np.ndarray, r: np.ndarray, lim: Limits, d: int, s_unc: Any, j_unc: Any,
                    inset: np.ndarray) -> tuple[Any, int]:
        """OSQP on the sparse form of joint d, warm-started from the closed-form solution."""
        solver = sh.osqp(self._settings)
        qv, lo, hi, coeff = sh.osqp_vectors(x0, r, lim, d, inset)
        solver.update(q=qv, l=lo, u=hi, Ax=coeff, Ax_idx=sh._brake_idx)
        solver.warm_start(x=sh.scaled_x(s_unc, j_unc))
        res = solver.solve(raise_error=False)  # status is checked below
        return res, int(res.info.iter)

    def _daqp_model(self, sh: _Shape, c: float, has_q: bool) -> Any:
        """The DAQP workspace of (shape, brake coefficient, position rows): set up once."""
        N = sh.n
        key = (N, sh.dt, id(sh), c, has_q)
        model = self._daqp.get(key)
        if model is None:
            G = sh.G_all
            rows = [G[:N]] if has_q else []
            A = np.ascontiguousarray(np.vstack(rows + [G[N:], G[N:2 * N] + c * G[2 * N:]]))
            m = A.shape[0] + sh.nu
            model = daqp.Model()
            model.setup(np.ascontiguousarray(sh.hessian), np.zeros(sh.nu), A, np.ones(m), -np.ones(m))
            settings = model.settings
            settings["iter_limit"] = self.active_set_max_iter or 10 * N
            model.settings = settings
            self._daqp[key] = model
        return model

    def _daqp_joints(self, sh: _Shape, x0: np.ndarray, J: np.ndarray, lim: Limits, joints: np.ndarray,
                     inset: np.ndarray) -> tuple[np.ndarray, Any, int]:
        """DAQP on the condensed problem of each joint in `joints`: jerks as simple bounds, then q (when
        bounded), v, a and brake rows in physical units. A joint's bounds are fixed rows (its limits, cached
        per shape and limits) less the free response of its start state (zero jerk), one contiguous row per
        joint (what DAQP reads without a copy), built for all these joints in a few numpy operations; only
        the update and the solve run per joint. Returns (jerks [N, n], failed joint indices, iterations)."""
        N, nu = sh.n, sh.nu
        models, hi0, lo0, has_q, no_q = self._daqp_data(sh, lim, inset)
        free = x0[:, joints].T @ sh.T_all_t  # [n, 3N]: q, v, a after each step at zero jerk
        off = np.empty((len(joints), nu + 4 * N))  # rows: jerks (no offset), q, v, a, brake (v + c a)
        off[:, :nu] = 0.0
        off[:, nu:nu + 3 * N] = free
        off[:, nu + 3 * N:] = free[:, N:2 * N] + self._brake[joints, None] * free[:, 2 * N:]
        HI = hi0[joints] - off
        LO = lo0[joints] - off
        F = -(J[:, joints].T @ sh.hessian)  # [n, N]: rows of -(H J) (H symmetric), contiguous
        out = np.empty((len(joints), nu))
        failed: list[int] = []
        iters = 0
        for k, d in enumerate(joints.tolist()):
            model = models[d]
            if has_q[d]:
                model.update(f=F[k], bupper=HI[k], blower=LO[k])
            else:
                model.update(f=F[k], bupper=HI[k, no_q], blower=LO[k, no_q])
            x, _, flag, info = model.solve()
            iters += info["iterations"]
            if flag != 1:
                failed.append(d)
                x = J[:, d]
            out[k] = x
        bad = ~np.isfinite(out).all(axis=1)
        if bad.any():  # a solve that reported success with NaN/inf in it: failed too
            for k in np.flatnonzero(bad).tolist():
                failed.append(int(joints[k]))
                out[k] = J[:, joints[k]]
        return out.T, failed, int(iters)

    def _daqp_data(self, sh: _Shape, lim: Limits, inset: np.ndarray) -> Any:
        """(DAQP workspace per joint, upper and lower bound rows [D, nu + 4N] of a start at rest at zero (jerks,
        q, v, a, brake), whether each joint has position rows [D], the row indices without them): what
        `_daqp_joints` needs that depends only on the shape and the QP's limits, built once per pair."""
        cached = self._daqp_per_joint.get(id(sh))
        if cached is None or cached[0] is not lim:
            N, nu = sh.n, sh.nu
            has_q = np.isfinite(lim.q_min) | np.isfinite(lim.q_max)
            models = [self._daqp_model(sh, float(self._brake[d]), bool(has_q[d])) for d in range(lim.dof)]
            hi = np.empty((lim.dof, nu + 4 * N))
            hi[:, :nu] = lim.j_max[:, None]
            hi[:, nu:nu + N] = np.minimum(lim.q_max, 1e30)[:, None] - inset.T
            hi[:, nu + N:nu + 2 * N] = lim.v_max[:, None]
            hi[:, nu + 2 * N:nu + 3 * N] = lim.a_max[:, None]
            hi[:, nu + 3 * N:] = lim.v_max[:, None]
            lo = -hi
            lo[:, nu:nu + N] = np.maximum(lim.q_min, -1e30)[:, None] + inset.T
            no_q = np.concatenate([np.arange(nu), np.arange(nu + N, nu + 4 * N)])
            cached = self._daqp_per_joint[id(sh)] = (lim, (models, hi, lo, has_q, no_q))
        return cached[1]

    def _inset_and_bounds(self, n_steps: int, dt: float, lim: Limits) -> tuple[Any, Any]:
        """(`position_inset`, `_bounds`) of the QP's limits, cached per (N, dt, limits)."""
        key = (n_steps, float(dt))
        cache = self._inset_cache.get(key)
        if cache is None or cache[0] is not lim:
            inset = position_inset(n_steps, dt, lim)
            cache = self._inset_cache[key] = (lim, inset, _bounds(n_steps, lim, inset))
        return cache[1], cache[2]

    def qp_limits(self, limits: Limits) -> Limits:
        """The (shrunk) limits the QP is posed with (cached per Limits object)."""
        cache = self._qp_cache
        if cache is None or cache[0] is not limits:
            cache = self._qp_cache = (limits, limits.scaled(1.0 - self.limit_margin))
            self._brake = brake_coefficient(cache[1])
        return cache[1]

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
        Z = sh.gains @ np.concatenate([x0, R])  # unconstrained optimum: jerks [n_u, D], then states [3N, D]
        J, S = Z[:sh.nu], Z[sh.nu:]
        inset, bounds = self._inset_and_bounds(N, dt, lim)
        bad = np.flatnonzero(_violates(S, J, lim, self._brake, N, bounds))
        failed: list[int] = []
        iters = 0
        cap = self.active_set_max_iter or 10 * N
        if self.qp_solver == "daqp":
            if len(bad):
                Jb, failed, iters = self._daqp_joints(sh, x0, J, lim, bad, inset)
                ok = np.array([d not in failed for d in bad.tolist()], dtype=bool)
                good = bad[ok]
                jm = lim.j_max[good]
                J[:, good] = np.minimum(np.maximum(Jb[:, ok], -jm), jm)  # np.clip's values, less overhead
                S[:, good] = sh.T_all @ x0[:, good] + sh.G_all @ J[:, good]
        else:
            for d in (int(i) for i in bad):
                guess: list[tuple[int, float]] = []
                if self.qp_solver == "osqp":
                    res, n_it = self._osqp_solve(sh, x0[:, d], R[:, d], lim, d, S[:, d], J[:, d], inset[:, d])
                    iters += n_it
                    # Whatever OSQP ended with (solved, inaccurate, iteration cap, infeasible), the
                    # active-set method below decides exactly; OSQP's duals only warm-start it.
                    if res.info.status_val in (int(SolverStatus.OSQP_SOLVED),
                                               int(SolverStatus.OSQP_SOLVED_INACCURATE),
                                               int(SolverStatus.OSQP_MAX_ITER_REACHED)):
                        guess = _osqp_active_set(res, N)
                # Exact finish (or certificate): dual active set, warm-started from OSQP's active set.
                C, lo, hi = _dense_constraints(sh, x0[:, d], lim, d, inset[:, d])
                jd, qp_status, steps = dual_active_set(sh.H_inv, J[:, d], C, lo, hi, max_iter=cap, guess=guess)
                iters += steps
                if qp_status is not QpStatus.OPTIMAL or not np.all(np.isfinite(jd)):
                    failed.append(d)
                    continue
                jd = np.clip(jd, -lim.j_max[d], lim.j_max[d])
                J[:, d] = jd
                S[:, d] = sh.T_all @ x0[:, d] + sh.G_all @ jd
        out = np.empty((3, M, D))
        out[:, 0] = x0
        out[:, 1:] = S.reshape(3, N, D)
        return MpcResult(
            out, J if sh.nu == N else sh.B @ J,
            MpcStatus.SOLVER_FAILED if failed else MpcStatus.OK,
            tuple(bad.tolist()), tuple(failed), iters, (time.perf_counter() - t0) * 1e3,
        )
