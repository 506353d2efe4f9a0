"""viz node benchmark: what a plan costs the `viz` node, watched and unwatched, side by side.

The node's plan callback is timed directly (the work its executor thread
does per plan, without DDS delivery) for a dual-arm ALOHA plan: two
robot_2d3d primitives of P waypoints, two boxes and a sub-task, drawn on
the 224 x 224 cam_high image of a three-camera Observation. Cases, measured
in interleaved rounds in one process:

* idle        nobody subscribes to viz/markers or viz/plan_overlay
* markers     an RViz-like subscriber on viz/markers only
* overlay     a subscriber on viz/plan_overlay only
* both        both outputs watched
* observation_take  deserialising one Observation (what the node would pay per
              camera set if it kept its `observation` subscription while the
              overlay is unwatched; it does not: it subscribes only while watched)

Columns: mean/median/p95/worst per call in microseconds, `x_idle` (mean /
idle mean), `x_idle_median` (median / idle median: robust to a loaded
machine) and `cpu_at_10hz_percent` (one core's share at 10 calls per second,
from the mean).

    python bench/viz.py [--reps 300] [--rounds 5] [--waypoints 10] [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from report import add_json_option, report  # bench/report.py: shared table + JSON output


def _messages(waypoints: int, size: int, rng):
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import Point

    from plan_stack.msg import Observation, Primitive, VisualPlan
    from plan_stack.ros.image import numpy_to_image

    stamp = Time(sec=10)
    obs = Observation(camera_names=["cam_high", "cam_left_wrist", "cam_right_wrist"])
    obs.header.stamp = stamp
    obs.images = [numpy_to_image(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "rgb8") for _ in range(3)]
    prims = []
    for arm in ("left", "right"):
        pts = rng.uniform([-0.3, -0.2, 0.4], [0.3, 0.2, 0.9], (waypoints, 3))
        uv = rng.uniform(0, size - 1, 2 * waypoints)
        prims.append(Primitive(kind="robot_2d3d", arm=arm, frame_id="cam_high_optical_frame",
                               points=[Point(x=x, y=y, z=z) for x, y, z in pts], uv=uv.tolist()))
    for _ in range(2):
        u, v = rng.uniform(0, size / 2, 2)
        prims.append(Primitive(kind="box", uv=[u, v, u + 30.0, v + 20.0]))
    plan = VisualPlan(subtask="grasp the red cube with the right arm", primitives=prims)
    plan.header.stamp = stamp
    return plan, obs


def _stats(samples_s: list[float]) -> dict:
    us = np.asarray(samples_s) * 1e6
    return {"mean_us": float(us.mean()), "median_us": float(np.median(us)), "p95_us": float(np.percentile(us, 95)),
            "worst_us": float(us.max())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=300, help="calls per case per round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    p.add_argument("--warmup", type=int, default=20, help="untimed calls per case per round")
    p.add_argument("--waypoints", type=int, default=10, help="waypoints per arm, P")
    p.add_argument("--size", type=int, default=224, help="Observation image side, px")
    p.add_argument("--seed", type=int, default=0)
    add_json_option(p)
    args = p.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from rclpy.node import Node
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image
    from visualization_msgs.msg import MarkerArray

    from plan_stack.msg import Observation
    from plan_stack.ros.qos import RELIABLE_QOS
    from plan_stack.ros.testing import executor_with, ros_context, spin_until
    from plan_stack.viz.viz_node import VizNode

    plan, obs = _messages(args.waypoints, args.size, np.random.default_rng(args.seed))
    raw_obs = serialize_message(obs)
    samples: dict[str, list[float]] = {c: [] for c in ("idle", "markers", "overlay", "both", "observation_take")}
    with ros_context() as ctx:
        viz = VizNode(context=ctx)
        watcher = Node("bench_viewer", context=ctx)
        with executor_with(ctx, viz, watcher) as ex:
            subs = {}

            def watch(markers: bool, overlay: bool) -> None:
                for name, want, topic, cls in (("markers", markers, "viz/markers", MarkerArray),
                                               ("overlay", overlay, "viz/plan_overlay", Image)):
                    if want and name not in subs:
                        subs[name] = watcher.create_subscription(cls, topic, lambda _m: None, RELIABLE_QOS)
                    elif not want and name in subs:
                        watcher.destroy_subscription(subs.pop(name))
                ok = spin_until(ex, lambda: (viz._markers_pub.get_subscription_count() > 0) == markers
                                and (viz._overlay_pub.get_subscription_count() > 0) == overlay, 10.0)
                if not ok:
                    raise RuntimeError("bench: discovery of the viewer did not settle")

            cases = {"idle": (False, False), "markers": (True, False), "overlay": (False, True), "both": (True, True)}
            for _ in range(args.rounds):
                for case, (markers, overlay) in cases.items():
                    watch(markers, overlay)
                    viz._observations.clear()
                    viz._observations.append(obs)
                    for k in range(args.warmup + args.reps):
                        t0 = time.perf_counter()
                        viz._on_plan(plan)
                        dt = time.perf_counter() - t0
                        if k >= args.warmup:
                            samples[case].append(dt)
                for k in range(args.warmup + args.reps):
                    t0 = time.perf_counter()
                    deserialize_message(raw_obs, Observation)
                    dt = time.perf_counter() - t0
                    if k >= args.warmup:
                        samples["observation_take"].append(dt)
            if viz.counts["rejected"]:
                raise RuntimeError("bench: the benchmark plan was rejected")
    idle = float(np.mean(samples["idle"]))
    idle_median = float(np.median(samples["idle"]))
    rows = []
    for case, s in samples.items():
        row = {"case": case, "calls": len(s), "waypoints": args.waypoints, "image_px": args.size, **_stats(s)}
        row["x_idle"] = row["mean_us"] * 1e-6 / idle
        row["x_idle_median"] = row["median_us"] * 1e-6 / idle_median
        row["cpu_at_10hz_percent"] = row["mean_us"] * 1e-6 * 10 * 100
        rows.append(row)
    report(rows, ["case", "calls", "mean_us", "median_us", "p95_us", "worst_us", "x_idle", "x_idle_median",
                  "cpu_at_10hz_percent"], args.json,
           formats={"mean_us": ".1f", "median_us": ".1f", "p95_us": ".1f", "worst_us": ".1f", "x_idle": ".1f",
                    "x_idle_median": ".1f", "cpu_at_10hz_percent": ".3f"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
