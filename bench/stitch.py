#!/usr/bin/env python3
"""Stitcher latency and quality on noisy synthetic chunks.

For each backend (mpc, ruckig), mode (tracking, settle, tracking+stitching)
and DoF: median / p99 latency of one `Stitcher.process` call (validation,
alignment, generation, settle tail, limit check, fallback logic: everything a
chunk costs), RMS error against the reference, max |v|/|a|/|j| over the
limit, and the jump at the seam against the execution state. Seeded; the
first `--warmup` calls (shape set-up, OSQP set-up) are excluded. Every case's
calls are spread over `--rounds` interleaved rounds, so all rows are measured
over the same stretch of time on a shared machine whose speed drifts; compare
rows within one run. `min_ms` (the fastest call) indicates the uncontended cost.

Chunks: per joint a sinusoid (amplitude 0.02-0.3 rad, 0.1-0.6 Hz) plus white
noise (sigma 3 mrad), dt = 0.02 s, limits v/a/j = 5/20/20. tracking/settle
start each chunk from the reference's true state (a measured robot state);
tracking+stitching feeds consecutive chunks, each arriving after 10 executed
samples and 0-1 sample of extra delay, with the policy's prediction shifted
by up to 1 cm (chunk-to-chunk disagreement). All joints are continuous.
Backends: `mpc` (closed form; exact dual active set for joints where a bound
binds), `mpc-osqp` (OSQP there, warm-started, finished by the active-set
method), `ruckig` (the chaser, recomputed every `ruckig_stride` samples) and
`ruckig-per-sample`, the public reference's design rebuilt on our stitcher
(one Ruckig update per chunk sample: stride 1, lookahead 1), so that the
speed-up over it is measured in the same run on the same machine:
`x_per_sample` = its median / this row's median (same mode and DoF).
`constrained_frac` is the share of joint-solves in which a bound was active.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import stitch_binding  # bench/stitch_binding.py: workloads where bounds bind, the reference design rebuilt
import stitch_nodes  # bench/stitch_nodes.py: the stitcher's node over DDS, its bridge's decisions
import stitch_workloads  # bench/stitch_workloads.py: those workloads' chunk sources and limits
from report import add_json_option, report, write_json  # bench/report.py: shared table + JSON output

from plan_stack.trajectory.alignment import Chunk
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.stitching import Stitcher, StitchStatus

COLUMNS = ["backend", "mode", "dof", "horizon", "median_ms", "p99_ms", "min_ms", "rms_error", "max_v_ratio",
           "max_a_ratio", "max_j_ratio", "seam_jump_pos", "seam_jump_vel", "seam_jump_acc", "violations", "fallbacks",
           "constrained_frac", "x_per_sample", "samples"]


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


class Case:
    """One (backend, mode, dof) cell of the table, run a few calls at a time so that all cells
    are measured in interleaved rounds over the same stretch of (noisy, shared) machine time."""

    def __init__(self, backend, mode, dof, H, seed, dt=0.02):
        self.backend, self.mode, self.dof, self.H, self.dt = backend, mode, dof, H, dt
        self.names = tuple(f"joint_{i}" for i in range(dof))
        self.stitching = mode == "tracking+stitching"
        per_sample = backend == "ruckig-per-sample"  # the public design: one update per waypoint
        cfg = StitcherConfig(joint_names=self.names, backend="ruckig" if backend.startswith("ruckig") else "mpc",
                             qp_solver={"mpc-osqp": "osqp", "mpc-active-set": "active_set"}.get(backend, "daqp"),
                             mode="settle" if mode == "settle" else "tracking", dt=dt, v_max=5.0, a_max=20.0,
                             j_max=20.0, **(dict(ruckig_stride=1, ruckig_lookahead=1) if per_sample else {}))
        self.st = Stitcher(cfg)
        self.st.prepare(H)
        self.rng = np.random.default_rng(seed)
        self.sig = Signal(self.rng, dof)
        self.now = 0.0
        self.times, self.rms, self.ratios, self.seams = [], [], [], []
        self.viol = self.fallbacks = self.constrained = 0

    def run(self, calls: int, record: bool = True) -> None:
        rng, dt, st = self.rng, self.dt, self.st
        for _ in range(calls):
            if self.stitching and st.active is not None:
                self.now += 10 * dt + rng.uniform(0, dt)
                chunk = self.sig.chunk(rng, self.names, self.now - rng.uniform(0, dt), self.H, dt,
                                       rng.uniform(-0.01, 0.01, self.dof))
                measured = None
            else:
                self.sig = Signal(rng, self.dof)
                st.reset()
                self.now = 0.0
                chunk = self.sig.chunk(rng, self.names, self.now, self.H, dt)
                measured = self.sig.state(self.now)
            t0 = time.perf_counter()
            res = st.process(chunk, self.now, measured)
            elapsed = (time.perf_counter() - t0) * 1e3
            if not record:
                continue
            self.times.append(elapsed)
            if res.status is StitchStatus.FAILED or not res.report.ok:
                self.viol += 1
                continue
            self.fallbacks += res.status is StitchStatus.FALLBACK
            self.constrained += res.constrained_joints
            rep = res.report
            self.ratios.append((rep.v_ratio, rep.a_ratio, rep.j_ratio))
            self.rms.append(_rms(res.trajectory, chunk))
            self.seams.append(res.seam_jump)

    def row(self) -> dict:
        times = self.times
        r = np.array(self.ratios) if self.ratios else np.full((1, 3), np.nan)
        s = np.array(self.seams) if self.seams else np.full((1, 3), np.nan)
        return {
            "backend": self.backend, "mode": self.mode, "dof": self.dof, "horizon": self.H,
            "median_ms": float(np.median(times)), "p99_ms": float(np.percentile(times, 99)),
            "min_ms": float(np.min(times)),
            "rms_error": float(np.mean(self.rms)) if self.rms else float("nan"),
            "max_v_ratio": float(r[:, 0].max()), "max_a_ratio": float(r[:, 1].max()),
            "max_j_ratio": float(r[:, 2].max()),
            "seam_jump_pos": float(s[:, 0].max()), "seam_jump_vel": float(s[:, 1].max()),
            "seam_jump_acc": float(s[:, 2].max()), "violations": self.viol, "fallbacks": self.fallbacks,
            "constrained_frac": self.constrained / max(1, len(times) * self.dof), "samples": len(times),
        }


def run_cases(specs, H, reps, warmup, seed, rounds=10) -> list[dict]:
    """Warm every case up, then give each `reps` measured calls spread over `rounds` rounds."""
    cases = [Case(backend, mode, dof, H, seed) for backend, mode, dof in specs]
    for case in cases:
        case.run(warmup, record=False)
    rounds = max(1, min(rounds, reps))
    for k in range(rounds):
        n = reps // rounds + (k < reps % rounds)
        for case in cases:
            case.run(n)
    return [case.row() for case in cases]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dof", type=int, nargs="+", default=[12, 14])
    p.add_argument("--horizon", type=int, default=50)
    p.add_argument("--backends", nargs="+", default=["mpc", "mpc-osqp", "ruckig", "ruckig-per-sample"],
                   choices=["mpc", "mpc-active-set", "mpc-osqp", "ruckig", "ruckig-per-sample"],
                   help="mpc: closed form + exact active set where bounds bind; mpc-osqp: OSQP there instead "
                        "(finished by the active-set method); ruckig: jerk-limited chaser; ruckig-per-sample: "
                        "one Ruckig update per sample (the public reference's design, for the x_per_sample ratio)")
    p.add_argument("--modes", nargs="+", default=["tracking", "settle", "tracking+stitching"],
                   choices=["tracking", "settle", "tracking+stitching"])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=10,
                   help="each case's calls are split into this many rounds, interleaved with the other cases")
    p.add_argument("--suite", choices=["easy", "binding", "bridge", "dds", "all"], default="all",
                   help="easy: noisy sinusoidal chunks per --backends, --modes and --dof; binding: workloads "
                        "where bounds bind; bridge: stitcher + the bridge's decisions in one process, refusals "
                        "counted (stitch_nodes.py)")
    p.add_argument("--dds-chunks", type=int, default=100, help="chunks sent over DDS (suite dds)")
    p.add_argument("--bridge-chunks", type=int, default=300,
                   help="chunks per robot, seed and delay stitched and handed to the bridge (suite bridge)")
    p.add_argument("--bridge-delays-ms", type=float, nargs="+", default=[0.0, 5.0, 30.0, 90.0, 150.0, 250.0],
                   help="largest delivery delay of a trajectory to the bridge, one row each (suite bridge)")
    p.add_argument("--bridge-delayed-share", type=float, nargs="+", default=[1.0, 0.1],
                   help="share of the trajectories delayed up to the delay, the others within 5 ms (stalls of a "
                        "loaded machine), one row each (suite bridge)")
    p.add_argument("--late-join-s", type=float, nargs="+", default=[0.1],
                   help="the bridge's late_join_s, one row each (0: late commands refused as they are)")
    p.add_argument("--workloads", nargs="+", default=list(stitch_workloads.WORKLOADS),
                   choices=list(stitch_workloads.WORKLOADS))
    p.add_argument("--binding-backends", nargs="+", default=list(stitch_binding.BACKENDS),
                   choices=list(stitch_binding.BACKENDS))
    p.add_argument("--paced-hz", type=float, default=0.0,
                   help="suite binding: one call per 1/HZ s, as chunks arrive, instead of back to back (a call "
                        "after a pause finds cold caches: measured ~2x the back-to-back time)")
    add_json_option(p)
    args = p.parse_args(argv)
    ok = True
    all_rows: list[dict] = []
    if args.suite in ("dds", "all"):
        rows = stitch_nodes.run_dds(n_chunks=args.dds_chunks, seed=args.seed)
        report(rows, stitch_nodes.DDS_COLUMNS, "", {k: ".3f" for k in stitch_nodes.DDS_COLUMNS[4:-1]})
        all_rows += rows
        ok = all(r["received"] == r["chunks"] for r in rows)
        if args.suite == "dds":
            if args.json:
                write_json(all_rows, args.json)
            return 0 if ok else 1
        print()
    if args.suite in ("bridge", "all"):
        rows = stitch_nodes.run_bridge(n_chunks=args.bridge_chunks, delays_ms=tuple(args.bridge_delays_ms),
                                         late_joins_s=tuple(args.late_join_s),
                                         delayed_shares=tuple(args.bridge_delayed_share))
        report(rows, stitch_nodes.BRIDGE_COLUMNS, "", {"delay_max_ms": ".0f", "delayed_share": ".2f"})
        all_rows += rows
        # a trajectory delivered after its first new point may be due may be refused, and those stitched onto it
        # before the refusal was known; nothing else may
        ok = all(r["refused"] == r["late_refused"] + r["unseen_refused"] for r in rows)
        if args.suite == "bridge":
            if args.json:
                write_json(all_rows, args.json)
            return 0 if ok else 1
        print()
    if args.suite in ("binding", "all"):
        rows = stitch_binding.run_binding(args.workloads, args.binding_backends, args.dof, args.horizon, args.reps,
                                          args.warmup, args.seed, paced_hz=args.paced_hz)
        fmt = {k: ".3f" for k in ("median_ms", "p90_ms", "p99_ms", "min_ms", "max_v_ratio", "max_a_ratio",
                                  "max_j_ratio", "constrained_frac")}
        fmt.update({"rms_error": ".4f", "x_reference": ".2f"})
        for r in rows:
            r["suite"] = "binding"
        report(rows, stitch_binding.COLUMNS, "", fmt)
        ok = all(r["violations"] == 0 and r["failed"] == 0 for r in rows if not r["backend"].startswith("ref-"))
        all_rows += rows
        if args.suite == "binding":
            if args.json:
                write_json(all_rows, args.json)
            return 0 if ok else 1
        print()
    specs = [(backend, mode, dof) for dof in args.dof for backend in args.backends for mode in args.modes]
    rows = run_cases(specs, args.horizon, args.reps, args.warmup, args.seed, args.rounds)
    baseline = {(r["mode"], r["dof"]): r["median_ms"] for r in rows if r["backend"] == "ruckig-per-sample"}
    for r in rows:
        r["x_per_sample"] = baseline.get((r["mode"], r["dof"]), float("nan")) / r["median_ms"]
    fmt = {k: ".3f" for k in ("median_ms", "p99_ms", "min_ms", "max_v_ratio", "max_a_ratio", "max_j_ratio",
                              "constrained_frac")}
    fmt["x_per_sample"] = ".2f"
    fmt.update({"rms_error": ".4f", "seam_jump_pos": ".1e", "seam_jump_vel": ".1e", "seam_jump_acc": ".1e"})
    for r in rows:
        r["suite"] = "easy"
    report(rows, COLUMNS[:-1], "", fmt)
    if args.json:
        write_json(all_rows + rows, args.json)
    return 0 if ok and all(r["violations"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
