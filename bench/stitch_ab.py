#!/usr/bin/env python3
"""The stitcher of a baseline git revision against the working tree's, side by side in one process.

A speed-up of the stitcher is a ratio measured in one run on the same chunks: on a shared machine whose
speed drifts, two separate runs compare the machine, not the code. This script exports `src/plan_stack`
of `--baseline` (default HEAD) into a temporary directory as the package `plan_stack_base` (its
`plan_stack` imports rewritten), builds one stitcher from each package with the same parameters, and
feeds both the same seeded chunks of the workloads of `stitch_workloads.py`, alternating which runs first.
Per row: median and minimum of one `Stitcher.process` call for each, their ratios (baseline / new: > 1
is faster), the largest difference between the two trajectories' samples, whether the two bridge checks
(each package's own `check_trajectory`, on the same published trajectory) agreed, and the limit
violations of the new stitcher's output (at the samples and on the interpolated curve, as in
`stitch_binding`).

    python bench/stitch_ab.py --baseline main --reps 200
"""
from __future__ import annotations

import argparse
import importlib
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import stitch_workloads as sw  # bench/stitch_workloads.py: the workloads (chunk sources, limits, configs)
from report import add_json_option, report, write_json  # bench/report.py: shared table + JSON output

from plan_stack.trajectory.limits import check_limits

COLUMNS = ["workload", "backend", "dof", "base_median_ms", "new_median_ms", "x_median", "base_min_ms", "new_min_ms",
           "x_min", "constrained_frac", "max_sample_diff", "verdicts_differ", "violations", "calls"]

_IMPORT = re.compile(r"^(\s*)(from|import) plan_stack(?=[.\s])", re.M)


def export_baseline(rev: str, dest: pathlib.Path) -> str:
    """`src/plan_stack` of git revision `rev` as the package `plan_stack_base` under dest; returns the commit."""
    root = pathlib.Path(__file__).resolve().parent.parent
    commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=root, check=True, capture_output=True,
                            text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", rev, "src/plan_stack"], cwd=root, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    pkg = dest / "plan_stack_base"
    (dest / "src" / "plan_stack").rename(pkg)
    for path in pkg.rglob("*.py"):
        text = path.read_text()
        new = _IMPORT.sub(r"\1\2 plan_stack_base", text)
        if new != text:
            path.write_text(new)
    return commit


def _checks_module(root: pathlib.Path) -> str:
    """Where the baseline keeps `check_trajectory` (revisions before the renovation: embodiments.validation)."""
    moved = root / "plan_stack_base" / "trajectory" / "checks.py"
    return "trajectory.checks" if moved.is_file() else "embodiments.validation"


def _chunk_module(root: pathlib.Path) -> str:
    """Where the baseline keeps `Chunk` (revisions before the stitcher's split: trajectory.stitching)."""
    moved = root / "plan_stack_base" / "trajectory" / "alignment.py"
    return "trajectory.alignment" if moved.is_file() else "trajectory.stitching"


