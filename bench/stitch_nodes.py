"""The stitcher as the graph runs it: its node over DDS (`run_dds`) and its bridge's decisions (`run_bridge`).

Used by `bench/stitch.py --suite dds` and `--suite bridge`; the chunks are the rough workload of
`stitch_workloads.py`.
"""
from __future__ import annotations

import time

import numpy as np
from stitch_binding import DT, ChunkSource  # stitch_workloads.py's, as bench/stitch_binding.py imports them

from plan_stack.trajectory.alignment import Chunk
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.stitching import Stitcher, StitchStatus

DDS_COLUMNS = ["suite", "workload", "dof", "chunks", "received", "p50_ms", "p95_ms", "p99_ms", "solve_p50_ms",
               "convert_p50_ms", "convert_share", "to_callback_p50_ms", "callback_to_publish_p50_ms",
               "publish_to_receipt_p50_ms", "publish_to_return_p50_ms", "publish_call_p50_ms", "solve_p95_ms",
               "to_callback_p95_ms", "callback_to_publish_p95_ms", "publish_to_receipt_p95_ms", "generators"]


def run_dds(n_chunks: int = 60, rate_hz: float = 10.0, seed: int = 0) -> list[dict]:
    """Chunk -> trajectory latency of the `stitcher` node over DDS (config/aloha.yaml's stitcher
    parameters): a publisher node sends rough 14-DoF chunks, a subscriber node receives the
    JointTrajectory; each node spins on its own executor in its own thread (as `plan-stack up`).
    Latency = publish call -> receipt. Conversion = ActionChunk -> Chunk, Trajectory ->
    the serialized JointTrajectory (the node publishes CDR built from the arrays; the receiver reads it raw
    into a Trajectory, as the bridges do, and the latency ends there), timed on the same messages; its share
    is of the median latency."""
    import threading

    import rclpy
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from plan_stack.config import field_kinds
    from plan_stack.msg import ActionChunk
    from plan_stack.robot_config import load_robot_config
    from plan_stack.ros.lifecycle import executor_for
    from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
    from plan_stack.ros.testing import ros_context
    from plan_stack.ros.trajectory import trajectory_from_cdr, trajectory_to_cdr
    from plan_stack.trajectory.stitch_limits import discrete_bounds, joint_columns, limits_from_config
    from plan_stack.trajectory.stitcher_node import StitcherNode

    spec = next(s for s in load_robot_config("aloha").nodes if s.name == "stitcher")
    # no bridge here: every chunk starts from the measured state (`initial_state: bridge` would wait for a report)
    params = {**spec.parameters, "use_sim_time": False, "joint_state_timeout_s": 1e6,
              "initial_state": "joint_states"}
    names = tuple(params["joint_names"])
    discrete = np.array([n in params.get("discrete_joints", []) for n in names])
    src = ChunkSource("rough", len(names), 50, seed, {k: params[k] for k in ("v_max", "a_max")}, discrete)
    # The stitcher's own position range (the bridge's moved inward by the LimitRule margin): a measured start
    # outside it is an infeasible start (braked, the chunk ignored), not the binding solve this bench times.
    known = field_kinds(StitcherConfig)
    cfg = StitcherConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items() if k in known})
    own, _ = limits_from_config(cfg)
    cidx, didx = joint_columns(cfg)
    q_lo, q_hi = np.full(len(names), -np.inf), np.full(len(names), np.inf)
    q_lo[cidx], q_hi[cidx] = own.q_min, own.q_max
    q_lo[didx], q_hi[didx] = discrete_bounds(cfg)
    sent: list[float] = []
    got: list[float] = []
    conv_in: list[float] = []
    conv_out: list[float] = []
    conv_recv: list[float] = []  # the receiver's trajectory_from_cdr, as a bridge reads the stream
    entered: list[float] = []  # the chunk callback starts
    published: list[float] = []  # the stitcher's publish call returns
    returned: list[float] = []  # the chunk callback returns (diagnostics done)
    publish_call: list[float] = []  # rclpy's publish call (the message's conversion to C and the DDS write), ms
    on_chunk = StitcherNode._on_chunk

    def timed_callback(self, msg):  # the callback as the subscription calls it (bound at node creation)
        entered.append(time.perf_counter())
        on_chunk(self, msg)
        returned.append(time.perf_counter())

    with ros_context() as ctx, _patched(StitcherNode, "_on_chunk", timed_callback):
        node = StitcherNode(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        pub_call = node.pub.publish

        def timed_publish(m):
            t0 = time.perf_counter()
            pub_call(m)
            published.append(time.perf_counter())
            publish_call.append((published[-1] - t0) * 1e3)

        node.pub.publish = timed_publish
        peer = rclpy.create_node("dds_bench_peer", context=ctx)
        pub = peer.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        js = peer.create_publisher(JointState, "joint_states", SENSOR_QOS)
        arrived = threading.Event()  # the main thread blocks on it (polling would take the GIL every wake-up)

        def on_trajectory(data: bytes) -> None:  # as the bridges read it: raw, then the arrays with numpy
            t0 = time.perf_counter()
            trajectory_from_cdr(data)
            got.append(time.perf_counter())
            conv_recv.append((got[-1] - t0) * 1e3)
            arrived.set()

        peer.create_subscription(JointTrajectory, "trajectory", on_trajectory, RELIABLE_QOS, raw=True)
        solve_ms: list[float] = []
        generators: dict[str, int] = {}  # which generator made the trajectories (mpc: the binding solve timed)
        orig = node.stitcher.process
        emitted: list = []

        def timed(*a, **k):
            r = orig(*a, **k)
            solve_ms.append(r.solve_ms)
            generators[r.generator or "failed"] = generators.get(r.generator or "failed", 0) + 1
            if r.trajectory is not None:  # converted again after the run: not in the latency measured here
                emitted.append((r.trajectory, r.lead_s))
            return r

        node.stitcher.process = timed
        executors, threads = [], []

        def spin(ex):
            try:
                ex.spin()
            except Exception:  # shutdown while spinning
                pass

        for n in (node, peer):
            ex = executor_for(n)
            ex.add_node(n)
            executors.append(ex)
            threads.append(threading.Thread(target=spin, args=(ex,), daemon=True))
            threads[-1].start()
        deadline = time.time() + 20
        while (pub.get_subscription_count() == 0 or peer.count_publishers("trajectory") == 0) and \
                time.time() < deadline:
            time.sleep(0.05)
        chunk, _, measured = src.next()
        q0 = np.minimum(np.maximum(measured[0], q_lo), q_hi)  # a measured state inside the robot's range
        q_js = q0  # joint_states units (e.g. gripper metres): the node maps them by state_scale / state_offset
        if params.get("state_scale"):
            q_js = q0 / np.asarray(params["state_scale"], float) + np.asarray(params["state_offset"], float)
        for _ in range(20):
            js.publish(JointState(name=list(names), position=q_js.tolist(), velocity=[0.0] * len(names)))
            time.sleep(0.01)
        for _ in range(n_chunks):
            chunk, _, measured = src.next()
            node.stitcher.reset()  # every chunk from the measured state: a fresh rough solve each time
            msg = ActionChunk()
            stamp = node.get_clock().now().nanoseconds
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
            msg.joint_names = list(names)
            msg.dt = DT
            msg.horizon = 50
            # inside the robot's range, as a head trained on its demonstrations is (the stitcher rejects
            # samples beyond q_min/q_max by more than position_tolerance)
            ref = np.minimum(np.maximum(chunk.positions - chunk.positions[0] + q0, q_lo), q_hi)
            msg.positions = ref.ravel().tolist()
            c0 = time.perf_counter()
            Chunk.from_flat(0.0, msg.joint_names, msg.dt, msg.horizon, msg.positions)
            conv_in.append((time.perf_counter() - c0) * 1e3)
            arrived.clear()
            t0 = time.perf_counter()
            pub.publish(msg)
            sent.append(t0)
            arrived.wait(2.0)
            time.sleep(max(0.0, 1.0 / rate_hz - (time.perf_counter() - t0)))
        for n, ex in zip((node, peer), executors):
            ex.remove_node(n)
            ex.shutdown(timeout_sec=1.0)
        for t in threads:
            t.join(timeout=2.0)
        peer.destroy_node()
        node.close()
        node.destroy_node()
    for traj, lead_s in emitted:  # the node's conversion, timed on the same trajectories after the run
        t0 = time.perf_counter()
        trajectory_to_cdr(traj, 0, lead_s=lead_s)
        conv_out.append((time.perf_counter() - t0) * 1e3)
    lat = np.array([g - s for s, g in zip(sent, got)]) * 1e3
    convert_p50 = float(np.median(conv_in) + np.median(conv_out) + np.median(conv_recv)) if conv_recv else float("nan")
    p50 = float(np.percentile(lat, 50)) if len(lat) else float("nan")
    pct = (lambda q: float(np.percentile(lat, q))) if len(lat) else (lambda q: float("nan"))
    n = min(len(sent), len(entered), len(published), len(returned), len(got))

    def med(a, b, q: float = 50) -> float:  # percentile q of b - a over the chunks (ms)
        return float(np.percentile((np.asarray(b[:n]) - np.asarray(a[:n])) * 1e3, q)) if n else float("nan")

    return [{"suite": "dds", "workload": "rough", "dof": len(names), "chunks": n_chunks, "received": len(lat),
             "p50_ms": p50, "p95_ms": pct(95), "p99_ms": pct(99),
             "solve_p50_ms": float(np.median(solve_ms)) if solve_ms else float("nan"),
             "convert_p50_ms": convert_p50, "convert_share": convert_p50 / p50 if p50 else float("nan"),
             "to_callback_p50_ms": med(sent, entered), "callback_to_publish_p50_ms": med(entered, published),
             "publish_to_receipt_p50_ms": med(published, got), "publish_to_return_p50_ms": med(published, returned),
             "publish_call_p50_ms": float(np.median(publish_call)) if publish_call else float("nan"),
             # where the tail is: each part's own p95 (the parts' p95s do not add up to the latency's)
             "solve_p95_ms": float(np.percentile(solve_ms, 95)) if solve_ms else float("nan"),
             "to_callback_p95_ms": med(sent, entered, 95), "callback_to_publish_p95_ms": med(entered, published, 95),
             "publish_to_receipt_p95_ms": med(published, got, 95),
             "generators": " ".join(f"{k}:{v}" for k, v in sorted(generators.items()))}]


class _patched:
    """Set `owner.name = value` for the duration of a with block (a class attribute: a bound method that a
    node registers as a callback at creation)."""

    def __init__(self, owner, name: str, value) -> None:
        self.owner, self.name, self.value = owner, name, value

    def __enter__(self):
        self.saved = self.owner.__dict__[self.name]
        setattr(self.owner, self.name, self.value)
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.owner, self.name, self.saved)


