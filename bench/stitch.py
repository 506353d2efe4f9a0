#!/usr/bin/env python3
"""Stitcher latency and quality on noisy synthetic chunks (issue 5, DESIGN §6).

For each backend (mpc, ruckig), mode (tracking, settle, tracking+stitching)
and DoF: median / p99 latency of one `Stitcher.process` call (validation,
alignment, generation, settle tail, limit check, fallback logic: everything a
chunk costs), RMS error against the reference, max |v|/|a|/|j| over the
limit, and the jump at the seam against the execution state. Seeded; the
first `--warmup` calls (shape set-up, OSQP set-up) are excluded. `min_ms` (the
fastest call) indicates the uncontended cost on a shared, busy machine.

Chunks: per joint a sinusoid (amplitude 0.02-0.3 rad, 0.1-0.6 Hz) plus white
noise (sigma 3 mrad), dt = 0.02 s, limits v/a/j = 5/20/20. tracking/settle
start each chunk from the reference's true state (a measured robot state);
tracking+stitching feeds consecutive chunks, each arriving after 10 executed
samples and 0-1 sample of extra delay, with the policy's prediction shifted
by up to 1 cm (chunk-to-chunk disagreement). All joints are continuous.
Backends: `mpc` (closed form; exact dual active set for joints where a bound
binds), `mpc-osqp` (OSQP there, warm-started, finished by the active-set
method), `ruckig`. `constrained_frac` is the share of joint-solves in which a
bound was active.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.stitching import Chunk, Stitcher, StitchStatus
from report import add_json_option, report  # bench/report.py: shared table + JSON output

COLUMNS = ["backend", "mode", "dof", "horizon", "median_ms", "p99_ms", "min_ms", "rms_error", "max_v_ratio",
           "max_a_ratio", "max_j_ratio", "seam_jump_pos", "seam_jump_vel", "seam_jump_acc", "violations", "fallbacks",
           "constrained_frac", "samples"]


class Signal:
    """Smooth per-joint motion the synthetic policy is trying to follow."""

    def __init__(self, rng, dof):
        self.ph = rng.uniform(0, 2 * np.pi, dof)
        self.amp = rng.uniform(0.02, 0.3, dof)
        self.w = 2 * np.pi * rng.uniform(0.1, 0.6, dof)

    def state(self, t):
        x = self.w * t + self.ph
        return self.amp * np.sin(x), self.amp * self.w * np.cos(x), -self.amp * self.w**2 * np.sin(x)

    def chunk(self, rng, names, stamp, H, dt, offset=0.0):
        t = stamp + dt * np.arange(H)
        q = self.amp * np.sin(self.w * t[:, None] + self.ph) + rng.normal(0, 0.003, (H, len(names)))
        return Chunk(stamp, names, dt, q + offset)


def _rms(traj, chunk):
    """RMS error of the trajectory's samples against the chunk reference at the same times."""
    k = np.round((traj.t0_s - chunk.stamp_s) / chunk.dt_s).astype(int)
    n = min(len(traj.positions), len(chunk.positions) - k)
    return float(np.sqrt(np.mean((traj.positions[:n] - chunk.positions[k:k + n]) ** 2)))


def run_case(backend, mode, dof, H, reps, warmup, seed, dt=0.02):
    names = tuple(f"joint_{i}" for i in range(dof))
    stitching = mode == "tracking+stitching"
    cfg = StitcherConfig(joint_names=names, backend="ruckig" if backend == "ruckig" else "mpc",
                         qp_solver="osqp" if backend == "mpc-osqp" else "active_set",
                         mode="settle" if mode == "settle" else "tracking", dt=dt, v_max=5.0, a_max=20.0, j_max=20.0)
    st = Stitcher(cfg)
    rng = np.random.default_rng(seed)
    times, rms, ratios, seams = [], [], [], []
    viol = fallbacks = constrained = 0
    sig = Signal(rng, dof)
    now = 0.0
    for i in range(reps + warmup):
        if stitching and st.active is not None:
            now = now + 10 * dt + rng.uniform(0, dt)
            chunk = sig.chunk(rng, names, now - rng.uniform(0, dt), H, dt, rng.uniform(-0.01, 0.01, dof))
            measured = None
        else:
            sig = Signal(rng, dof)
            st.reset()
            now = 0.0
            chunk = sig.chunk(rng, names, now, H, dt)
            measured = sig.state(now)
        t0 = time.perf_counter()
        res = st.process(chunk, now, measured)
        elapsed = (time.perf_counter() - t0) * 1e3
        if i < warmup:
            continue
        times.append(elapsed)
        if res.status is StitchStatus.FAILED or not res.report.ok:
            viol += 1
            continue
        fallbacks += res.status is StitchStatus.FALLBACK
        constrained += res.constrained_joints
        rep = res.report
        ratios.append((rep.v_ratio, rep.a_ratio, rep.j_ratio))
        rms.append(_rms(res.trajectory, chunk))
        seams.append(res.seam_jump)
    r = np.array(ratios) if ratios else np.full((1, 3), np.nan)
    s = np.array(seams) if seams else np.full((1, 3), np.nan)
    return {
        "backend": backend, "mode": mode, "dof": dof, "horizon": H,
        "median_ms": float(np.median(times)), "p99_ms": float(np.percentile(times, 99)),
        "min_ms": float(np.min(times)),
        "rms_error": float(np.mean(rms)) if rms else float("nan"),
        "max_v_ratio": float(r[:, 0].max()), "max_a_ratio": float(r[:, 1].max()), "max_j_ratio": float(r[:, 2].max()),
        "seam_jump_pos": float(s[:, 0].max()), "seam_jump_vel": float(s[:, 1].max()),
        "seam_jump_acc": float(s[:, 2].max()), "violations": viol, "fallbacks": fallbacks,
        "constrained_frac": constrained / max(1, len(times) * dof), "samples": len(times),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dof", type=int, nargs="+", default=[12, 14])
    p.add_argument("--horizon", type=int, default=50)
    p.add_argument("--backends", nargs="+", default=["mpc", "mpc-osqp", "ruckig"],
                   choices=["mpc", "mpc-osqp", "ruckig"],
                   help="mpc: closed form + exact active set where bounds bind; mpc-osqp: OSQP there instead "
                        "(finished by the active-set method); ruckig: jerk-limited chaser")
    p.add_argument("--modes", nargs="+", default=["tracking", "settle", "tracking+stitching"],
                   choices=["tracking", "settle", "tracking+stitching"])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    add_json_option(p)
    args = p.parse_args(argv)
    rows = []
    for dof in args.dof:
        for backend in args.backends:
            for mode in args.modes:
                rows.append(run_case(backend, mode, dof, args.horizon, args.reps, args.warmup, args.seed))
    fmt = {k: ".3f" for k in ("median_ms", "p99_ms", "min_ms", "max_v_ratio", "max_a_ratio", "max_j_ratio",
                              "constrained_frac")}
    fmt.update({"rms_error": ".4f", "seam_jump_pos": ".1e", "seam_jump_vel": ".1e", "seam_jump_acc": ".1e"})
    report(rows, COLUMNS[:-1], args.json, fmt)
    return 0 if all(r["violations"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