class Pair:
    """One (workload, backend, dof) row: the baseline's and the new stitcher on the same chunks."""

    def __init__(self, base_pkg, workload: str, backend: str, dof: int, H: int, seed: int) -> None:
        from plan_stack.trajectory.checks import check_trajectory
        from plan_stack.trajectory.config import StitcherConfig
        from plan_stack.trajectory.stitch_limits import accept_limits
        from plan_stack.trajectory.stitching import Stitcher

        self.workload, self.backend, self.dof = workload, backend, dof
        names, discrete = sw.names_for(dof)
        lim = sw.limits_for(workload, dof)
        self.mask = np.array([n in discrete for n in names])
        self.src = sw.ChunkSource(workload, dof, H, seed, lim, self.mask)
        params = sw.aloha_stitcher() if dof == 14 else dict(joint_names=names, discrete_joints=discrete, **lim)
        params.update(dt=sw.DT, backend="ruckig" if backend == "ruckig" else "mpc", command_latency_s=0.0,
                      stitch_len=3)
        self.new = Stitcher(StitcherConfig(**params))
        self.base = base_pkg.stitching.Stitcher(base_pkg.config.StitcherConfig(**params))
        self.new.prepare(H)
        self.base.prepare(H)
        self.check_new, self.check_base = check_trajectory, base_pkg.checks.check_trajectory
        self.accept = accept_limits(self.new.cfg)
        self.base_chunk = base_pkg.chunks.Chunk
        self.t_base: list[float] = []
        self.t_new: list[float] = []
        self.diff = 0.0
        self.differ = self.viol = self.constrained = self.calls = 0

    def run(self, calls: int, record: bool = True) -> None:
        for _ in range(calls):
            chunk, now, measured = self.src.next()
            base_chunk = self.base_chunk(chunk.stamp_s, chunk.joint_names, chunk.dt_s, chunk.positions)
            if measured is not None:
                self.new.reset()
                self.base.reset()
            order = ((self.base, base_chunk, self.t_base), (self.new, chunk, self.t_new))
            if self.calls % 2:
                order = order[::-1]
            results = {}
            for st, ch, times in order:
                t0 = time.perf_counter()
                res = st.process(ch, now, measured)
                elapsed = (time.perf_counter() - t0) * 1e3
                results[st is self.new] = res
                if record:
                    times.append(elapsed)
            if not record:
                continue
            self.calls += 1
            self._compare(results[True], results[False])

    def _compare(self, new, base) -> None:
        self.constrained += new.constrained_joints
        tn, tb = new.trajectory, base.trajectory
        if (tn is None) != (tb is None):
            self.diff = np.inf
            return
        if tn is None:
            return
        if tn.positions.shape != tb.positions.shape:
            self.diff = np.inf
        else:
            self.diff = max(self.diff, *(float(np.max(np.abs(x - y))) for x, y in
                                         ((tn.positions, tb.positions), (tn.velocities, tb.velocities),
                                          (tn.accelerations, tb.accelerations))))
        # the two checks on the same trajectory as the bridge receives it (from its first point)
        names = self.new.cfg.joint_names
        v_new = self.check_new(tn, names, self.accept, tn.stamp_s)
        v_base = self.check_base(tb, names, self.accept, tb.stamp_s)
        self.differ += (v_new.ok, v_new.message) != (v_base.ok, v_base.message)
        if self.workload != "infeasible":
            c = ~self.mask
            rep = check_limits(sw.DT, tn.positions[:, c], tn.velocities[:, c], tn.accelerations[:, c],
                               self.new.limits)
            self.viol += not rep.ok or not v_new.ok

    def row(self) -> dict:
        b, n = np.array(self.t_base), np.array(self.t_new)
        n_cont = int((~self.mask).sum())
        return {"workload": self.workload, "backend": self.backend, "dof": self.dof,
                "base_median_ms": float(np.median(b)), "new_median_ms": float(np.median(n)),
                "x_median": float(np.median(b) / np.median(n)), "base_min_ms": float(b.min()),
                "new_min_ms": float(n.min()), "x_min": float(b.min() / n.min()),
                "base_p90_ms": float(np.percentile(b, 90)), "new_p90_ms": float(np.percentile(n, 90)),
                "constrained_frac": self.constrained / max(1, self.calls * n_cont),
                "max_sample_diff": self.diff, "verdicts_differ": self.differ, "violations": self.viol,
                "calls": self.calls}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="HEAD", help="git revision whose src/plan_stack is the baseline")
    p.add_argument("--dof", type=int, nargs="+", default=[12, 14])
    p.add_argument("--horizon", type=int, default=50)
    p.add_argument("--workloads", nargs="+", default=list(sw.WORKLOADS), choices=list(sw.WORKLOADS))
    p.add_argument("--backends", nargs="+", default=["mpc", "ruckig"], choices=["mpc", "ruckig"])
    p.add_argument("--reps", type=int, default=100, help="measured calls per row (each stitcher)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5, help="rows interleaved in this many rounds")
    p.add_argument("--seed", type=int, default=0)
    add_json_option(p)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        commit = export_baseline(args.baseline, pathlib.Path(tmp))
        sys.path.insert(0, tmp)
        base = argparse.Namespace(**{name: importlib.import_module(f"plan_stack_base.{mod}") for name, mod in
                                     (("stitching", "trajectory.stitching"), ("config", "trajectory.config"),
                                      ("checks", _checks_module(pathlib.Path(tmp))),
                                      ("chunks", _chunk_module(pathlib.Path(tmp))))})
        pairs = [Pair(base, w, b, d, args.horizon, args.seed) for d in args.dof for w in args.workloads
                 for b in args.backends if not (b == "ruckig" and w in ("offset", "tight", "infeasible"))]
        for pair in pairs:
            pair.run(args.warmup, record=False)
        for k in range(args.rounds):
            for pair in pairs:
                pair.run(args.reps // args.rounds + (k < args.reps % args.rounds))
    rows = [pair.row() for pair in pairs]
    for r in rows:
        r["baseline"] = commit
    fmt = {k: ".3f" for k in ("base_median_ms", "new_median_ms", "base_min_ms", "new_min_ms", "constrained_frac")}
    fmt.update({"x_median": ".2f", "x_min": ".2f", "max_sample_diff": ".1e"})
    report(rows, COLUMNS, "", fmt)
    print(f"baseline {args.baseline} ({commit}) vs the working tree; x_* = baseline / new")
    if args.json:
        write_json(rows, args.json)
    return 0 if all(r["violations"] == 0 and r["verdicts_differ"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
