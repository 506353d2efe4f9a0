#!/usr/bin/env python3
"""Soak: run a robot's stack (`plan-stack up <robot> --processes`, unpaced) for a long stretch of sim time, with
the simulator doing task after task (`on_task_end: reset`), and check it against its bounds.

Measures, per node process: RSS at the end of the warm-up and at the end (/proc), its growth, restarts, and
the diagnostics it published by level (`diagnostics`: every status received, periodic republication included;
`reports`: the distinct ones, a status counted again only when its level, message or values change); for the
whole run: the sim time (summed over the tasks: each reset
restarts the simulator's clock), the wall time from the first joint state, the real-time factor (sim s / wall
s, resets and their pauses included) and every task's outcome (`ground_truth/task_outcome`). The bring-up's
console goes to `--log` (every task's outcome is one line there).

Bounds (each failure is named; exit status 1 when any is missed):
* the run reached `--sim-seconds` (not stopped by `--max-wall-s`), no node process died or restarted;
* each node's RSS grew at most `--max-rss-growth` (fraction) from the end of the warm-up (`--warmup-s` of sim
  time) to the end;
* no ERROR report (`--max-errors`), from the start. The reports are of two kinds: `safety` (the robot hit
  something: the simulator's arm collision report, the bridge's protective stop and the commands it refuses
  while stopped) and `stack` (everything else). With `--allow-safety-events` only the stack's count against
  the bound: the safety events are the learned policy's (run-episodes measures them per seed) and stay in
  the report, per task;
* real-time factor >= `--min-rtf`;
* every task's outcome was published (episodes 1, 2, ... without a gap) and logged, and at least as many
  tasks ended as the simulator's time limit allows (each ends within `task_time_limit_s`).

`--json PATH` writes: robot, config, sim_s, wall_s, rtf, resets, nodes (cpu_pct: CPU time over wall time
after the warm-up, in % of one core; rss_start_mib, rss_end_mib,
rss_growth_pct, restarts, diagnostics and reports by level, first_error), diagnostics and reports (totals by
level), stack_errors and safety_errors (ERROR reports of each kind), errors (the first few of each kind,
with node, status, message, sim time and kind), tasks (one row per outcome: episode, seed, success, reason,
max_reward, duration_s, sim_s, safety_reports), successes, bounds, failures, passed. For a
config without a planner, a stand-in publishes fixed plan features (`--plan-features-hz`). Not part of
`make test` (`make soak`; test/test_soak.py runs a short one).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LEVELS = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
#: ERROR diagnostics kept in the report (the first of each node and status, up to this many in all)
MAX_ERRORS_KEPT = 20


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _cpu_s(pid: int) -> float | None:
    """CPU time (user + system, s) of a process and its threads so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _node_pids(parent: int) -> dict[str, int]:
    """Node name -> pid of the `plan_stack.bringup ... --only NAME` children of `parent`."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            state, ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError, IndexError):
            continue
        if int(ppid) == parent and state != "Z" and b"--only" in cmd:
            out[cmd[cmd.index(b"--only") + 1].decode()] = int(d.name)
    return out


class SimTime:
    """Sim time summed over the simulator's resets: each reset restarts its clock at 0."""

    def __init__(self) -> None:
        self.offset_s = 0.0  # sim time of the scenes before the present one
        self.scene_s = 0.0  # sim time of the present scene
        self.resets = 0

    def update(self, t_s: float) -> None:
        if t_s < self.scene_s - 1e-3:  # the clock went back: a new scene
            self.offset_s += self.scene_s
            self.resets += 1
        self.scene_s = t_s

    @property
    def total_s(self) -> float:
        return self.offset_s + self.scene_s


