"""One closed-loop episode through the full ROS graph, and what it measured.

Reset per seed = **its own process set per episode**: every episode starts
the robot config's nodes afresh (`python -m plan_stack.bringup CFG
--processes --no-respawn`, under `nice`) in a ROS domain of its own
(reserved like the test suite's, 101-200), so no state (RTC prefix, planner
window, stitcher reference, bridge follower, sim clock) leaks from one seed
into the next, and a crashed episode cannot poison the others. The cost is
the start-up (process imports and model loads, tens of seconds on a loaded
machine), paid outside sim time: the stack nodes are started first, and the
simulator only once every stack node answers its parameter service.
Each bring-up runs in a session and process group of its own under a group
keeper (`child_processes.keep_group`), which gets SIGTERM from the kernel when
the runner dies (`child_processes.die_with_parent`): the keeper stops the
bring-up (SIGINT), gives the group `STOP_TIMEOUT_S`, then kills whatever is
left of it, node processes included, even when the bring-up itself hangs. A
runner stopped by SIGINT or SIGTERM stops the groups the same way from its
`finally`; a runner killed by SIGKILL leaves the keepers to do it: no node
process outlives the run.

The config is `config/<robot>.yaml` with: the simulator's `seed`,
`real_time_factor` and pacing leads (`plan_stack.embodiments.pacing`), the
planner's `decoder`, `viz` left out (no viewer), and with `gt_plans` the
planner left out and replaced by `GroundTruthPlanner` in this process.

This process observes the graph (`_Monitor`): it converts what it receives and
hands it to `tally.EpisodeTally` (sim time, ground truth for the success
criterion (`criterion`), counts of observations, plans, chunks and
trajectories, every `/trajectory` checked against the bridge's own limits, the
measured joint states against the URDF position and velocity limits, the
bridge's rejections (its `/rosout` warnings), what the nodes' diagnostics say)
and to `latency.LatencyLog` (stage latencies).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from plan_stack.child_processes import die_with_parent, kill_group
from plan_stack.embodiments import registry
from plan_stack.eval.episodes.criterion import EpisodeSignals, criterion_of, done_early, judge
from plan_stack.eval.episodes.latency import LatencyLog
from plan_stack.eval.episodes.tally import EpisodeTally
from plan_stack.robots import PROFILES, RobotProfile, profile, robot_names
from plan_stack.ros.time import stamp_to_ns
from plan_stack.stamps import sec_nanosec_to_s

if TYPE_CHECKING:
    from plan_stack.data.bags import SplitBagWriter

__all__ = ["EpisodeOptions", "episode_config", "header_stamp_ns", "run_episode"]


#: Simulator + stack start-up budget (wall s): imports and model loads on a loaded 2-core machine.
STARTUP_TIMEOUT_S = 240.0
#: A start-up probe (a node's list_parameters call) unanswered this long is sent again (wall s).
SERVICE_RETRY_S = 5.0
#: How long the processes get to stop after SIGINT before they are killed (wall s).
STOP_TIMEOUT_S = 20.0
#: How much longer the runner waits for a group keeper than the keeper gives its group (wall s).
_KEEPER_MARGIN_S = 5.0


@dataclasses.dataclass(frozen=True)
class EpisodeOptions:
    robot: str
    seed: int
    real_time_factor: float = 1.0
    decoder: str | None = None  # planner decoder override (ar | dflash | vflash)
    gt_plans: bool = False
    time_limit_s: float | None = None  # sim s; None: the robot's default
    pace_chunk_lead_s: float = 0.0  # 0: simulator not paced to chunks
    pace_plan_lead_s: float = 0.0  # 0: simulator not paced to plans
    pace_timeout_s: float = 30.0  # wall s a paced gate may keep the simulator waiting (first plans are slow)
    config: str | None = None  # robot config name or path (default: the robot's)
    sets: tuple[tuple[str, str, Any], ...] = ()  # (node, parameter, value) overrides
    wall_timeout_s: float = 1800.0
    nice: int = 10
    bag: str | None = None  # record every topic to this new rosbag2 folder
    bag_images: bool = True  # False: leave image-carrying topics out of the bag (commands and states only)
    log_dir: str | None = None  # bring-up logs (default: a temporary folder)


def header_stamp_ns(raw: bytes) -> int:
    """Stamp (ns) of a serialised message whose first field is a std_msgs/Header (CDR, either byte order)."""
    if len(raw) < 12:
        raise ValueError("message shorter than a CDR header stamp")
    little = raw[1] in (1, 3)  # encapsulation CDR_LE / PL_CDR_LE (and CDR2 variants keep the low bit)
    sec, nsec = struct.unpack("<iI" if little else ">iI", raw[4:12])
    return sec * 1_000_000_000 + nsec


def episode_config(opts: EpisodeOptions) -> dict:
    """The robot config of one episode (see module doc) as a YAML-ready dict."""
    from plan_stack.robot_config import resolve_config_path

    sim_name = profile(opts.robot).sim_executable.name  # the simulator node is named after its executable
    path = resolve_config_path(opts.config or opts.robot)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    nodes: dict[str, Any] = raw["nodes"]
    if sim_name not in nodes:
        raise ValueError(f"{path}: no {sim_name} node (run-episodes needs the simulator)")
    sim = nodes[sim_name].setdefault("parameters", {})
    sim.update(seed=int(opts.seed), real_time_factor=float(opts.real_time_factor),
               pace_chunk_lead_s=float(opts.pace_chunk_lead_s), pace_plan_lead_s=float(opts.pace_plan_lead_s),
               pace_timeout_s=float(opts.pace_timeout_s))
    if "on_task_end" in sim:  # the episode runner ends the episode itself (its criterion, its time limit)
        sim.update(on_task_end="continue", task_time_limit_s=0.0)
    for name in [n for n, spec in nodes.items() if spec.get("executable") == "viz"]:
        del nodes[name]
    if not any(spec.get("executable") == "chunker" for spec in nodes.values()):
        # nothing answers on action_chunk (driving: the bridge consumes plans): a chunk gate would hold the
        # simulator's clock at 0 for ever, waiting for a publisher that never comes
        sim["pace_chunk_lead_s"] = 0.0
    planners = [n for n, spec in nodes.items() if spec.get("executable") == "planner"]
    if opts.gt_plans:
        for name in planners:
            del nodes[name]
    elif opts.decoder:
        if not planners:
            raise ValueError(f"{path}: --decoder given but the config runs no planner")
        for name in planners:
            nodes[name].setdefault("parameters", {})["decoder"] = opts.decoder
    for node, key, value in opts.sets:
        if node not in nodes:
            raise ValueError(f"--set {node}.{key}: no node {node!r} in the episode's graph ({sorted(nodes)})")
        nodes[node].setdefault("parameters", {})[key] = value
    return raw


class _Graph:
    """The episode's node processes: the stack (one bring-up) and the simulator (another)."""

    def __init__(self, cfg_path: Path, sim: str, stack: list[str], env: dict, log_dir: Path, nice: int) -> None:
        self.cfg_path, self.sim_name, self.stack_names = cfg_path, sim, stack
        self.env, self.log_dir, self.nice = env, log_dir, nice
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list[Any] = []

    def _start(self, label: str, extra: list[str]) -> None:
        log = open(self.log_dir / f"{label}.log", "w")
        self._logs.append(log)
        cmd = [sys.executable, "-m", "plan_stack.child_processes", "--grace", str(STOP_TIMEOUT_S), "--",
               "nice", "-n", str(self.nice), sys.executable, "-m", "plan_stack.bringup", str(self.cfg_path), *extra]
        # The keeper leads a session and process group of its own (the bring-up and its node processes join it)
        # and gets SIGTERM from the kernel if this runner dies, however it dies (SIGKILL included); it then stops
        # the bring-up and kills what is left of the group after STOP_TIMEOUT_S: no node process outlives the run.
        self.procs[label] = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))

    def start_stack(self) -> None:
        if self.stack_names:
            self._start("stack", ["--processes", "--no-respawn"])  # every node but the simulator (see run_episode)

    def start_sim(self) -> None:
        self._start("sim", ["--only", self.sim_name])

    def dead(self) -> str | None:
        for label, p in self.procs.items():
            if p.poll() is not None:
                return f"{label} processes exited with status {p.returncode} (log: {self.log_dir / label}.log)"
        return None

    def stop(self) -> None:
        """SIGINT to each group keeper (it stops the bring-up, which stops its nodes, and kills what is left of
        the group after STOP_TIMEOUT_S), then SIGKILL to whatever is left of the group."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S + _KEEPER_MARGIN_S
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            kill_group(p.pid)  # the group leader's pid is the group id (start_new_session)
            p.wait()
        for log in self._logs:
            log.close()


def _stack_config(raw: dict, sim: str) -> dict:
    """The same config without the simulator (the stack's bring-up)."""
    out = dict(raw)
    out["nodes"] = {n: spec for n, spec in raw["nodes"].items() if n != sim}
    return out


def run_episode(opts: EpisodeOptions, progress=None) -> dict:
    """Run one episode; returns its JSON row (see `plan-stack run-episodes --help`).

    `progress(sim_time_s)` is called while the episode runs (progress bars).
    """
    from plan_stack.ros.domains import reserve_domain

    if opts.robot not in PROFILES:
        raise ValueError(f"robot: {opts.robot!r} is not one of {robot_names()}")
    robot = profile(opts.robot)
    sim_name = robot.sim_executable.name
    limit_s = opts.time_limit_s or robot.episode.time_limit_s
    raw = episode_config(opts)
    domain, lock = reserve_domain(101, 200)
    tmp = tempfile.TemporaryDirectory(prefix="plan_stack_episode_")
    log_dir = Path(opts.log_dir) if opts.log_dir else Path(tmp.name)
    log_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{opts.robot}_{opts.seed}{'_gt' if opts.gt_plans else ''}"
    full_cfg = log_dir / f"{stem}.yaml"
    full_cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    stack_cfg = log_dir / f"{stem}_stack.yaml"
    stack_cfg.write_text(yaml.safe_dump(_stack_config(raw, sim_name), sort_keys=False))
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), **dds_profiles())
    row: dict[str, Any] = dict(robot=opts.robot, seed=int(opts.seed), gt_plans=bool(opts.gt_plans),
                               decoder=None if opts.gt_plans else (opts.decoder or _planner_decoder(raw)),
                               real_time_factor=opts.real_time_factor,
                               paced=bool(opts.pace_chunk_lead_s or opts.pace_plan_lead_s), time_limit_s=limit_s)
    stack_names = [n for n in raw["nodes"] if n != sim_name]
    graph = _Graph(stack_cfg, sim_name, stack_names, env, log_dir, opts.nice)
    graph_sim = _Graph(full_cfg, sim_name, [], env, log_dir, opts.nice)
    t_wall0 = time.monotonic()
    monitor = None
    try:
        monitor = _Monitor(opts, robot, domain, raw)
        graph.start_stack()
        if opts.gt_plans:
            monitor.start_gt_planner()
        missing = monitor.wait_for_nodes(stack_names, STARTUP_TIMEOUT_S, graph.dead)
        if missing:
            raise RuntimeError(f"stack nodes did not come up within {STARTUP_TIMEOUT_S:.0f} s: {missing} "
                               f"({graph.dead() or 'still starting'}; logs in {log_dir})")
        monitor.start_recording()
        graph_sim.start_sim()
        row["startup_wall_s"] = round(time.monotonic() - t_wall0, 1)
        t_run = time.monotonic()
        while True:
            time.sleep(0.1)
            s = monitor.signals()
            if progress is not None:
                progress(s.sim_time_s)
            if s.sim_time_s >= limit_s or done_early(opts.robot, s):
                break
            died = graph.dead() or graph_sim.dead()
            if died:
                raise RuntimeError(died)
            if time.monotonic() - t_run > opts.wall_timeout_s:
                raise RuntimeError(f"wall timeout: {opts.wall_timeout_s:.0f} s at sim time {s.sim_time_s:.1f} s")
        row["run_wall_s"] = round(time.monotonic() - t_run, 1)
        row["error"] = None
    except Exception as exc:  # one failed episode is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        graph_sim.stop()
        graph.stop()
        if monitor is not None:
            monitor.close()
        lock.close()
        if opts.log_dir is None:
            tmp.cleanup()
    if monitor is not None:
        row.update(monitor.row())
    s = monitor.signals() if monitor is not None else EpisodeSignals()
    verdict = judge(opts.robot, s)
    row["success"] = bool(verdict.success and not row["error"])
    row["reason"] = verdict.reason if not row["error"] else f"error: {row['error']}"
    row["sim_time_s"] = round(s.sim_time_s, 3)
    row["wall_s"] = round(time.monotonic() - t_wall0, 1)
    return row


