#!/usr/bin/env python3
"""Soak: run a robot's stack (`plan-stack up <robot> --processes`) for a long stretch of sim time and
report memory growth, diagnostics rates and errors per node.

The robot config's learned planner provides the plan features; for a config without one, a stand-in
publishes one fixed set (seeded, `--plan-features-hz` > 0, stamped with sim time). `--max-wall-s`
stops early on a slow machine and reports what was measured. Samples every node
process's RSS (/proc) each `--sample-s` of sim time; after `--warmup-s` the RSS of each node may grow
at most `--max-rss-growth` (fraction); diagnostics rates per node are compared between the first and
second half of the measured window; ERROR diagnostics count after the warm-up. Prints a table;
`--json PATH` writes the rows. Exit status 1 when
a node died, reported ERROR, or grew beyond the limit. Not part of `make test` (`make soak`).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _node_pids(parent: int) -> dict[str, int]:
    """Node name -> pid of the `plan_stack.bringup ... --only NAME` children of `parent`."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"--only" in cmd:
            out[cmd[cmd.index(b"--only") + 1].decode()] = int(d.name)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="aloha")
    ap.add_argument("--sim-seconds", type=float, default=1800.0, help="sim time to run (s)")
    ap.add_argument("--warmup-s", type=float, default=120.0, help="sim time before the RSS baseline (s)")
    ap.add_argument("--sample-s", type=float, default=30.0, help="sim time between samples (s)")
    ap.add_argument("--plan-features-hz", type=float, default=0.0,
                    help="stand-in planner rate, for robot configs without a planner; 0 = none (the config's "
                         "learned planner provides the plan features)")
    ap.add_argument("--max-rss-growth", type=float, default=0.10)
    ap.add_argument("--max-wall-s", type=float, default=0.0,
                    help="stop after this much wall time and report what was measured (0: no limit; on a "
                         "shared machine the simulator may run far below real time)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)

    from plan_stack.ros.domains import reserve_domain

    if "ROS_DOMAIN_ID" not in os.environ:  # a domain of its own: no traffic shared with other runs
        domain, _domain_lock = reserve_domain()
        os.environ["ROS_DOMAIN_ID"] = str(domain)

    import numpy as np
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rosgraph_msgs.msg import Clock

    from plan_stack.msg import PlanFeatures
    from plan_stack.ros.lifecycle import ros_session
    from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS
    from plan_stack.ros.time import s_to_stamp, stamp_to_s

    up = subprocess.Popen([sys.executable, "-m", "plan_stack.bringup", args.robot, "--processes"])
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    errors: collections.Counter = collections.Counter()
    error_text: dict[str, str] = {}
    sim = {"t": 0.0}
    rows, samples = [], []
    died = []
    try:
        with ros_session(args=[]):
            probe = Node("soak_probe", parameter_overrides=[])

            def on_diag(msg):
                for s in msg.status:
                    node = s.name.split(":", 1)[0]
                    counts[node]["all"] += 1
                    if s.level == DiagnosticStatus.ERROR and sim["t"] >= args.warmup_s:  # start-up is warm-up
                        errors[node] += 1
                        error_text.setdefault(node, f"{s.name}: {s.message}")

            probe.create_subscription(DiagnosticArray, "/diagnostics", on_diag, DIAGNOSTICS_QOS)
            probe.create_subscription(Clock, "/clock", lambda m: sim.__setitem__("t", stamp_to_s(m.clock)),
                                      RELIABLE_QOS)
            features = np.random.default_rng(0).normal(0.0, 1.0, (8, 16)).astype(np.float32)
            plan_pub = probe.create_publisher(PlanFeatures, "plan_features", RELIABLE_QOS)
            ex = SingleThreadedExecutor()
            ex.add_node(probe)
            next_plan = next_sample = 0.0
            baseline: dict[str, int] = {}
            rate_marks = []  # (sim t, {node: count})
            wall0 = time.monotonic()
            while sim["t"] < args.sim_seconds:
                if args.max_wall_s and time.monotonic() - wall0 > args.max_wall_s:
                    print(f"[soak] wall-time limit {args.max_wall_s:.0f} s reached at sim {sim['t']:.1f} s",
                          flush=True)
                    break
                ex.spin_once(timeout_sec=0.05)
                if up.poll() is not None:
                    died.append(f"bring-up exited with {up.returncode}")
                    break
                t = sim["t"]
                if args.plan_features_hz > 0 and t >= next_plan and t > 0:
                    msg = PlanFeatures(shape=list(features.shape), data=features.ravel().tolist())
                    msg.header.stamp = msg.plan_stamp = s_to_stamp(t)
                    plan_pub.publish(msg)
                    next_plan = t + 1.0 / args.plan_features_hz
                if t > 0 and (t >= next_sample or t >= args.sim_seconds):  # the last sample at the end
                    pids = _node_pids(up.pid)
                    rss = {n: _rss_kib(p) for n, p in pids.items()}
                    samples.append((t, rss))
                    if t >= args.warmup_s and not baseline:
                        baseline = {n: r for n, r in rss.items() if r}
                    if t >= args.warmup_s:
                        rate_marks.append((t, {n: c["all"] for n, c in counts.items()}))
                    print(f"[soak] sim {t:7.1f} s  wall {time.monotonic() - wall0:7.1f} s  "
                          + "  ".join(f"{n}={(r or 0) / 1024:.0f}MiB" for n, r in sorted(rss.items())), flush=True)
                    next_sample = t + args.sample_s
            probe.destroy_node()
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
    if len(rate_marks) < 3 or not samples:
        print("soak: too short to measure (raise --sim-seconds or lower --warmup-s)", file=sys.stderr)
        return 1
    t_end, last = samples[-1]
    mid = rate_marks[len(rate_marks) // 2]
    first, final = rate_marks[0], rate_marks[-1]
    ok = not died
    nodes = sorted(set(baseline) | set(last))
    for n in nodes:
        b, e = baseline.get(n), last.get(n)
        growth = (e - b) / b if b and e else float("nan")
        r1 = (mid[1].get(n, 0) - first[1].get(n, 0)) / max(mid[0] - first[0], 1e-9)
        r2 = (final[1].get(n, 0) - mid[1].get(n, 0)) / max(final[0] - mid[0], 1e-9)
        row = dict(node=n, rss_warm_mib=round((b or 0) / 1024, 1), rss_end_mib=round((e or 0) / 1024, 1),
                   rss_growth_pct=round(100 * growth, 2), diag_rate_first_half=round(r1, 2),
                   diag_rate_second_half=round(r2, 2), errors=errors.get(n, 0), first_error=error_text.get(n, ""))
        rows.append(row)
        ok &= e is not None and (growth <= args.max_rss_growth) and not errors.get(n, 0)
    cols = ["node", "rss_warm_mib", "rss_end_mib", "rss_growth_pct", "diag_rate_first_half",
            "diag_rate_second_half", "errors"]
    print(f"\nsoak: {args.robot}, {t_end:.0f} s sim time (RSS baseline after {args.warmup_s:.0f} s; "
          f"diagnostics statuses per sim second)")
    print("  ".join(f"{c:>22}" for c in cols))
    for r in rows:
        print("  ".join(f"{str(r[c]):>22}" for c in cols))
    for r in rows:
        if r["first_error"]:
            print(f"first ERROR of {r['node']}: {r['first_error'][:300]}")
    for d in died:
        print(f"died: {d}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(robot=args.robot, sim_s=t_end, rows=rows, died=died), indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