def evaluate(report: dict[str, Any], args: argparse.Namespace, time_limit_s: float, logged: int) -> list[str]:
    """The bounds `report` misses, each as one sentence."""
    failures = []
    if report["sim_s"] < args.sim_seconds - 1e-6:
        failures.append(f"ran {report['sim_s']:.0f} s of sim time, not {args.sim_seconds:.0f} s")
    failures += report["died"]
    for n in report["nodes"]:
        if n["restarts"]:
            failures.append(f"node {n['node']} restarted {n['restarts']} time(s)")
        if n["rss_growth_pct"] is None:
            failures.append(f"node {n['node']}: no RSS measured after the warm-up")
        elif n["rss_growth_pct"] > 100 * args.max_rss_growth:
            failures.append(f"node {n['node']}: RSS grew {n['rss_growth_pct']:.1f} % after the warm-up (bound "
                            f"{100 * args.max_rss_growth:.1f} %)")
    errors = report["stack_errors"] + (0 if args.allow_safety_events else report["safety_errors"])
    if errors > args.max_errors:
        first = next((e for e in report["errors"] if not (args.allow_safety_events and e["kind"] == "safety")), {})
        failures.append(f"{errors} ERROR diagnostics (bound {args.max_errors}); the first: "
                        f"{first.get('status', '?')}: {first.get('message', '?')[:200]}")
    if report["rtf"] is None or report["rtf"] < args.min_rtf:
        failures.append(f"real-time factor {report['rtf']} below {args.min_rtf}")
    episodes = [t["episode"] for t in report["tasks"]]
    if episodes != list(range(1, len(episodes) + 1)):
        failures.append(f"task outcomes missing: episodes {episodes}")
    if logged < len(episodes):
        failures.append(f"{len(episodes)} task outcomes published but {logged} logged")
    if time_limit_s > 0:
        least = int(report["sim_s"] // (time_limit_s + 0.1))
        if len(episodes) < least:
            failures.append(f"{len(episodes)} tasks ended in {report['sim_s']:.0f} s of sim time; with "
                            f"task_time_limit_s {time_limit_s} at least {least} must have")
    elif args.require_tasks:
        failures.append("the simulator has no task_time_limit_s: tasks need not end")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="aloha", help="robot name (config/<robot>.yaml)")
    ap.add_argument("--config", metavar="PATH", help="robot config file instead of the robot's")
    ap.add_argument("--sim-seconds", type=float, default=1800.0, help="sim time to run, summed over tasks (s)")
    ap.add_argument("--warmup-s", type=float, default=120.0, help="sim time before the RSS baseline (s)")
    ap.add_argument("--sample-s", type=float, default=30.0, help="sim time between RSS samples (s)")
    ap.add_argument("--plan-features-hz", type=float, default=0.0,
                    help="stand-in planner rate, for robot configs without a planner; 0 = none (the config's "
                         "learned planner provides the plan features)")
    ap.add_argument("--max-rss-growth", type=float, default=0.05, help="bound on each node's RSS growth (fraction)")
    ap.add_argument("--max-errors", type=int, default=0, help="bound on ERROR reports")
    ap.add_argument("--allow-safety-events", action="store_true",
                    help="count only the stack's ERROR reports against --max-errors, not the safety events (arm "
                         "collisions, protective stops and the refusals while stopped; see above)")
    ap.add_argument("--min-rtf", type=float, default=0.9, help="bound on the real-time factor (sim s / wall s)")
    ap.add_argument("--no-require-tasks", dest="require_tasks", action="store_false",
                    help="accept a simulator without a task time limit")
    ap.add_argument("--max-wall-s", type=float, default=0.0,
                    help="stop after this much wall time and report what was measured (a failure: 0 = no limit)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--log", metavar="PATH", help="the bring-up's console (default: beside --json, else soak.log)")
    args = ap.parse_args(argv)

    from plan_stack.robot_config import load_robot_config
    from plan_stack.ros.domains import reserve_domain

    config = args.config or args.robot
    cfg = load_robot_config(config)
    sim_specs = [s for s in cfg.nodes if s.executable.endswith("_sim")]
    sim_params = sim_specs[0].parameters if sim_specs else {}
    time_limit_s = float(sim_params.get("task_time_limit_s", 0.0))
    if sim_params.get("on_task_end", "continue") != "reset":
        print(f"soak: the simulator's on_task_end is {sim_params.get('on_task_end', 'continue')!r}, not 'reset': "
              "the robot will not do task after task", file=sys.stderr)
    log_path = Path(args.log or (Path(args.json).with_suffix(".log") if args.json else "soak.log"))
    log_path.parent.mkdir(parents=True, exist_ok=True)

    if "ROS_DOMAIN_ID" not in os.environ:  # a domain of its own: no traffic shared with other runs
        domain, _domain_lock = reserve_domain()
        os.environ["ROS_DOMAIN_ID"] = str(domain)

    import numpy as np
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from plan_stack.msg import PlanFeatures, TaskOutcome
    from plan_stack.ros.lifecycle import ros_session
    from plan_stack.ros.qos import DIAGNOSTICS_QOS, LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
    from plan_stack.ros.time import s_to_stamp, stamp_to_s

    log = log_path.open("w")
    up = subprocess.Popen([sys.executable, "-m", "plan_stack.bringup", str(cfg.path), "--processes"],
                          stdout=log, stderr=subprocess.STDOUT)
    by_node: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reports: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    last_status: dict[str, tuple] = {}
    kinds: collections.Counter = collections.Counter()  # ERROR reports by kind (safety, stack)
    safety_by_scene: collections.Counter = collections.Counter()  # safety ERROR reports per scene (reset count)
    errors: list[dict[str, Any]] = []
    first_error: dict[str, str] = {}
    sim = SimTime()
    tasks: list[dict[str, Any]] = []
    died: list[str] = []
    pids: dict[str, int] = {}
    restarts: collections.Counter = collections.Counter()
    rss_start: dict[str, int] = {}
    rss_end: dict[str, int] = {}
    cpu_start: dict[str, tuple[float, float]] = {}  # node -> (wall s, CPU s) at the end of the warm-up
    cpu_end: dict[str, tuple[float, float]] = {}
    wall = {"first": None, "last": None}
    try:
        with ros_session(args=[]):
            probe = Node("soak_probe", parameter_overrides=[])

            def on_diag(msg: DiagnosticArray) -> None:
                for s in msg.status:
                    node = s.name.split(":", 1)[0]
                    level = LEVELS.get(int.from_bytes(s.level, "little") if isinstance(s.level, bytes) else s.level,
                                       "?")
                    by_node[node][level] += 1
                    key = (level, s.message, tuple((kv.key, kv.value) for kv in s.values))
                    if last_status.get(s.name) == key:
                        continue  # the periodic republication of a status already counted
                    last_status[s.name] = key
                    reports[node][level] += 1
                    if s.level != DiagnosticStatus.ERROR:
                        continue
                    kind = "safety" if (s.name.endswith((": safety", ": protective_stop"))
                                        or "protective stop" in s.message) else "stack"
                    kinds[kind] += 1
                    if kind == "safety":
                        safety_by_scene[sim.resets] += 1
                    if node not in first_error:
                        first_error[node] = f"{s.name}: {s.message}"
                    if sum(e["kind"] == kind for e in errors) < MAX_ERRORS_KEPT:
                        errors.append(dict(node=node, status=s.name, message=s.message, sim_s=round(sim.total_s, 3),
                                           kind=kind))

            def on_joint_states(msg: JointState) -> None:
                sim.update(stamp_to_s(msg.header.stamp))
                now = time.monotonic()
                wall["first"] = wall["first"] or now
                wall["last"] = now

            def on_outcome(m: TaskOutcome) -> None:
                if tasks and tasks[-1]["episode"] == m.episode:
                    return  # the latched sample again (a rematch)
                tasks.append(dict(episode=m.episode, seed=m.seed, success=m.success, reason=m.reason,
                                  max_reward=m.max_reward, duration_s=round(m.duration_s, 3), next=m.next,
                                  sim_s=round(sim.total_s, 3), scene=sim.resets))

            probe.create_subscription(DiagnosticArray, "/diagnostics", on_diag, DIAGNOSTICS_QOS)
            probe.create_subscription(JointState, "joint_states", on_joint_states, SENSOR_QOS)
            probe.create_subscription(TaskOutcome, "ground_truth/task_outcome", on_outcome, LATCHED_QOS)
            features = np.random.default_rng(0).normal(0.0, 1.0, (8, 16)).astype(np.float32)
            plan_pub = probe.create_publisher(PlanFeatures, "plan_features", RELIABLE_QOS)
            ex = SingleThreadedExecutor()
            ex.add_node(probe)
            next_plan = next_sample = 0.0
            wall0 = time.monotonic()
            while sim.total_s < args.sim_seconds:
                if args.max_wall_s and time.monotonic() - wall0 > args.max_wall_s:
                    died.append(f"stopped by --max-wall-s {args.max_wall_s:.0f} at {sim.total_s:.1f} s of sim time")
                    break
                ex.spin_once(timeout_sec=0.05)
                if up.poll() is not None:
                    died.append(f"bring-up exited with {up.returncode}")
                    break
                t = sim.total_s
                if args.plan_features_hz > 0 and t >= next_plan and t > 0:
                    msg = PlanFeatures(shape=list(features.shape), data=features.ravel().tolist())
                    msg.header.stamp = msg.plan_stamp = s_to_stamp(sim.scene_s)
                    plan_pub.publish(msg)
                    next_plan = t + 1.0 / args.plan_features_hz
                if t > 0 and t >= next_sample:
                    now_pids = _node_pids(up.pid)
                    for n, p in now_pids.items():
                        if n in pids and pids[n] != p:
                            restarts[n] += 1
                        pids[n] = p
                    rss = {n: _rss_kib(p) for n, p in now_pids.items()}
                    cpu = {n: (time.monotonic(), c) for n, p in now_pids.items() if (c := _cpu_s(p)) is not None}
                    if t >= args.warmup_s and not rss_start:
                        rss_start = {n: r for n, r in rss.items() if r}
                        cpu_start = dict(cpu)
                    rss_end.update({n: r for n, r in rss.items() if r})
                    cpu_end.update(cpu)
                    print(f"[soak] sim {t:7.1f} s  wall {time.monotonic() - wall0:7.1f} s  tasks {len(tasks)} "
                          f"({sum(x['success'] for x in tasks)} solved)  "
                          + "  ".join(f"{n}={(r or 0) / 1024:.0f}MiB" for n, r in sorted(rss.items())), flush=True)
                    next_sample = t + args.sample_s
            # the last sample at the end
            for n, p in _node_pids(up.pid).items():
                if n in pids and pids[n] != p:
                    restarts[n] += 1
                r, c = _rss_kib(p), _cpu_s(p)
                if r:
                    rss_end[n] = r
                if c is not None:
                    cpu_end[n] = (time.monotonic(), c)
            probe.destroy_node()
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()

    for t in tasks:  # the safety reports of the scene each task ran in (the scene is the reset count)
        t["safety_reports"] = safety_by_scene.get(t.pop("scene"), 0)
    wall_s = (wall["last"] - wall["first"]) if wall["first"] and wall["last"] else 0.0
    nodes = []
    for n in sorted(set(pids) | set(by_node)):
        if n not in pids:
            continue  # a status name without a node process of its own
        b, e = rss_start.get(n), rss_end.get(n)
        c0, c1 = cpu_start.get(n), cpu_end.get(n)
        cpu_pct = round(100 * (c1[1] - c0[1]) / (c1[0] - c0[0]), 1) if c0 and c1 and c1[0] > c0[0] else None
        nodes.append(dict(node=n, cpu_pct=cpu_pct, rss_start_mib=round(b / 1024, 1) if b else None,
                          rss_end_mib=round(e / 1024, 1) if e else None,
                          rss_growth_pct=round(100 * (e - b) / b, 2) if b and e else None,
                          restarts=restarts.get(n, 0), diagnostics=dict(by_node.get(n, {})),
                          reports=dict(reports.get(n, {})), first_error=first_error.get(n, "")))
    totals: collections.Counter = collections.Counter()
    for c in by_node.values():
        totals.update(c)
    report_totals: collections.Counter = collections.Counter()
    for c in reports.values():
        report_totals.update(c)
    logged = len(re.findall(r"\]: task \d+ \(", log_path.read_text(errors="replace")))
    report: dict[str, Any] = dict(
        robot=args.robot, config=str(cfg.path), sim_s=round(sim.total_s, 2), wall_s=round(wall_s, 2),
        rtf=round(sim.total_s / wall_s, 3) if wall_s > 0 else None, resets=sim.resets, warmup_s=args.warmup_s,
        task_time_limit_s=time_limit_s, nodes=nodes, diagnostics=dict(totals), reports=dict(report_totals),
        stack_errors=kinds["stack"], safety_errors=kinds["safety"], errors=errors, tasks=tasks,
        successes=sum(t["success"] for t in tasks), tasks_logged=logged, died=died, log=str(log_path),
        bounds=dict(sim_seconds=args.sim_seconds, max_rss_growth_pct=100 * args.max_rss_growth,
                    max_errors=args.max_errors, allow_safety_events=args.allow_safety_events, min_rtf=args.min_rtf))
    report["failures"] = evaluate(report, args, time_limit_s, logged)
    report["passed"] = not report["failures"]

    print(f"\nsoak: {args.robot} ({cfg.path}), {report['sim_s']:.0f} s of sim time in {report['wall_s']:.0f} s of wall "
          f"time: real-time factor {report['rtf']}; {len(tasks)} tasks, {report['successes']} solved; diagnostic "
          f"reports {dict(report_totals)}: ERROR {kinds['stack']} of the stack, {kinds['safety']} of safety events "
          f"in {sum(t['safety_reports'] > 0 for t in tasks)} tasks; RSS baseline after "
          f"{args.warmup_s:.0f} s of sim time")
    cols = ["node", "cpu_pct", "rss_start_mib", "rss_end_mib", "rss_growth_pct", "restarts"]
    print("  ".join(f"{c:>16}" for c in cols) + "  reports")
    for r in nodes:
        print("  ".join(f"{str(r[c]):>16}" for c in cols) + f"  {r['reports']}")
    for e in errors[:5]:
        print(f"ERROR ({e['kind']}) at {e['sim_s']:.1f} s of sim time: {e['status']}: {e['message'][:300]}")
    for f in report["failures"]:
        print(f"FAILED: {f}")
    print("PASSED" if report["passed"] else "soak: bounds missed (see above)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
