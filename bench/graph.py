#!/usr/bin/env python3
"""Executors against the graph's real load: CPU, input loss and simulator pace per executor choice.

    python bench/graph.py [--parts ingest idle sim] [--executors mt_spin_once per_node events]
                          [--duration 12] [--warmup 3] [--json PATH]

Executor choices (how every node of a process is spun):
* `mt_spin_once` the baseline: one rclpy MultiThreadedExecutor for all nodes of the process,
                 polled with `spin_once(timeout_sec=0.1)` in a loop (the bring-up before
                 per-node executors);
* `per_node`     what `plan_stack.ros.lifecycle.run_nodes` does now: each node on the executor
                 `executor_for` picks (SingleThreadedExecutor unless the node class sets
                 `executor_threads`), spun with `spin()` in a thread of its own;
* `events`       rclpy's experimental EventsExecutor, one per node, each polled with
                 `spin_once(timeout_sec=0.1)` in its own thread. Jazzy's rclpy has none
                 (`rclpy.experimental` came with Kilted): there the `events` rows are left out
                 with a message (`usable_executors`), and `--executors events` alone runs `per_node`.

Parts (each row runs its processes on a ROS domain of its own, reserved like the test suite's):
* `ingest`  the `ingest` node alone in a process, fed by a separate publisher process at ALOHA
            rates (3 cameras 640x480 rgb8 at 30 Hz, +-5 ms stamp jitter, 2 % of frames dropped at
            the source; joint states at 200 Hz, reliable) over `config/fastdds_big_shm.xml`, and a
            downstream collector process. Columns: cpu_percent (ingest process), frames_received
            (worst camera, fraction of frames published in the window), joints_received, recall
            (Observations matching a capture tick / ticks whose three frames were all published:
            what the QoS promises), obs_per_s.
* `idle`    one node per process with no input at all (wall clock, so its timers run):
            cpu_percent of the process over the window.
* `sim`     `config/aloha.yaml` brought up in one process or one process per node, with its models
            (planner, chunker) or without them (`--sim-models without`: the simulator and the
            control path alone): the simulator's real-time factor (sim-time advance of /clock /
            wall time, from a separate listener process) and CPU per process. The `per_node` rows
            run the real `plan-stack up aloha [--processes]` (`--config` the file less the models).

Rows are measured one after the other on a shared machine: compare ratios within one run, and
read `load1` (the 1-minute load average when the row started) next to each row.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from report import add_json_option, report  # bench/report.py: shared table + JSON output

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.dirname(os.path.abspath(__file__))
BIG_SHM = os.path.join(REPO, "config", "fastdds_big_shm.xml")
EXECUTORS = ("mt_spin_once", "per_node", "events")
IDLE_NODES = ("stitcher", "aloha_bridge", "ingest", "chunker")
COLUMNS = ("part", "executor", "mode", "models", "node", "cpu_percent", "frames_received", "joints_received", "recall",
           "obs_per_s", "rtf", "x_cpu", "load1")


# --- shared helpers --------------------------------------------------------------------------


def _reserve_domain(held: list) -> int:
    """A ROS_DOMAIN_ID no other run on this machine holds (the test suite's lock files)."""
    from plan_stack.ros.domains import reserve_domain

    domain, handle = reserve_domain(1, 100)
    held.append(handle)
    return domain


def _env(domain: int, big_shm: bool = True) -> dict:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain))
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    env.setdefault("MUJOCO_GL", "egl")
    env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)
    if big_shm:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = BIG_SHM
    else:
        env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    return env


def _cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), s."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                kids = [int(x) for x in fh.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _load1() -> float:
    return os.getloadavg()[0]


def events_executor_class():
    """rclpy's EventsExecutor, or None where this rclpy has none (Jazzy)."""
    try:
        from rclpy.experimental import EventsExecutor
    except ImportError:
        return None
    return EventsExecutor


def usable_executors(wanted: list[str]) -> list[str]:
    """`wanted` less `events` where rclpy lacks the EventsExecutor (said on stderr); `per_node` when nothing
    is left."""
    if "events" not in wanted or events_executor_class() is not None:
        return list(wanted)
    rest = [e for e in wanted if e != "events"]
    print("graph.py: this rclpy has no EventsExecutor (rclpy.experimental, Kilted and later): the `events` rows "
          "are left out" + ("" if rest else "; running `per_node` instead"), file=sys.stderr, flush=True)
    return rest or ["per_node"]