BRIDGE_COLUMNS = ["suite", "robot", "seed", "delay_max_ms", "delayed_share", "late_join_s", "chunks", "published",
                  "refused", "late_refused", "unseen_refused", "accepted_late", "reanchored", "fallbacks",
                  "interpolation_rejects", "failed", "first_refusal"]


def run_bridge(robots=("aloha", "franka"), seeds=(0, 1), delays_ms=(0.0, 5.0, 30.0, 90.0, 150.0, 250.0),
               n_chunks=300, late_joins_s=(0.1,), report_delay_ms=10.0, delayed_shares=(1.0,)) -> list[dict]:
    """The stitcher node's policy (`Stitcher` with `StartState`, initial_state bridge) and its bridge's decisions
    (`ArmBridge`, the bridge nodes' library) in one process on one simulated clock, with the robot config's
    parameters: rough chunks every 0.10-0.12 s (off the output grid) from where the bridge's reference is, each
    trajectory delivered to the bridge up to `delay` after it was published (a `delayed_share` of them, the others
    within 5 ms, as stalls of a loaded machine; in order, as one reliable publisher's messages arrive), and the
    bridge's accounts of what it executes (`active_trajectory`: the curve it follows) and of each refusal
    (`bridge_state`) delivered to the stitcher up to `report_delay_ms` later.
    Counts the bridge's refusals: `late_refused` those of trajectories delivered later than the stitcher's
    `command_latency_s` (their first new point may be due already; the join from the present reference, trimmed
    by `late_join_s`, did not pass: a transport delay beyond the latency budget, which no stitcher can see
    coming); `unseen_refused` the others published before the stitcher could know that an earlier one was refused
    or joined late (stitched onto what the bridge was not going to follow: they arrive in the same burst);
    `refused` every refusal (goal: none but those two kinds). Each combination of a delay, a delayed share and a
    `late_joins_s` value is a row (late_join_s 0: late commands refused as they are)."""
    import dataclasses
    import heapq

    from plan_stack.config import field_kinds, from_mapping
    from plan_stack.embodiments.arm_bridge import ArmBridge, ArmBridgeSettings
    from plan_stack.embodiments.registry import joint_limits
    from plan_stack.robot_config import load_robot_config
    from plan_stack.robots import profile_of_bridge
    from plan_stack.stamps import s_to_ns
    from plan_stack.trajectory.alignment import ChunkError
    from plan_stack.trajectory.config import StitcherNodeConfig
    from plan_stack.trajectory.start_state import StartState

    rows = []
    for robot in robots:
        nodes = {n.name: n for n in load_robot_config(robot).nodes}
        spec = next(n for n in nodes.values() if n.executable == "stitcher")
        bnode, bridge_robot = next((n, r) for n in nodes.values() if (r := profile_of_bridge(n.executable)) is not None
                                   and r.parts.bridge_limits is not None)
        known = field_kinds(StitcherConfig)
        cfg = from_mapping(StitcherConfig, {k: v for k, v in spec.parameters.items() if k in known})
        node_known = field_kinds(StitcherNodeConfig)
        node_cfg = from_mapping(StitcherNodeConfig, {**{k: v for k, v in spec.parameters.items() if k in node_known},
                                                     "initial_state": "bridge"})
        lead = float(spec.parameters.get("point_lead_s", 0.0))
        blim = joint_limits(bridge_robot, bnode.parameters)
        names = cfg.joint_names
        D = len(names)
        blim = blim.subset([blim.joint_names.index(n) for n in names])
        lo = np.asarray(cfg.q_min, float) if len(cfg.q_min) == D else blim.q_min
        hi = np.asarray(cfg.q_max, float) if len(cfg.q_max) == D else blim.q_max
        for seed, delay_ms, share, late_join in ((a, b, c, d) for a in seeds for b in delays_ms for c in delayed_shares
                                                 for d in late_joins_s):
            rng = np.random.default_rng(seed)
            st = Stitcher(cfg, lead_s=lead)
            st.prepare(50)
            start = StartState(st, node_cfg)
            br = ArmBridge(names, blim, ArmBridgeSettings(0.5, float(bnode.parameters.get("jump_tolerance", 0.02)),
                                                          1.0, 0.05, 0.8, 1.0, cfg.command_latency_s,
                                                          late_join_s=late_join),
                           np.ones(D, bool), np.full(D, np.inf))
            br.on_joint_state(np.clip(rng.uniform(-0.5, 0.5, D), lo, hi), 0.0)
            row = dict(suite="bridge", robot=robot, seed=seed, delay_max_ms=delay_ms, delayed_share=share,
                       late_join_s=late_join,
                       chunks=n_chunks, published=0, refused=0, late_refused=0, unseen_refused=0, accepted_late=0,
                       reanchored=0,
                       fallbacks=0, interpolation_rejects=0, failed=0, first_refusal="")
            events: list = []  # (time, order, kind, payload): one simulated clock for both nodes
            order = [0]
            last = {"trajectory": 0.0, "report": 0.0}  # each topic delivers in order
            upsets: list[tuple[float, float]] = []  # (published, told): refused or joined late, and when it was known

            def deliver(t_s: float, kind: str, payload, topic: str) -> float:
                last[topic] = max(last[topic], t_s)
                order[0] += 1
                heapq.heappush(events, (last[topic], order[0], kind, payload))
                return last[topic]

            deliver(1e-3, "active", br.hold(0.0), "report")
            deliver(1e-3, "refused", None, "report")  # bridge_state: ready, nothing refused yet
            t = 0.0
            for _ in range(n_chunks):
                t += 0.1 + rng.uniform(0.0, DT)
                order[0] += 1
                heapq.heappush(events, (t, order[0], "chunk", None))
            while events:
                now, _, kind, payload = heapq.heappop(events)
                if kind == "active":
                    start.on_active_trajectory(payload, now)
                elif kind == "refused":
                    on_state = getattr(start, "on_bridge_state", None)  # a revision without bridge_state: unused
                    if on_state is not None:
                        on_state(True, "", payload)
                elif kind == "trajectory":
                    msg, first_new_s, published_s = payload
                    acc = br.accept(msg, now)
                    report_at = now + rng.uniform(1e-3, report_delay_ms * 1e-3)
                    if acc.verdict.ok:
                        row["accepted_late"] += bool(acc.verdict.message)
                        reported = getattr(br, "in_force", None) or acc.command  # the curve it follows
                        told = deliver(report_at, "active", reported, "report")
                        if acc.verdict.message:  # joined late: not the curve the stitcher published
                            upsets.append((published_s, told))
                    else:
                        row["refused"] += 1
                        late = now > first_new_s
                        row["late_refused"] += late
                        row["unseen_refused"] += not late and any(p < published_s < t for p, t in upsets)
                        row["first_refusal"] = row["first_refusal"] or acc.verdict.message
                        told = deliver(report_at, "refused", (s_to_ns(msg.stamp_s), f"error {acc.verdict.error_code}: "
                                                              f"{acc.verdict.message}"), "report")
                        upsets.append((published_s, told))
                else:  # a chunk, as the node handles it
                    row["reanchored"] += start.before_chunk(now) is not None
                    assert br.follower is not None
                    here = br.follower.peek(now)
                    v = np.cumsum(rng.normal(0.0, 0.5, (50, D)), axis=0)
                    ref = here.positions + np.cumsum(v * DT, axis=0) - v[0] * DT
                    ref[rng.integers(1, 50):] += 0.3 * rng.choice([-1.0, 1.0], D)
                    chunk = Chunk(now, names, DT, np.clip(ref, lo, hi))
                    try:
                        start.require_state()
                        res = st.process(chunk, now, start.initial(now, chunk))
                    except ChunkError:
                        row["failed"] += 1
                        continue
                    row["interpolation_rejects"] += res.interpolation_rejects
                    if res.trajectory is None:
                        row["failed"] += 1
                        continue
                    row["fallbacks"] += res.status is StitchStatus.FALLBACK
                    tr = res.trajectory
                    msg = dataclasses.replace(tr, stamp_s=tr.t0_s - res.lead_s, times_s=tr.times_s + res.lead_s,
                                              dt_s=None)
                    start.on_published(s_to_ns(msg.stamp_s), now)
                    row["published"] += 1
                    # late: delivered after command_latency_s, when its first new point may be due already
                    delay_s = rng.uniform(0.0, (delay_ms if rng.random() < share else min(delay_ms, 5.0)) * 1e-3)
                    deliver(now + delay_s, "trajectory", (msg, now + cfg.command_latency_s, now), "trajectory")
            rows.append(row)
    return rows
