"""Replay a bag's sensor topics through the real nodes and record what they publish.

The graph (ingest -> planner -> chunker -> stitcher, with the parameters of
`config/<robot>.yaml` plus overrides) runs in its own process on sim time, in
its own ROS domain. This process plays the bag: `/clock` from the camera
stamps, and the sensor topics (cameras, camera info, joint states, odometry)
published as the recorded bytes. A recorder writes every output topic to
`<out>/outputs/` (a rosbag2 MCAP bag).

Two modes:
* `deterministic`: one camera set at a time; the player waits until ingest
  has published the Observation of that set and the planner its plan (or the
  waits time out, which is counted), then until chunks and trajectories have
  settled, before the clock moves on. The planner plans every observation
  (`replan_period_s: 0`). Results do not depend on machine load.
* `realtime`: the bag is played at its own rate (times `rate`); nothing
  waits, so drops and latency are what a robot would see on this machine.

Bridges run dry: the robot config's bridge node starts in the namespace
`/dry_run` with only its inputs remapped to the graph (`/trajectory`,
`/joint_states` from the bag, `/plan`, `/odom`), so it validates every
trajectory exactly as on the robot (refusals appear in `/diagnostics`) while
its commands go to `/dry_run/...` topics that nothing follows: nothing moves.
A stitcher configured to start from the bridge's reports (`initial_state:
bridge`) starts from the bag's joint states instead.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from plan_stack.stamps import sec_nanosec_to_s

__all__ = ["EvalError", "ReplayConfig", "SensorMessage", "read_sensor_messages", "replay_bag", "GRAPH_NODES",
           "OUTPUT_TOPICS"]

#: executables of the evaluated graph (others in the robot config are not started); bridges run dry
GRAPH_NODES = ("ingest", "planner", "chunker", "stitcher")
DRY_RUN_NAMESPACE = "/dry_run"
#: a dry-run bridge reads the graph's topics; everything else it touches stays in its namespace
_BRIDGE_INPUTS = {"trajectory": "/trajectory", "joint_states": "/joint_states", "plan": "/plan", "odom": "/odom"}


def is_evaluated(executable: str) -> bool:
    return executable in GRAPH_NODES or executable.endswith("_bridge")
#: what the recorder keeps from the graph
OUTPUT_TOPICS = ("/observation", "/plan", "/plan_features", "/action_chunk", "/trajectory", "/diagnostics")
_SENSOR_SUFFIXES = ("/image_raw", "/camera_info", "/compressed")
_SENSOR_TOPICS = ("/joint_states", "/odom")


class EvalError(ValueError):
    """A bag or a setting cannot be evaluated (the message says what and why)."""


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    robot: str
    mode: str = "deterministic"
    overrides: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    rate: float = 1.0  # realtime mode: bag seconds per wall second
    observation_timeout_s: float = 10.0
    plan_timeout_s: float = 120.0
    settle_s: float = 0.3
    startup_timeout_s: float = 180.0
    joint_lookahead_s: float = 0.05  # deterministic: joint states published this far past each camera set

    def __post_init__(self) -> None:
        if self.mode not in ("deterministic", "realtime"):
            raise EvalError(f"mode must be deterministic or realtime, got {self.mode!r}")
        if self.rate <= 0:
            raise EvalError(f"rate must be > 0, got {self.rate}")


@dataclasses.dataclass(frozen=True)
class SensorMessage:
    t_s: float  # header stamp (the timeline the graph sees)
    topic: str
    msgtype: str
    raw: bytes


def is_sensor_topic(topic: str) -> bool:
    return topic in _SENSOR_TOPICS or (topic.startswith("/cameras/") and topic.endswith(_SENSOR_SUFFIXES))


def read_sensor_messages(bag: str | os.PathLike) -> list[SensorMessage]:
    """Sensor messages of a bag in stamp order; EvalError for an unreadable bag or one without cameras."""
    from rosbags.highlevel import AnyReader

    from plan_stack.viz.bag import plan_typestore

    out = []
    try:
        with AnyReader([Path(bag)], default_typestore=plan_typestore()) as reader:
            conns = [c for c in reader.connections if is_sensor_topic(c.topic)]
            for conn, _t, raw in reader.messages(connections=conns):
                msg: Any = reader.deserialize(raw, conn.msgtype)  # a rosbags message class, built at run time
                stamp = msg.header.stamp
                out.append(SensorMessage(sec_nanosec_to_s(stamp.sec, stamp.nanosec), conn.topic, conn.msgtype,
                                          bytes(raw)))
    except EvalError:
        raise
    except Exception as exc:  # rosbags raises many unrelated types for broken files
        raise EvalError(f"{bag}: cannot read the bag ({type(exc).__name__}: {exc})") from None
    if not any(m.topic.endswith(("/image_raw", "/compressed")) for m in out):
        raise EvalError(f"{bag}: no camera images (/cameras/<name>/image_raw) to replay")
    out.sort(key=lambda m: m.t_s)
    return out


def camera_steps(messages: list[SensorMessage], spread_s: float = 0.02) -> list[float]:
    """Times of the camera sets: image stamps grouped within `spread_s` (the set's latest stamp)."""
    stamps = sorted({m.t_s for m in messages if m.topic.endswith(("/image_raw", "/compressed"))})
    steps: list[float] = []
    for t in stamps:
        if steps and t - steps[-1] <= spread_s:
            steps[-1] = t
        else:
            steps.append(t)
    return steps


def evaluated_nodes(robot: str) -> set[str]:
    """Names of the robot config's nodes that the replay starts."""
    from plan_stack.robot_config import load_robot_config

    return {spec.name for spec in load_robot_config(robot).nodes if is_evaluated(spec.executable)}


def graph_config(cfg: ReplayConfig, path: Path) -> Path:
    """The robot config reduced to the evaluated nodes, on sim time, with the overrides applied."""
    from plan_stack.robot_config import load_robot_config

    robot = load_robot_config(cfg.robot)
    nodes: dict[str, Any] = {}
    for spec in robot.nodes:
        if not is_evaluated(spec.executable):
            continue
        params = dict(spec.parameters)
        if cfg.mode == "deterministic" and spec.executable == "planner":
            params["replan_period_s"] = 0.0
        if spec.executable == "stitcher" and params.get("initial_state") == "bridge":
            # the dry-run bridge reports in its own namespace and follows nothing: start from the bag's joint_states
            params["initial_state"] = "joint_states"
        params.update(cfg.overrides.get(spec.name, {}))
        nodes[spec.name] = {"executable": spec.executable, "parameters": params}
        remappings = dict(spec.remappings)
        if spec.executable.endswith("_bridge"):
            remappings.update({"__ns": DRY_RUN_NAMESPACE, **_BRIDGE_INPUTS})
        if remappings:
            nodes[spec.name]["remappings"] = remappings
    unknown = set(cfg.overrides) - set(nodes)
    if unknown:
        raise EvalError(f"--set names nodes that are not evaluated: {sorted(unknown)} (evaluated: {sorted(nodes)})")
    missing = [n for n in ("ingest", "planner") if n not in {v["executable"] for v in nodes.values()}]
    if missing:
        raise EvalError(f"{robot.path}: the evaluated graph needs {missing} (not in the robot config)")
    path.write_text(yaml.safe_dump({"common": {"use_sim_time": True}, "nodes": nodes}, sort_keys=False))
    return path


class _Player:
    """Publishes the bag and watches the graph's outputs (one rclpy context, own executor thread)."""

    def __init__(self, messages: list[SensorMessage], out_bag: Path) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rosgraph_msgs.msg import Clock

        from plan_stack.data.bags import SplitBagWriter
        from plan_stack.data.record_cli import RecorderNode, message_class
        from plan_stack.msg import Observation, VisualPlan
        from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
        from plan_stack.viz.bag import plan_typestore

        self.ctx = Context()
        rclpy.init(context=self.ctx)
        self.node = Node("eval_player", context=self.ctx)
        self._clock_msg = Clock
        self.clock = self.node.create_publisher(Clock, "/clock", LATCHED_QOS)
        self.pubs: dict[str, Any] = {}
        for m in messages:
            if m.topic not in self.pubs:
                qos = SENSOR_QOS if m.topic.endswith(("/image_raw", "/compressed")) or m.topic == "/joint_states" \
                    else RELIABLE_QOS
                self.pubs[m.topic] = self.node.create_publisher(message_class(m.msgtype), m.topic, qos)
        self.lock = threading.Lock()
        self.obs_stamps: set[float] = set()
        self.plan_stamps: set[float] = set()
        self.last_output = time.monotonic()
        self.published_sets: dict[float, float] = {}  # camera set stamp -> wall time published
        self.node.create_subscription(Observation, "/observation", self._on_obs, RELIABLE_QOS)
        self.node.create_subscription(VisualPlan, "/plan", self._on_plan, RELIABLE_QOS)
        self.writer = SplitBagWriter(out_bag, plan_typestore(), split_s=3600.0)
        self.recorder = RecorderNode(self.writer, frozenset(OUTPUT_TOPICS), on_message=self._touch, context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.executor.add_node(self.recorder)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    @staticmethod
    def _stamp(msg) -> float:
        return round(sec_nanosec_to_s(msg.header.stamp.sec, msg.header.stamp.nanosec), 6)

    def _touch(self, topic: str = "") -> None:
        """An output arrived; periodic diagnostics do not count (the graph is settled between them)."""
        if topic != "/diagnostics":
            self.last_output = time.monotonic()

    def _on_obs(self, msg) -> None:
        with self.lock:
            self.obs_stamps.add(self._stamp(msg))
        self._touch()

    def _on_plan(self, msg) -> None:
        with self.lock:
            self.plan_stamps.add(self._stamp(msg))
        self._touch()

    def set_clock(self, t_s: float) -> None:
        from plan_stack.ros.time import s_to_stamp

        self.clock.publish(self._clock_msg(clock=s_to_stamp(t_s)))

    def publish(self, m: SensorMessage) -> None:
        self.pubs[m.topic].publish(m.raw)

    def observed_near(self, stamp: float) -> bool:
        """An observation stamped within 30 ms of `stamp` came out (call under `lock`, as `wait` does)."""
        return any(abs(s - stamp) < 0.03 for s in self.obs_stamps)

    def planned(self, stamp: float) -> bool:
        """A plan for the observation stamped `stamp` came out (call under `lock`, as `wait` does)."""
        return stamp in self.plan_stamps

    def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if predicate():
                    return True
            time.sleep(0.005)
        with self.lock:
            return predicate()

    def wait_for_graph(self, nodes: dict[str, str], timeout_s: float, alive: Callable[[], bool]) -> list[str]:
        """Wait until every node answers its parameter service (so its executor spins) and the cameras are
        subscribed; returns the nodes that did not answer. `nodes`: name -> namespace.

        Sim time stands still until the replay starts, so timers (diagnostics) cannot tell that a node spins.
        """
        from rcl_interfaces.srv import ListParameters

        deadline = time.monotonic() + timeout_s
        pending = dict(nodes)
        clients: dict[str, Any] = {n: self.node.create_client(ListParameters, f"{ns.rstrip('/')}/{n}/list_parameters")
                   for n, ns in nodes.items()}
        calls: dict[str, Any] = {}
        while pending and time.monotonic() < deadline and alive():
            for name in list(pending):
                client = clients[name]
                if name not in calls and client.service_is_ready():
                    calls[name] = client.call_async(ListParameters.Request())
                if name in calls and calls[name].done():
                    del pending[name]
            time.sleep(0.05)
        while time.monotonic() < deadline and alive() and not all(
                self.node.count_subscribers(t) > 0 for t in self.pubs if t.endswith("/image_raw")):
            time.sleep(0.05)
        for client in clients.values():
            self.node.destroy_client(client)
        return sorted(pending)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self.thread.join(timeout=2.0)
        self.recorder.close()
        self.recorder.destroy_node()
        self.node.destroy_node()
        self.ctx.shutdown()


def _start_graph(config_path: Path, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, "-m", "plan_stack.bringup", str(config_path)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def _stop_graph(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)


def replay_bag(bag: str | os.PathLike, out_dir: str | os.PathLike, cfg: ReplayConfig,
               progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Play one bag through the graph; returns the replay's counters (outputs in `<out_dir>/outputs/`)."""
    messages = read_sensor_messages(bag)
    steps = camera_steps(messages)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = graph_config(cfg, out / "graph.yaml")
    env = os.environ.copy()
    proc = _start_graph(config_path, env, out / "graph.log")
    player = _Player(messages, out / "outputs")
    counters = {"camera_sets": len(steps), "sets_published": 0, "observation_timeouts": 0, "plan_timeouts": 0,
                "mode": cfg.mode, "graph_exit": None}
    try:
        graph = yaml.safe_load(config_path.read_text())["nodes"]
        nodes = {name: spec.get("remappings", {}).get("__ns", "/") for name, spec in graph.items()}
        silent = player.wait_for_graph(nodes, cfg.startup_timeout_s, lambda: proc.poll() is None)
        if silent or proc.poll() is not None:
            raise EvalError(f"the graph did not start (exit {proc.poll()}, nodes not spinning: {silent}); "
                            f"see {out / 'graph.log'}")
        player.set_clock(messages[0].t_s)
        time.sleep(0.2)  # latched /clock reaches every node before the first sensor message
        if cfg.mode == "deterministic":
            _play_deterministic(player, messages, steps, cfg, counters, progress, proc)
        else:
            _play_realtime(player, messages, steps, cfg, counters, progress)
        player.wait(lambda: False, cfg.settle_s)
    finally:
        counters["graph_exit"] = _stop_graph(proc)
        player.close()
    counters["published_sets_wall"] = {f"{k:.6f}": v for k, v in player.published_sets.items()}
    return counters


def _play_deterministic(player: _Player, messages, steps, cfg, counters, progress, proc) -> None:
    i = 0
    now = messages[0].t_s
    for k, t in enumerate(steps):
        # everything up to this camera set, plus the joint states just after it (interpolation needs them)
        while i < len(messages) and messages[i].t_s <= t + cfg.joint_lookahead_s:
            m = messages[i]
            if m.t_s > t and m.topic.endswith(("/image_raw", "/compressed", "/camera_info")):
                break  # the next camera set waits for its own step
            now = max(now, m.t_s)
            player.set_clock(now)
            player.publish(m)
            i += 1
        stamp = round(t, 6)
        player.published_sets[stamp] = time.time()
        counters["sets_published"] += 1
        if proc.poll() is not None:
            raise EvalError(f"the graph exited with status {proc.returncode} during the replay")
        if not player.wait(functools.partial(player.observed_near, stamp), cfg.observation_timeout_s):
            counters["observation_timeouts"] += 1
        else:
            obs = max((s for s in player.obs_stamps if abs(s - stamp) < 0.03), default=stamp)
            if not player.wait(functools.partial(player.planned, obs), cfg.plan_timeout_s):
                counters["plan_timeouts"] += 1
        # chunks and trajectories follow within milliseconds: wait until outputs are quiet
        deadline = time.monotonic() + 10 * cfg.settle_s
        while time.monotonic() < deadline and time.monotonic() - player.last_output < cfg.settle_s:
            time.sleep(0.01)
        if progress:
            progress(k + 1, len(steps))


def _play_realtime(player: _Player, messages, steps, cfg, counters, progress) -> None:
    t0_bag, t0_wall = messages[0].t_s, time.monotonic()
    done_sets = 0
    step_set = set(round(s, 6) for s in steps)
    for m in messages:
        due = t0_wall + (m.t_s - t0_bag) / cfg.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        player.set_clock(m.t_s)
        player.publish(m)
        stamp = round(m.t_s, 6)
        if stamp in step_set and stamp not in player.published_sets:
            player.published_sets[stamp] = time.time()
            counters["sets_published"] += 1
            done_sets += 1
            if progress:
                progress(done_sets, len(steps))
