"""Stitcher workloads where bounds bind, and the public reference design rebuilt, measured in one run.

Used by `bench/stitch.py --suite binding`. The workloads and their limits (`offset`, `rough`, `tight`,
`rough+stitch`, `infeasible`; 12 DoF or ALOHA's 14) are `stitch_workloads.py`'s.

Every row's trajectories are checked twice: at the samples (`check_limits`) and as the bridge checks
them, on the interpolated curve (`trajectory.checks.check_trajectory`, the bridge's own function,
against the bridge's limits on 14 DoF and the stitcher's on 12): `violations` counts either.

Backends: ours through `Stitcher.process` (everything a chunk costs, including the stitcher's own
bridge check): `mpc` (closed form, DAQP where a bound binds, move blocking as configured:
`mpc_free_steps` 8, `mpc_block` 6), `mpc-unblocked` (the same with one jerk per step, the QP of the
code before move blocking), `mpc-active-set` (the numpy dual active set), `mpc-osqp`, `ruckig`
(the chaser); and the public reference's design rebuilt here, on the same chunks:
`ref-osqp` (one OSQP QP per joint on an Euler triple integrator, eps 1e-2, no polishing,
set up once and warm-started: the fastest way to run that design) and `ref-ruckig` (one
Ruckig update per waypoint: our stitcher with stride 1, lookahead 1).
"""
from __future__ import annotations

import time

import numpy as np
import osqp
import scipy.sparse as sp
from stitch_workloads import DT, ChunkSource, aloha_stitcher, limits_for, names_for  # bench/stitch_workloads.py

from plan_stack.trajectory.checks import check_trajectory
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import Limits, check_limits
from plan_stack.trajectory.stitch_limits import accept_limits
from plan_stack.trajectory.stitching import Stitcher, StitchStatus

BACKENDS = ("mpc", "mpc-unblocked", "mpc-active-set", "mpc-osqp", "ruckig", "ref-osqp", "ref-ruckig")


def interpolated_ok(names, q, v, a, lim: Limits) -> bool:
    """The bridge's own check of the curve a quintic-interpolating controller follows through samples
    [T, D] from the first one (its joints `names`, limits `lim` in that order)."""
    traj = Trajectory.on_grid(0.0, DT, names, q, v, a)
    return check_trajectory(traj, names, lim, 0.0).ok