def _planner_decoder(raw: dict) -> str | None:
    for spec in raw["nodes"].values():
        if spec.get("executable") == "planner":
            return spec.get("parameters", {}).get("decoder")
    return None


class _Monitor:
    """The observer node (and optionally the ground-truth planner and a recorder) in this process."""

    def __init__(self, opts: EpisodeOptions, robot: RobotProfile, domain: int, raw: dict) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.node import Node
        from rclpy.parameter import Parameter

        from plan_stack.ros.executors import ThreadedExecutor

        self.opts, self.robot, self.raw = opts, robot, raw
        self.ctx = Context()
        rclpy.init(args=[], context=self.ctx, domain_id=domain)
        self.node = Node("episode_monitor", context=self.ctx,
                         parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.lat = LatencyLog()
        self.extra_nodes: list[Any] = []
        self.recorder_writer: SplitBagWriter | None = None  # while recording (`--bag`)
        bridge = robot.bridge_executable.name  # the bridge node is named after its executable
        self.driving = robot.parts.bridge_limits is None  # the bridge follows plans, not joints
        self.tally = EpisodeTally(opts.robot, robot.sim_executable.name, bridge, _bridge_limits(robot, raw, bridge),
                                  robot.episode.checks_joint_states, self.driving)
        self._subscribe()
        self.executor = ThreadedExecutor(num_threads=3, context=self.ctx)
        self.executor.add_node(self.node)
        self._spinning = True
        self.spin_error: str | None = None
        self.thread = threading.Thread(target=self._spin, name="episode_monitor", daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while self._spinning and self.ctx.ok():
            try:
                self.executor.spin_once(timeout_sec=0.1)
            except Exception as exc:  # keep observing; say what went wrong once
                if self.spin_error is None and self._spinning:
                    self.spin_error = f"{type(exc).__name__}: {exc}"

    # --- subscriptions --------------------------------------------------------------

    def _subscribe(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rcl_interfaces.msg import Log
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Bool, Int32
        from trajectory_msgs.msg import JointTrajectory

        from plan_stack.msg import ActionChunk, Observation, PlanFeatures, VisualPlan
        from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS, SENSOR_QOS

        n, mono = self.node, time.monotonic
        n.create_subscription(Clock, "/clock", self._on_clock, RELIABLE_QOS)
        n.create_subscription(Image, f"/cameras/{self.robot.episode.latency_camera}/image_raw",
                              lambda raw: self.lat.camera(header_stamp_ns(raw), mono()), SENSOR_QOS, raw=True)
        n.create_subscription(Observation, "/observation", self._on_observation, RELIABLE_QOS, raw=True)
        n.create_subscription(VisualPlan, "/plan", self._on_plan, RELIABLE_QOS)
        n.create_subscription(PlanFeatures, "/plan_features", lambda m: self.tally.count("plan_features"),
                              RELIABLE_QOS)
        n.create_subscription(ActionChunk, "/action_chunk", self._on_chunk, RELIABLE_QOS)
        n.create_subscription(JointTrajectory, "/trajectory", self._on_trajectory, RELIABLE_QOS)
        n.create_subscription(JointState, "/joint_states", self._on_joint_states, SENSOR_QOS)
        n.create_subscription(Log, "/rosout", self._on_log, RELIABLE_QOS)
        if self.driving:  # drive_bridge answers each plan with a DriveTrajectory
            from plan_stack.msg import DriveTrajectory

            n.create_subscription(DriveTrajectory, "/drive_trajectory", self._on_drive_trajectory, RELIABLE_QOS)
        if self.robot.episode.bridge_command_topic:
            n.create_subscription(JointTrajectory, self.robot.episode.bridge_command_topic,
                                  lambda m: self.tally.count("bridge_commands"), RELIABLE_QOS)
        # the ground truth the robot's success criterion reads, by criterion kind (safe_driving: the distance
        # from the simulator's odometry; its faults come from /diagnostics, subscribed below for every robot's
        # stitcher counters)
        from nav_msgs.msg import Odometry

        ground_truth = {"staged_reward": (Int32, "/ground_truth/reward", self._on_reward, RELIABLE_QOS),
                        "success_flag": (Bool, "/ground_truth/success", self._on_success, RELIABLE_QOS),
                        "safe_driving": (Odometry, "/odom", self._on_odometry, SENSOR_QOS)}
        kind = criterion_of(self.opts.robot).kind
        if kind in ground_truth:
            n.create_subscription(*ground_truth[kind])
        n.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, DIAGNOSTICS_QOS)

    def _on_clock(self, msg) -> None:
        self.tally.clock(sec_nanosec_to_s(msg.clock.sec, msg.clock.nanosec))

    def _on_observation(self, raw: bytes) -> None:
        self.lat.observation(header_stamp_ns(raw), time.monotonic())
        self.tally.count("observations")

    def _on_plan(self, msg) -> None:
        self.lat.plan(stamp_to_ns(msg.header.stamp), time.monotonic())
        self.tally.count("plans")

    def _on_chunk(self, msg) -> None:
        self.lat.chunk(stamp_to_ns(msg.header.stamp), time.monotonic())
        self.tally.count("chunks")

    def _on_trajectory(self, msg) -> None:
        from plan_stack.ros.trajectory import trajectory_from_msg

        self.lat.trajectory(time.monotonic())
        self.tally.trajectory(lambda: trajectory_from_msg(msg))

    def _on_odometry(self, msg) -> None:
        p = msg.pose.pose.position
        self.tally.odometry(p.x, p.y)

    def _on_drive_trajectory(self, msg) -> None:
        self.lat.stamped_trajectory(stamp_to_ns(msg.header.stamp), time.monotonic())
        self.tally.count("trajectories")

    def _on_joint_states(self, msg) -> None:
        self.tally.joint_state(msg.name, msg.position, msg.velocity, stamp_to_ns(msg.header.stamp) * 1e-9)

    def _on_log(self, msg) -> None:
        self.tally.log(msg.name, msg.msg)

    def _on_reward(self, msg) -> None:
        self.tally.reward(msg.data)

    def _on_success(self, msg) -> None:
        self.tally.success(msg.data)

    def _on_diagnostics(self, msg) -> None:
        from diagnostic_msgs.msg import DiagnosticStatus

        for s in msg.status:
            self.tally.diagnostic(s.name, s.level == DiagnosticStatus.ERROR, s.message,
                                  [(kv.key, kv.value) for kv in s.values])

    # --- helpers --------------------------------------------------------------------

    def start_gt_planner(self) -> None:
        from plan_stack.eval.episodes.gt_planner import GroundTruthPlanner

        planner = GroundTruthPlanner(self.opts.robot, self.opts.seed, self.raw, context=self.ctx)
        self.extra_nodes.append(planner)
        self.executor.add_node(planner)

    def start_recording(self) -> None:
        if not self.opts.bag:
            return
        from rclpy.parameter import Parameter

        from plan_stack.data.bags import SplitBagWriter
        from plan_stack.data.record_cli import IMAGE_TYPES, RecorderNode
        from plan_stack.viz.bag import plan_typestore

        self.recorder_writer = writer = SplitBagWriter(self.opts.bag, plan_typestore())
        rec = RecorderNode(writer, None, context=self.ctx,
                           exclude_types=frozenset() if self.opts.bag_images else IMAGE_TYPES,
                           parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.extra_nodes.append(rec)
        self.executor.add_node(rec)

    def wait_for_nodes(self, names: list[str], timeout_s: float, dead) -> list[str]:
        """Wait until every node answers its parameter service (constructed, models loaded, spinning).

        A call unanswered after `SERVICE_RETRY_S` is sent again: on a loaded machine the server's
        response can be dropped ("failed to send response (timeout)"), and one lost reply must not
        fail the episode's start.
        """
        from rcl_interfaces.srv import ListParameters

        pending = set(names)
        clients: dict[str, Any] = {n: self.node.create_client(ListParameters, f"/{n}/list_parameters") for n in names}
        calls: dict[str, tuple[Any, float]] = {}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline and not dead():
            now = time.monotonic()
            for name in list(pending):
                call = calls.get(name)
                if call is not None and call[0].done():
                    pending.discard(name)
                elif (call is None or now - call[1] > SERVICE_RETRY_S) and clients[name].service_is_ready():
                    calls[name] = (clients[name].call_async(ListParameters.Request()), now)
            time.sleep(0.1)
        return sorted(pending)  # clients stay: destroying them under the spinning executor races it

    def signals(self) -> EpisodeSignals:
        return self.tally.signals()

    def row(self) -> dict:
        out = self.tally.row()
        out.update(self.lat.summary())
        out["monitor_error"] = self.spin_error
        return out

    def close(self) -> None:
        """Stop observing: the spin thread first, then the executor (which lets the callbacks still in flight
        finish before it releases anything: `ThreadedExecutor.shutdown`), then the extra nodes and the context."""
        self._spinning = False
        self.thread.join(timeout=5.0)
        try:
            self.executor.shutdown(timeout_sec=5.0)
        except Exception:
            pass
        late = self.executor.late_errors
        if late and self.spin_error is None:  # a callback that finished after the last spin raised
            self.spin_error = f"{type(late[0]).__name__}: {late[0]}"
        for n in self.extra_nodes:
            close = getattr(n, "close", None)
            if callable(close):
                close()
        if self.recorder_writer is not None:
            self.recorder_writer.close()
        if self.ctx.ok():
            import rclpy

            rclpy.shutdown(context=self.ctx)


#: the Fast DDS profile files run-episodes chose when the user gave none: (graph's, this process's)
_PROFILES: dict[str, str] = {}


def dds_profiles() -> dict[str, str]:
    """FASTDDS_DEFAULT_PROFILES_FILE for the graph's processes (camera frames between processes, see
    README: config/fastdds_big_shm.xml) where the user set none; this process gets the same transports
    without intra-process delivery (config/fastdds_monitor.xml: it shuts a context down every episode, and
    deleting a writer with intra-process delivery can deadlock in Fast DDS). Set before this process's
    first participant, when the file is read."""
    from plan_stack.paths import find_data

    if not _PROFILES:
        user = os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE")
        _PROFILES["graph"] = user or str(find_data("config", "fastdds_big_shm.xml"))
        if not user:
            os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(find_data("config", "fastdds_monitor.xml"))
    return {"FASTDDS_DEFAULT_PROFILES_FILE": _PROFILES["graph"]}


def _bridge_limits(robot: RobotProfile, raw: dict, bridge: str):
    """The bridge's joint limits in stack units, with the config's bridge parameters (what /trajectory must
    respect); None for driving."""
    if robot.parts.bridge_limits is None:
        return None
    params = raw["nodes"].get(bridge, {}).get("parameters", {})
    return registry.joint_limits(robot, {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()})
