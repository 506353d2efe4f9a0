"""Ingest benchmark: approximate-time sync vs naive "latest of each stream", over DDS.

Three 640x480 rgb8 cameras at 30 Hz (+-5 ms stamp jitter, 2% of frames
dropped at the source; sensor-data QoS) and 200 Hz joint states (reliable,
as ros2_control's joint_state_broadcaster publishes them) are published by
a separate process (`plan_stack.ingest.synthetic_publisher`); the `ingest` node runs in
a second process and a downstream subscriber in a third. Every process of a
row shares its DDS transport: `default` (Fast DDS built-in transports) or
`big_shm` (`config/fastdds_big_shm.xml`: 16 MiB shared-memory segments and
large UDP buffers, so 900 kB images are not dropped under sensor-data QoS).

Columns
* sets_per_s      Observations received per second in the measured window
* matched_fraction  sets whose frames all come from one capture tick (ground
                  truth by construction: the stamp encodes the tick)
* recall          correct sets / ticks whose three frames were all published
* latency_p50/p99_ms  added latency: arrival in the node of the input that
                  completed a set -> publication of its Observation
* e2e_p50/p99_ms  newest source stamp -> Observation received downstream
                  (stamps are due times: the rig publishes when a stamp comes due)
* cpu_percent     ingest process CPU time / wall time in the window
* max_skew_ms; set_age_max_ms (newest frame stamp in the node - oldest frame
  of a set, at publication) and stale_sets (sets where that exceeds max_age);
  frames_received (fraction of published frames that reached the node);
  joint_err_max (interpolated joint state vs the known signal)

    python bench/ingest.py [--duration 12] [--warmup 3] [--json out.json]

Warm-up (discovery, first frames) is excluded. Seeded: the same frames are
dropped in every row.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time

from report import add_json_option, report  # bench/report.py: shared table + JSON output

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")
JOINTS = tuple(f"{arm}_{j}" for arm in ("left", "right")
               for j in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper"))
RATE_HZ = 30.0
JITTER_S = 0.005
DROP = 0.02
JOINT_RATE_HZ = 200.0
MAX_AGE_S = 0.25
MAX_SPREAD_S = 0.015
PROFILES = {"default": None, "big_shm": os.path.join(REPO, "config", "fastdds_big_shm.xml")}
COLUMNS = ("method", "transport", "sets_per_s", "matched_fraction", "recall", "latency_p50_ms", "latency_p99_ms",
           "e2e_p50_ms", "e2e_p99_ms", "cpu_percent", "max_skew_ms", "set_age_max_ms", "stale_sets", "frames_received",
           "joint_err_max")


def _pct(values, q):
    import numpy as np
    return float(np.percentile(values, q)) if len(values) else math.nan


# --- roles (each runs in its own process) ------------------------------------------------


def role_ingest(args) -> int:
    """Run the ingest node; record added latency and CPU inside the window."""
    from rclpy.parameter import Parameter

    from plan_stack.ingest.ingest_node import IngestNode
    from plan_stack.ros.lifecycle import executor_for, ros_session

    params = dict(camera_names=list(CAMERAS), output_size=[224, 224], max_spread=MAX_SPREAD_S, max_age=MAX_AGE_S,
                  queue_size=10, min_interval=0.02, joint_names=list(JOINTS), joint_qos="reliable",
                  policy="approximate" if args.method == "sync" else "latest")
    w0, w1 = args.t0 + args.warmup, args.t0 + args.duration
    out = {}
    with ros_session():
        node = IngestNode(parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        ex = executor_for(node)  # what the bring-up spins it on
        ex.add_node(node)

        def window():
            time.sleep(max(0.0, w0 - time.time()))
            node.added_latency_s.clear()
            node.set_age_s.clear()
            c0 = time.process_time()
            received0 = {n: m.received for n, m in node._monitors.items()}
            time.sleep(max(0.0, w1 - time.time()))
            out["cpu_percent"] = 100.0 * (time.process_time() - c0) / (w1 - w0)
            out["latency_ms"] = [x * 1e3 for x in list(node.added_latency_s)]
            out["set_age_ms"] = [x * 1e3 for x in list(node.set_age_s)]
            out["received"] = {n: m.received - received0[n] for n, m in node._monitors.items()}

        th = threading.Thread(target=window, daemon=True)
        th.start()
        while time.time() < w1 + 1.0:
            ex.spin_once(timeout_sec=0.05)
        th.join(timeout=5.0)
        out["drops"] = {n: dict(m.drops) for n, m in node._monitors.items()}
        ex.shutdown()
        node.destroy_node()
    with open(args.out, "w") as fh:
        json.dump(out, fh)
    return 0


def role_collect(args) -> int:
    """Downstream subscriber: per Observation, e2e latency, ground-truth match, age."""
    import numpy as np
    import rclpy

    from plan_stack.ingest.synthetic import joint_positions, tick_of
    from plan_stack.msg import Observation
    from plan_stack.ros.lifecycle import ros_session
    from plan_stack.ros.qos import RELIABLE_QOS
    from plan_stack.ros.time import stamp_to_s

    w0, w1 = args.t0 + args.warmup, args.t0 + args.duration
    rows = []

    def on_obs(msg):
        recv = time.time()
        stamps = [stamp_to_s(t) for t in msg.source_stamps]
        if not w0 <= max(stamps) < w1:
            return
        ref = stamp_to_s(msg.header.stamp)
        jerr = float(np.max(np.abs(np.asarray(msg.joint_state.position) - joint_positions(ref, len(JOINTS)))))
        rows.append(dict(e2e_ms=(recv - max(stamps)) * 1e3,
                         ticks=sorted({tick_of(s, RATE_HZ) for s in stamps}), skew_ms=msg.max_skew * 1e3,
                         joint_err=jerr))

    with ros_session():
        node = rclpy.create_node("ingest_bench_collector")
        node.create_subscription(Observation, "observation", on_obs, RELIABLE_QOS)
        while time.time() < w1 + 1.5:
            rclpy.spin_once(node, timeout_sec=0.05)
        node.destroy_node()
    with open(args.out, "w") as fh:
        json.dump(rows, fh)
    return 0


# --- orchestration ----------------------------------------------------------------------------


def _ground_truth(t0, args) -> tuple[set[int], int]:
    """Ticks in the window whose frames were all published, and frames published in it (same seeded schedule)."""
    sys.path.insert(0, os.path.join(REPO, "src"))
    from plan_stack.ingest.synthetic import schedule, tick_of

    events = schedule(len(CAMERAS), RATE_HZ, args.duration, t0, jitter_s=JITTER_S, drop=DROP, seed=args.seed)
    count: dict[int, int] = {}
    published = 0
    for e in events:
        if e.kind == "frame" and t0 + args.warmup <= e.stamp_s < t0 + args.duration:
            published += 1
            if e.stamp_s < t0 + args.duration - 0.1:  # the very last sets may still be in flight
                count[e.tick] = count.get(e.tick, 0) + 1
    return {tick_of(t0 + k / RATE_HZ, RATE_HZ) for k, n in count.items() if n == len(CAMERAS)}, published


def run_row(method: str, transport: str, args, tmp: str) -> dict:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)
    if PROFILES[transport]:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = PROFILES[transport]
    else:
        env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    t0 = float(math.ceil(time.time()) + args.startup)
    common = ["--t0", str(t0), "--duration", str(args.duration), "--warmup", str(args.warmup)]
    ing_out, col_out, rig_out = (os.path.join(tmp, f"{method}_{transport}_{k}.json") for k in ("ing", "col", "rig"))
    me = [sys.executable, os.path.abspath(__file__)]
    procs = [
        subprocess.Popen(me + ["--role", "ingest", "--method", method, "--out", ing_out] + common, env=env),
        subprocess.Popen(me + ["--role", "collect", "--out", col_out] + common, env=env),
        subprocess.Popen([sys.executable, "-m", "plan_stack.ingest.synthetic_publisher",
                          "--cameras", ",".join(CAMERAS), "--joints", ",".join(JOINTS), "--width", "640",
                          "--height", "480", "--rate", str(RATE_HZ), "--jitter", str(JITTER_S), "--drop", str(DROP),
                          "--joint-rate", str(JOINT_RATE_HZ), "--joint-qos", "reliable",
                          "--duration", str(args.duration), "--t0", str(t0),
                          "--wait-subscribers", "0", "--seed", str(args.seed), "--stats", rig_out], env=env),
    ]
    for p in procs:
        if p.wait(timeout=args.startup + args.duration + 60) != 0:
            raise RuntimeError(f"{p.args[:4]} exited with {p.returncode}")
    with open(ing_out) as fh:
        ing = json.load(fh)
    with open(col_out) as fh:
        col = json.load(fh)
    with open(rig_out) as fh:
        rig = json.load(fh)
    complete, published_in_window = _ground_truth(t0, args)
    window = args.duration - args.warmup
    matched = [r for r in col if len(r["ticks"]) == 1]
    correct = {r["ticks"][0] for r in matched} & complete
    return {
        "method": method,
        "transport": transport,
        "sets_per_s": len(col) / window,
        "matched_fraction": len(matched) / len(col) if col else math.nan,
        "recall": len(correct) / len(complete) if complete else math.nan,
        "latency_p50_ms": _pct(ing["latency_ms"], 50),
        "latency_p99_ms": _pct(ing["latency_ms"], 99),
        "e2e_p50_ms": _pct([r["e2e_ms"] for r in col], 50),
        "e2e_p99_ms": _pct([r["e2e_ms"] for r in col], 99),
        "cpu_percent": ing["cpu_percent"],
        "max_skew_ms": max((r["skew_ms"] for r in col), default=math.nan),
        "set_age_max_ms": max(ing["set_age_ms"], default=math.nan),
        "stale_sets": sum(a > MAX_AGE_S * 1e3 for a in ing["set_age_ms"]),
        "frames_received": sum(ing["received"][c] for c in CAMERAS) / published_in_window,
        "joint_err_max": max((r["joint_err"] for r in col), default=math.nan),
        "rig_late_ms_max": rig["late_ms_max"],
        # whole run (warm-up included): why frames did not make it into an Observation
        "drops": " ".join(f"{k}:{v}" for k, v in sorted(_sum_drops(ing["drops"]).items())),
    }


def _sum_drops(per_stream: dict) -> dict:
    total: dict[str, int] = {}
    for reasons in per_stream.values():
        for k, v in reasons.items():
            total[k] = total.get(k, 0) + v
    return total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=12.0, help="s of stamps published per row")
    p.add_argument("--warmup", type=float, default=3.0, help="s excluded at the start of each row")
    p.add_argument("--startup", type=float, default=4.0, help="s allowed for the processes to start")
    p.add_argument("--methods", default="sync,naive")
    p.add_argument("--transports", default="default,big_shm")
    p.add_argument("--seed", type=int, default=0)
    add_json_option(p)
    # internal: one process per role
    p.add_argument("--role", choices=("ingest", "collect"), help=argparse.SUPPRESS)
    p.add_argument("--method", default="sync", help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "ingest":
        return role_ingest(args)
    if args.role == "collect":
        return role_collect(args)
    if args.warmup >= args.duration:
        p.error("--warmup must be shorter than --duration")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ingest_bench_") as tmp:
        for transport in args.transports.split(","):
            for method in args.methods.split(","):
                rows.append(run_row(method, transport, args, tmp))
                print(f"  done: {method} / {transport}", file=sys.stderr, flush=True)
    report(rows, COLUMNS + ("rig_late_ms_max",), args.json)
    for r in rows:
        print(f"drops ({r['method']}/{r['transport']}): {r['drops']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