class ReferenceOsqp:
    """The public reference's post-processing, rebuilt: per joint one OSQP QP on the Euler triple
    integrator q+ = q + dt v, v+ = v + dt a, a+ = a + dt j, states and jerks as variables, box
    limits on v, a, j, cost sum (q - r)^2 + 1e-6 |z|^2, eps 1e-2, no polishing. One solver per
    joint, set up once and warm-started (favourable to the reference)."""

    def __init__(self, H: int, lim: Limits) -> None:
        self.H, self.lim = H, lim
        self.solvers = []
        n = H  # samples 0..H-1, jerks 0..H-2
        nx = 3 * n + (n - 1)
        self.nx = nx
        P = sp.diags(np.concatenate([np.full(n, 2.0), np.full(2 * n + n - 1, 2e-6)]), format="csc")
        iq, iv, ia, ij = 0, n, 2 * n, 3 * n
        rows, cols, vals = [], [], []
        r = 0
        for k in range(n - 1):  # dynamics: x_{k+1} - x_k - dt * (next derivative) = 0
            for base, der in ((iq, iv), (iv, ia), (ia, ij)):
                rows += [r, r, r]
                cols += [base + k + 1, base + k, der + k]
                vals += [1.0, -1.0, -DT]
                r += 1
        for base in (iq, iv, ia):  # start state
            rows.append(r), cols.append(base), vals.append(1.0)
            r += 1
        n_eq = r
        for k in range(nx):  # bounds on every variable
            rows.append(r), cols.append(k), vals.append(1.0)
            r += 1
        self.A = sp.csc_matrix((vals, (rows, cols)), shape=(r, nx))
        self.n_eq, self.P = n_eq, P

    def solve(self, x0: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x0 [3, D], ref [H, D] -> q, v, a [H, D]."""
        H, D = ref.shape
        n, lim = self.H, self.lim
        out = np.empty((3, H, D))
        for d in range(D):
            if len(self.solvers) <= d:
                s = osqp.OSQP()
                s.setup(self.P, np.zeros(self.nx), self.A, np.zeros(self.A.shape[0]), np.zeros(self.A.shape[0]),
                        eps_abs=1e-2, eps_rel=1e-2, polishing=False, verbose=False, warm_starting=True)
                self.solvers.append(s)
            q = np.zeros(self.nx)
            q[:n] = -2.0 * ref[:, d]
            lo = np.concatenate([np.zeros(self.n_eq - 3), x0[:, d], np.full(n, -1e9), np.full(n, -lim.v_max[d]),
                                 np.full(n, -lim.a_max[d]), np.full(n - 1, -lim.j_max[d])])
            hi = np.concatenate([np.zeros(self.n_eq - 3), x0[:, d], np.full(n, 1e9), np.full(n, lim.v_max[d]),
                                 np.full(n, lim.a_max[d]), np.full(n - 1, lim.j_max[d])])
            s = self.solvers[d]
            s.update(q=q, l=lo, u=hi)
            res = s.solve(raise_error=False)
            x = res.x if res.x is not None else np.full(self.nx, np.nan)
            out[0, :, d], out[1, :, d], out[2, :, d] = x[:n], x[n:2 * n], x[2 * n:3 * n]
        return out


class BindingCase:
    """One (workload, backend, dof) row, run a few calls at a time (interleaved rounds)."""

    def __init__(self, workload: str, backend: str, dof: int, H: int, seed: int) -> None:
        self.workload, self.backend, self.dof, self.H = workload, backend, dof, H
        names, discrete = names_for(dof)
        lim = limits_for(workload, dof)
        self.mask = np.array([n in discrete for n in names])
        self.src = ChunkSource(workload, dof, H, seed, lim, self.mask)
        per_sample = backend == "ref-ruckig"
        base = aloha_stitcher() if dof == 14 else dict(joint_names=names, discrete_joints=discrete, **lim)
        base.update(dt=DT, backend="ruckig" if backend in ("ruckig", "ref-ruckig") else "mpc",
                    qp_solver={"mpc-osqp": "osqp", "mpc-active-set": "active_set"}.get(backend, "daqp"),
                    command_latency_s=0.0, stitch_len=3)
        if per_sample:
            base.update(ruckig_stride=1, ruckig_lookahead=1)
        if backend == "mpc-unblocked":
            base.update(mpc_block=1)
        self.cfg = StitcherConfig(**base)
        self.accept = accept_limits(self.cfg)
        self.interp_viol = 0
        self.st = Stitcher(self.cfg)
        self.st.prepare(H)
        self.ref = ReferenceOsqp(H, self.st.limits) if backend == "ref-osqp" else None
        self.times: list[float] = []
        self.viol = self.fallbacks = self.failed = self.constrained = self.calls = 0
        self.ratios: list[tuple[float, float, float]] = []
        self.rms: list[float] = []

    def run(self, calls: int, record: bool = True, period_s: float = 0.0) -> None:
        """`period_s` > 0: one call per period, as chunks arrive (caches and the CPU cool down in between)."""
        for _ in range(calls):
            if period_s > 0:
                time.sleep(period_s)
            chunk, now, measured = self.src.next()
            if measured is not None:
                self.st.reset()
            if self.ref is not None:
                self._run_reference(chunk, now, measured, record)
                continue
            t0 = time.perf_counter()
            res = self.st.process(chunk, now, measured)
            elapsed = (time.perf_counter() - t0) * 1e3
            if res.status is not StitchStatus.FAILED and self.workload == "rough+stitch":
                self.src.last = None if res.trajectory is None else self.src.last
            if not record:
                continue
            self.calls += 1
            self.times.append(elapsed)
            self.constrained += res.constrained_joints
            if res.status is StitchStatus.FAILED:
                self.failed += 1
                continue
            self.fallbacks += res.status is StitchStatus.FALLBACK
            if not res.report.ok:
                self.viol += 1
            if self.workload != "infeasible":
                # the emitted trajectory against the real limits (the infeasible start is outside them)
                c = ~self.mask
                tr = res.trajectory
                rep = check_limits(DT, tr.positions[:, c], tr.velocities[:, c], tr.accelerations[:, c],
                                   self.st.limits)
                interp = interpolated_ok(self.cfg.joint_names, tr.positions, tr.velocities, tr.accelerations,
                                         self.accept)
                self.interp_viol += not interp
                self.viol += (not rep.ok or not interp) and res.report.ok
                self.ratios.append((rep.v_ratio, rep.a_ratio, rep.j_ratio))
                k = round((tr.t0_s - chunk.stamp_s) / DT)
                n = min(len(tr.positions), len(chunk.positions) - k)
                self.rms.append(float(np.sqrt(np.mean((tr.positions[:n, c] - chunk.positions[k:k + n, c]) ** 2))))

    def _run_reference(self, chunk, now, measured, record) -> None:
        c = ~self.mask
        if measured is None:  # consecutive: start from the previous output at the new chunk's start
            prev = self._prev
            x0 = prev[:, 10]
        else:
            x0 = np.asarray(measured)[:, c]
        ref = chunk.positions[:, c]
        t0 = time.perf_counter()
        out = self.ref.solve(x0, ref)
        elapsed = (time.perf_counter() - t0) * 1e3
        self._prev = out
        if not record:
            return
        self.calls += 1
        self.times.append(elapsed)
        self.constrained += int(c.sum())  # every joint goes through the QP
        if not np.all(np.isfinite(out)):
            self.failed += 1
            return
        rep = check_limits(DT, out[0], out[1], out[2], self.st.limits)
        if self.workload != "infeasible":
            names = tuple(np.asarray(self.cfg.joint_names)[c])
            interp = interpolated_ok(names, out[0], out[1], out[2], self.accept.subset(np.flatnonzero(c)))
            self.interp_viol += not interp
            self.viol += not rep.ok or not interp
            self.ratios.append((rep.v_ratio, rep.a_ratio, rep.j_ratio))
            self.rms.append(float(np.sqrt(np.mean((out[0] - ref) ** 2))))
        else:
            self.viol += not rep.ok

    def row(self) -> dict:
        t = np.array(self.times)
        r = np.array(self.ratios) if self.ratios else np.full((1, 3), np.nan)
        n_cont = int((~self.mask).sum())
        return {
            "workload": self.workload, "backend": self.backend, "dof": self.dof, "horizon": self.H,
            "median_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)),
            "p99_ms": float(np.percentile(t, 99)), "min_ms": float(t.min()),
            "constrained_frac": self.constrained / max(1, self.calls * n_cont),
            "rms_error": float(np.mean(self.rms)) if self.rms else float("nan"),
            "max_v_ratio": float(r[:, 0].max()), "max_a_ratio": float(r[:, 1].max()),
            "max_j_ratio": float(r[:, 2].max()), "violations": self.viol, "interp_violations": self.interp_viol,
            "fallbacks": self.fallbacks,
            "failed": self.failed, "samples": self.calls,
        }


COLUMNS = ["workload", "backend", "dof", "median_ms", "p90_ms", "p99_ms", "min_ms", "constrained_frac", "rms_error",
           "max_v_ratio", "max_a_ratio", "max_j_ratio", "violations", "interp_violations", "fallbacks", "failed",
           "x_reference", "paced_hz",
           "samples"]

#: The slow exact numpy active set gets fewer calls (it takes ~100x longer on binding chunks).
SLOW_BACKENDS = {"mpc-active-set": 0.1}


def run_binding(workloads, backends, dofs, H, reps, warmup, seed, rounds=5, paced_hz: float = 0.0) -> list[dict]:
    """`paced_hz` > 0: each case's calls come at that rate instead of back to back."""
    period_s = 1.0 / paced_hz if paced_hz > 0 else 0.0
    cases = [BindingCase(w, b, d, H, seed) for d in dofs for w in workloads for b in backends]
    for case in cases:
        case.run(max(2, warmup if case.backend not in SLOW_BACKENDS else 2), record=False)
    for _ in range(rounds):
        for case in cases:
            n = max(1, round(reps * SLOW_BACKENDS.get(case.backend, 1.0) / rounds))
            case.run(n, period_s=period_s)
    rows = [{**case.row(), "paced_hz": paced_hz} for case in cases]
    ref = {(r["workload"], r["dof"], "mpc" if r["backend"] == "ref-osqp" else "ruckig"): r["median_ms"]
           for r in rows if r["backend"] in ("ref-osqp", "ref-ruckig")}
    for r in rows:
        family = "ruckig" if "ruckig" in r["backend"] else "mpc"
        base = ref.get((r["workload"], r["dof"], family), float("nan"))
        r["x_reference"] = base / r["median_ms"]
    return rows