def spin_nodes(nodes, executor: str, stop: threading.Event) -> None:
    """Spin `nodes` with one executor choice until `stop` is set (the calling thread waits)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

    from plan_stack.ros.lifecycle import executor_for

    if executor == "mt_spin_once":
        ex = MultiThreadedExecutor(context=nodes[0].context)
        for n in nodes:
            ex.add_node(n)
        try:
            while rclpy.ok(context=nodes[0].context) and not stop.is_set():
                ex.spin_once(timeout_sec=0.1)
        finally:
            ex.shutdown(timeout_sec=1.0)
        return
    if executor == "events":
        # EventsExecutor: created, polled and shut down in its own thread (a shutdown or a context
        # shutdown from another thread while it spins hangs in this rclpy).
        EventsExecutor = events_executor_class()
        if EventsExecutor is None:
            raise RuntimeError("executor `events`: this rclpy has no EventsExecutor (rclpy.experimental)")

        def poll(node):
            ex = EventsExecutor(context=node.context)
            ex.add_node(node)
            while not stop.is_set():
                ex.spin_once(timeout_sec=0.1)
            ex.remove_node(node)
            ex.shutdown()

        threads = [threading.Thread(target=poll, args=(n,), daemon=True) for n in nodes]
        for t in threads:
            t.start()
        stop.wait()
        for t in threads:
            t.join(timeout=2.0)
        return
    if executor != "per_node":
        raise ValueError(f"unknown executor {executor!r}")
    executors = [executor_for(n) for n in nodes]

    def spin(ex):
        try:
            ex.spin()
        except ExternalShutdownException:
            pass

    threads = []
    for n, ex in zip(nodes, executors):
        ex.add_node(n)
        t = threading.Thread(target=spin, args=(ex,), daemon=True)
        t.start()
        threads.append(t)
    stop.wait()
    for n, ex in zip(nodes, executors):
        ex.remove_node(n)
        ex.shutdown(timeout_sec=1.0)
    for t in threads:
        t.join(timeout=1.0)


def _node_factories(robot: str, names: list[str], overrides: dict | None = None):
    from plan_stack.bringup import node_factory
    from plan_stack.robot_config import load_robot_config

    cfg = load_robot_config(robot)
    specs = {s.name: s for s in cfg.nodes}
    out = []
    for name in names:
        spec = specs[name]
        if overrides:
            import dataclasses

            spec = dataclasses.replace(spec, parameters={**spec.parameters, **overrides})
        out.append(node_factory(spec))
    return out


# --- roles (each runs in its own process) ----------------------------------------------------


def role_nodes(args) -> int:
    """Build nodes of a robot config and spin them with one executor choice until t_end.

    With --window: writes the process CPU and, for an ingest node, its input counters in the window."""

    from plan_stack.ros.lifecycle import ros_session

    names = args.nodes.split(",")
    overrides = json.loads(args.overrides) if args.overrides else None
    out: dict = {}
    with ros_session():
        nodes = [make() for make in _node_factories(args.robot, names, overrides)]
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())  # the sim rows stop processes with SIGINT

        def window():
            if args.w1 <= args.w0:  # the sim rows: no window here (stopped by SIGINT, measured from outside)
                return
            time.sleep(max(0.0, args.w0 - time.time()))
            c0 = time.process_time()
            ingest = next((n for n in nodes if n.get_name() == "ingest"), None)
            r0 = {k: m.received for k, m in ingest._monitors.items()} if ingest else {}
            p0 = ingest.sets_published if ingest else 0
            time.sleep(max(0.0, args.w1 - time.time()))
            out["cpu_percent"] = 100.0 * (time.process_time() - c0) / (args.w1 - args.w0)
            if ingest:
                out["received"] = {k: m.received - r0[k] for k, m in ingest._monitors.items()}
                out["published"] = ingest.sets_published - p0
            time.sleep(max(0.0, args.t_end - time.time()))
            stop.set()

        th = threading.Thread(target=window, daemon=True)
        th.start()
        try:
            spin_nodes(nodes, args.executor, stop)
        finally:
            for n in nodes:
                close = getattr(n, "close", None)
                if callable(close):
                    close()
                n.destroy_node()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh)
    return 0


def role_clock(args) -> int:
    """Record (wall, sim) of /clock; the window starts `--settle` s after the first message (start-up
    of a loaded machine varies) and lasts `--window` s. Writes the first message's wall time to
    `--ready` as soon as it arrives, and the real-time factor over the window to `--out`."""
    import rclpy
    from rosgraph_msgs.msg import Clock

    from plan_stack.ros.lifecycle import ros_session
    from plan_stack.ros.qos import SENSOR_QOS

    samples = []
    with ros_session():
        node = rclpy.create_node("graph_bench_clock")
        node.create_subscription(Clock, "/clock", lambda m: samples.append(
            (time.time(), m.clock.sec + m.clock.nanosec * 1e-9)), SENSOR_QOS)
        give_up = time.time() + args.startup_limit
        while not samples and time.time() < give_up:
            rclpy.spin_once(node, timeout_sec=0.05)
        if samples:
            with open(args.ready, "w") as fh:
                json.dump({"first": samples[0][0]}, fh)
            w0 = samples[0][0] + args.settle
            w1 = w0 + args.window
            while time.time() < w1 + 0.2:
                rclpy.spin_once(node, timeout_sec=0.05)
        node.destroy_node()
    inside = [s for s in samples if w0 <= s[0] <= w1] if samples else []
    rtf = math.nan
    if len(inside) > 2:
        (wa, sa), (wb, sb) = inside[0], inside[-1]
        rtf = (sb - sa) / (wb - wa)
    with open(args.out, "w") as fh:
        json.dump({"rtf": rtf, "clock_msgs": len(inside)}, fh)
    return 0


# --- parts ------------------------------------------------------------------------------------


def _wait_all(procs, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError(f"{p.args[:6]} did not finish") from None
        if p.returncode != 0:
            raise RuntimeError(f"{p.args[:6]} exited with {p.returncode}")


def ingest_row(executor: str, args, tmp: str, domain: int) -> dict:
    import ingest as ib  # bench/ingest.py: the synthetic rig, the collector and the ground truth

    env = _env(domain)
    load = _load1()
    t0 = float(math.ceil(time.time()) + args.startup)
    w0, w1 = t0 + args.warmup, t0 + args.duration
    ing_out, col_out, rig_out = (os.path.join(tmp, f"ingest_{executor}_{k}.json") for k in ("ing", "col", "rig"))
    params = dict(camera_names=list(ib.CAMERAS), output_size=[224, 224], max_spread=ib.MAX_SPREAD_S,
                  max_age=ib.MAX_AGE_S, queue_size=10, min_interval=0.02, joint_names=list(ib.JOINTS),
                  joint_qos="reliable", use_sim_time=False)
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--t0", str(t0), "--duration", str(args.duration), "--warmup", str(args.warmup)]
    procs = [
        subprocess.Popen(me + ["--role", "nodes", "--robot", "aloha", "--nodes", "ingest", "--executor", executor,
                               "--overrides", json.dumps(params), "--w0", str(w0), "--w1", str(w1),
                               "--t-end", str(w1 + 1.0), "--out", ing_out], env=env),
        subprocess.Popen([sys.executable, os.path.join(BENCH, "ingest.py"), "--role", "collect", "--out", col_out]
                         + common, env=env),
        subprocess.Popen([sys.executable, "-m", "plan_stack.ingest.synthetic_publisher",
                          "--cameras", ",".join(ib.CAMERAS), "--joints", ",".join(ib.JOINTS), "--width", "640",
                          "--height", "480", "--rate", str(ib.RATE_HZ), "--jitter", str(ib.JITTER_S),
                          "--drop", str(ib.DROP), "--joint-rate", str(ib.JOINT_RATE_HZ), "--joint-qos", "reliable",
                          "--duration", str(args.duration), "--t0", str(t0), "--wait-subscribers", "0",
                          "--seed", str(args.seed), "--stats", rig_out], env=env),
    ]
    _wait_all(procs, args.startup + args.duration + 60)
    ing, col = (json.load(open(p)) for p in (ing_out, col_out))
    complete, published = ib._ground_truth(t0, args)
    per_cam = published / len(ib.CAMERAS)
    window = args.duration - args.warmup
    matched = {r["ticks"][0] for r in col if len(r["ticks"]) == 1}
    joints_pub = ib.JOINT_RATE_HZ * window
    return {
        "part": "ingest", "executor": executor, "mode": "process", "node": "ingest",
        "cpu_percent": ing["cpu_percent"],
        "frames_received": min(ing["received"][c] for c in ib.CAMERAS) / per_cam,
        "joints_received": ing["received"].get("joint_states", math.nan) / joints_pub,
        "recall": len(matched & complete) / len(complete) if complete else math.nan,
        "obs_per_s": len(col) / window, "load1": load,
    }


def idle_row(executor: str, node: str, args, tmp: str, domain: int) -> dict:
    load = _load1()
    start = time.time()
    # Start-up (imports, a torch model for the chunker) is not part of the window.
    w0 = start + args.startup + (6.0 if node == "chunker" else 0.0)
    w1 = w0 + args.idle_window
    out = os.path.join(tmp, f"idle_{executor}_{node}.json")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "nodes", "--robot", "aloha",
                          "--nodes", node, "--executor", executor, "--overrides", json.dumps({"use_sim_time": False}),
                          "--w0", str(w0), "--w1", str(w1), "--t-end", str(w1 + 0.2), "--out", out],
                         env=_env(domain))
    _wait_all([p], w1 - start + 60)
    res = json.load(open(out))
    return {"part": "idle", "executor": executor, "mode": "process", "node": node,
            "cpu_percent": res["cpu_percent"], "load1": load}


#: the nodes that run learned models; `--sim-models without` leaves them out of the bring-up
MODEL_NODES = ("planner", "chunker")


def _config_without_models(tmp: str) -> str:
    """config/aloha.yaml less MODEL_NODES, written to `tmp` (the simulator, bridge, ingest, stitcher, viz)."""
    import yaml

    from plan_stack.robot_config import resolve_config_path

    with open(resolve_config_path("aloha")) as fh:
        data = yaml.safe_load(fh)
    for name in MODEL_NODES:
        data["nodes"].pop(name, None)
    path = os.path.join(tmp, "aloha_without_models.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return path


def sim_rows(executor: str, processes: bool, models: bool, args, tmp: str, domain: int) -> list[dict]:
    """Bring up config/aloha.yaml (with or without MODEL_NODES); RTF from /clock and CPU per process."""
    from plan_stack.robot_config import load_robot_config

    env = _env(domain)
    load = _load1()
    names = [s.name for s in load_robot_config("aloha").nodes if models or s.name not in MODEL_NODES]
    settle = args.warmup + 8.0  # after the first /clock: the other nodes start, the chunker loads its model
    window = args.duration - args.warmup
    tag = f"{executor}_{processes}_{models}"
    clock_out, ready = (os.path.join(tmp, f"clock_{tag}.{k}") for k in ("json", "ready"))
    clock = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "clock", "--settle", str(settle),
                              "--window", str(window), "--ready", ready, "--out", clock_out], env=env)
    me = [sys.executable, os.path.abspath(__file__), "--role", "nodes", "--robot", "aloha", "--executor", executor,
          "--t-end", str(time.time() + 1e6)]
    if executor == "per_node":  # the real command
        config = ["aloha"] if models else ["--config", _config_without_models(tmp)]
        cmds = {"all": [sys.executable, "-m", "plan_stack.cli", "up", *config] + (["--processes"] if processes else [])}
    elif processes:
        cmds = {n: me + ["--nodes", n] for n in names}
    else:
        cmds = {"all": me + ["--nodes", ",".join(names)]}
    procs = {k: subprocess.Popen(c, env=env) for k, c in cmds.items()}
    try:
        give_up = time.time() + args.startup_limit
        while not os.path.exists(ready) and time.time() < give_up and clock.poll() is None:
            time.sleep(0.1)
        if not os.path.exists(ready):
            raise RuntimeError(f"no /clock within {args.startup_limit} s")
        time.sleep(0.2)
        w0 = json.load(open(ready))["first"] + settle
        w1 = w0 + window
        time.sleep(max(0.0, w0 - time.time()))
        pids = {}
        for k, p in procs.items():
            # plan-stack up --processes: one child per node; plan-stack up: one child for the shared process
            # and one per `own_process` node (the planner) when the config has any
            children = {}
            for child in _descendants(p.pid) if k == "all" else ():
                with open(f"/proc/{child}/cmdline") as fh:
                    argv = fh.read().split("\0")
                if "--only" in argv:
                    children[argv[argv.index("--only") + 1]] = child
            pids.update(children or {k: p.pid})
        c0 = {k: _cpu_s(pid) for k, pid in pids.items()}
        time.sleep(max(0.0, w1 - time.time()))
        cpu = {k: 100.0 * (_cpu_s(pid) - c0[k]) / (w1 - w0) for k, pid in pids.items()}
        _wait_all([clock], 30)
    finally:
        if clock.poll() is None:
            clock.kill()
        for p in procs.values():
            p.send_signal(2)
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    rtf = json.load(open(clock_out))["rtf"]
    mode = "processes" if processes else "one_process"
    with_models = "with" if models else "without"
    rows = [{"part": "sim", "executor": executor, "mode": mode, "models": with_models, "node": "(all)",
             "cpu_percent": sum(cpu.values()), "rtf": rtf, "load1": load}]
    if len(cpu) > 1:
        rows += [{"part": "sim", "executor": executor, "mode": mode, "models": with_models, "node": k,
                  "cpu_percent": v, "rtf": rtf, "load1": load} for k, v in sorted(cpu.items())]
    return rows


def add_ratios(rows: list[dict]) -> None:
    """x_cpu: the baseline's CPU / this row's, same part, mode and node (> 1: cheaper than the baseline)."""
    def key(r: dict) -> tuple:
        return r["part"], r["mode"], r.get("models"), r["node"]

    base = {key(r): r["cpu_percent"] for r in rows if r["executor"] == "mt_spin_once"}
    for r in rows:
        b = base.get(key(r))
        r["x_cpu"] = b / r["cpu_percent"] if b is not None and r["cpu_percent"] > 0 else math.nan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", default=["ingest", "idle", "sim"], choices=["ingest", "idle", "sim"])
    p.add_argument("--executors", nargs="+", default=list(EXECUTORS), choices=list(EXECUTORS))
    p.add_argument("--idle-nodes", nargs="+", default=list(IDLE_NODES), choices=list(IDLE_NODES))
    p.add_argument("--sim-modes", nargs="+", default=["one_process", "processes"],
                   choices=["one_process", "processes"],
                   help="one_process: `plan-stack up aloha` as it is (the shared process, and the config's "
                        "own_process nodes in their own); processes: with --processes")
    p.add_argument("--sim-models", nargs="+", default=["with", "without"], choices=["with", "without"],
                   help="with: config/aloha.yaml as it is (planner and chunker loaded); without: the config less "
                        "them (the simulator and the control path alone)")
    p.add_argument("--duration", type=float, default=12.0, help="s per ingest/sim row (warm-up included)")
    p.add_argument("--warmup", type=float, default=3.0, help="s excluded at the start of a row")
    p.add_argument("--startup", type=float, default=5.0, help="s allowed for the processes to start")
    p.add_argument("--startup-limit", type=float, default=120.0, help="s a bring-up may take to publish /clock")
    p.add_argument("--idle-window", type=float, default=8.0, help="s measured per idle row")
    p.add_argument("--seed", type=int, default=0)
    add_json_option(p)
    # internal: one process per role
    p.add_argument("--role", choices=("nodes", "clock"), help=argparse.SUPPRESS)
    p.add_argument("--robot", default="aloha", help=argparse.SUPPRESS)
    p.add_argument("--nodes", default="", help=argparse.SUPPRESS)
    p.add_argument("--executor", default="per_node", help=argparse.SUPPRESS)
    p.add_argument("--overrides", default="", help=argparse.SUPPRESS)
    p.add_argument("--w0", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--w1", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--t-end", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    p.add_argument("--settle", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--window", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--ready", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "nodes":
        return role_nodes(args)
    if args.role == "clock":
        return role_clock(args)
    args.executors = usable_executors(args.executors)
    held: list = []
    domain = _reserve_domain(held)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="graph_bench_") as tmp:
        jobs = []
        if "ingest" in args.parts:
            jobs += [(f"ingest/{e}", lambda e=e: [ingest_row(e, args, tmp, domain)]) for e in args.executors]
        if "idle" in args.parts:
            jobs += [(f"idle/{e}/{n}", lambda e=e, n=n: [idle_row(e, n, args, tmp, domain)])
                     for n in args.idle_nodes for e in args.executors]
        if "sim" in args.parts:
            jobs += [(f"sim/{e}/{m}/{w}_models",
                      lambda e=e, m=m, w=w: sim_rows(e, m == "processes", w == "with", args, tmp, domain))
                     for w in args.sim_models for m in args.sim_modes for e in args.executors]
        for name, job in jobs:
            try:
                rows += job()
            except Exception as exc:  # one executor that cannot run a node must not hide the others
                print(f"  failed: {name}: {exc}", file=sys.stderr, flush=True)
                part, executor = name.split("/")[:2]
                rows.append({"part": part, "executor": executor, "mode": "failed", "node": name,
                             "cpu_percent": math.nan, "error": str(exc)[:200]})
            print(f"  done: {name}", file=sys.stderr, flush=True)
    add_ratios(rows)
    fmt = {k: ".1f" for k in ("cpu_percent",)}
    fmt.update({k: ".3f" for k in ("frames_received", "joints_received", "recall", "rtf")})
    fmt.update({"obs_per_s": ".1f", "x_cpu": ".2f", "load1": ".2f"})
    report(rows, COLUMNS, args.json, fmt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
