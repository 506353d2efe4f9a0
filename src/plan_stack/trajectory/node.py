"""`stitcher` node: ActionChunk in, limit-checked JointTrajectory out (DESIGN §3, §6).

Wiring only: parameters -> StitcherConfig / StitcherNodeConfig, chunks ->
`Stitcher.process`, result -> `trajectory` (and optionally the bridge's
ExecuteTrajectory action), outcomes -> /diagnostics. A rejected chunk or a
failed stitch publishes nothing: the trajectory already sent stays in force.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
from builtin_interfaces.msg import Duration
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.time import Time
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from plan_stack.action import ExecuteTrajectory
from plan_stack.config import ConfigError, param, validate
from plan_stack.msg import ActionChunk
from plan_stack.ros import conventions
from plan_stack.ros.action_client import ActionCall, ActionCallError
from plan_stack.ros.conventions import ERROR, OK, RELIABLE_QOS, SENSOR_QOS, WARN, Diagnostics, declare_config
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.stitching import Chunk, ChunkError, Stitcher, StitchStatus, Trajectory

__all__ = ["StitcherNodeConfig", "StitcherNode", "main", "trajectory_to_msg"]


@dataclasses.dataclass(frozen=True)
class StitcherNodeConfig:
    initial_state: str = param(
        "Start state when no trajectory is active: the measured joint_states, or the chunk's first sample at "
        "rest (only for open-loop simulation without joint_states)", "joint_states",
        choices=("joint_states", "chunk"))
    execute_action: str = param(
        "ExecuteTrajectory action each trajectory is also sent to (e.g. /execute_trajectory, served by the bridges); "
        "empty = publish on `trajectory` only", "")
    bridge_timeout_s: float = param("How long to wait for the bridge's action server / goal acceptance (s)", 1.0,
                                    min=0.0)
    expected_horizon: int = param(
        "Chunk horizon (samples) whose MPC data is prepared at start-up; 0 = prepare on first use", 0, min=0,
        max=10000)
    joint_state_timeout_s: float = param("Measured states older than this are not used (s)", 0.5, min=0.0)
    reanchor_tolerance: float = param(
        "When the measured joints are further than this from the trajectory being executed (max over the "
        "continuous joints, rad or m), the robot is not following it (the bridge refused it, a fault, a "
        "reset): the stitcher forgets it and starts the next trajectory from the measured state; 0 = never",
        0.1, min=0.0)
    diagnostics_period_s: float = param("Diagnostics republish period (s)", 1.0, min=0.01)
    point_lead_s: float = param(
        "Stamp each trajectory this long before its first point is due (time_from_start starts at it; same "
        "absolute times): the bridge then joins its reference to the first point over the lead instead of "
        "taking it as a jump. Keep it <= command_latency_s; 0 = first point at time 0", 0.0, min=0.0, max=1.0)
    # joint_states units -> stack units (ALOHA grippers: metres -> 0..1), per joint in joint_names order.
    state_offset: tuple[float, ...] = param(
        "Measured joint_states -> stack units: q_stack = (q - state_offset) * state_scale, one value per joint "
        "(empty = identity)", (), read_only=True)
    state_scale: tuple[float, ...] = param("see state_offset (empty = identity)", (), read_only=True)

    def __post_init__(self) -> None:
        validate(self)
        if len(self.state_offset) != len(self.state_scale):
            raise ConfigError("state_offset/state_scale: give both with one value per joint, or neither")


def trajectory_to_msg(traj: Trajectory, epoch_ns: int = 0, lead_s: float = 0.0) -> JointTrajectory:
    """header.stamp = `lead_s` before sample 0 is due (epoch_ns + t0_s - lead_s); time_from_start =
    lead_s + i·dt (the same absolute times). With a lead, the first point is not "due now": a bridge joins
    its present reference to it over the lead instead of taking it as a jump (joint_trajectory_controller
    semantics), so a start from the measured state a few mrad off the held reference stays within limits."""
    msg = JointTrajectory()
    lead_ns = int(round(lead_s * 1e9))
    stamp_ns = epoch_ns + int(round(traj.t0_s * 1e9)) - lead_ns
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    msg.joint_names = list(traj.joint_names)
    P, V, A = traj.positions.tolist(), traj.velocities.tolist(), traj.accelerations.tolist()
    points = []
    for i in range(len(P)):
        ns = lead_ns + int(round(i * traj.dt_s * 1e9))
        points.append(JointTrajectoryPoint(positions=P[i], velocities=V[i], accelerations=A[i],
                                           time_from_start=Duration(sec=ns // 1_000_000_000,
                                                                    nanosec=ns % 1_000_000_000)))
    msg.points = points
    return msg


class StitcherNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("stitcher", **kwargs)
        self.cfg = declare_config(self, StitcherConfig)
        self.node_cfg = declare_config(self, StitcherNodeConfig)
        self.stitcher = Stitcher(self.cfg)
        self.stitcher.prepare(self.node_cfg.expected_horizon)
        # The library works in float seconds since this epoch: absolute epoch seconds as doubles
        # resolve only ~0.2 us, too coarse to recognise samples on the shared grid exactly.
        self._epoch_ns = (self.get_clock().now().nanoseconds // 1_000_000_000) * 1_000_000_000
        self._measured: tuple[float, np.ndarray, np.ndarray] | None = None  # (stamp_s, q, v)
        self.counts = {"chunks": 0, "published": 0, "rejected": 0, "fallbacks": 0, "failed": 0, "reanchored": 0}
        self._refused: str | None = None  # the bridge aborted our last goal (set by the sender thread)
        if self.node_cfg.state_scale and len(self.node_cfg.state_scale) != len(self.cfg.joint_names):
            raise ConfigError(f"state_scale: {len(self.node_cfg.state_scale)} values for "
                              f"{len(self.cfg.joint_names)} joints")
        self.diag = Diagnostics(self, self.node_cfg.diagnostics_period_s)
        self.pub = self.create_publisher(JointTrajectory, "trajectory", RELIABLE_QOS)
        self.create_subscription(ActionChunk, "action_chunk", self._on_chunk, RELIABLE_QOS)
        self.create_subscription(JointState, "joint_states", self._on_joint_state, SENSOR_QOS)
        # Goals go out from a sender thread (ActionCall blocks until accepted); only the newest
        # trajectory is worth sending, so a pending one is replaced, never queued.
        name = self.node_cfg.execute_action
        self._bridge = ActionCall(self, ExecuteTrajectory, name, ReentrantCallbackGroup()) if name else None
        self._pending: JointTrajectory | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sender = threading.Thread(target=self._send_loop, name="stitcher_bridge", daemon=True)
        if self._bridge is not None:
            self._sender.start()
        self.diag.report("input", OK, "waiting for chunks", **self.counts)

    # --- callbacks -----------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        if not all(j in msg.name for j in self.cfg.joint_names) or len(msg.position) != len(msg.name):
            return
        order = [list(msg.name).index(j) for j in self.cfg.joint_names]
        q = np.asarray(msg.position, dtype=float)[order]
        v = (np.asarray(msg.velocity, dtype=float)[order] if len(msg.velocity) == len(msg.name)
             else np.zeros(len(order)))
        if self.node_cfg.state_scale:
            scale = np.asarray(self.node_cfg.state_scale, dtype=float)
            q, v = (q - np.asarray(self.node_cfg.state_offset, dtype=float)) * scale, v * scale
        self._measured = (self._now_s(), q, v)

    def _now_s(self) -> float:
        return (self.get_clock().now().nanoseconds - self._epoch_ns) * 1e-9

    def _measured_state(self, now_s: float, chunk: Chunk):
        if self.node_cfg.initial_state == "chunk":
            if self.stitcher.active is not None:
                return None  # the robot holds where the last trajectory ended: start there, not at the chunk
            if set(chunk.joint_names) != set(self.cfg.joint_names) or len(chunk.positions) == 0:
                return None  # process() rejects the chunk with the reason
            q0 = chunk.positions[0][[chunk.joint_names.index(j) for j in self.cfg.joint_names]]
            return q0, np.zeros_like(q0), np.zeros_like(q0)
        if self._measured is None or now_s - self._measured[0] > self.node_cfg.joint_state_timeout_s:
            return None
        _, q, v = self._measured
        return q, v, np.zeros_like(q)  # joint_states carry no acceleration

    def _reanchor(self, now_s: float) -> None:
        """Forget the active trajectory when the robot is not executing it: the bridge refused or aborted
        it, or the measured joints have departed from it by more than `reanchor_tolerance`."""
        active = self.stitcher.active
        if active is None:
            return
        why = None
        refused, self._refused = self._refused, None
        if refused:
            why = f"the bridge refused the last trajectory ({refused})"
        tol = self.node_cfg.reanchor_tolerance
        m = self._measured
        if why is None and tol > 0 and m is not None and now_s - m[0] <= self.node_cfg.joint_state_timeout_s:
            cols = self.stitcher._cidx
            q_ref = active.sample(np.array([m[0]]))[0][0]
            gap = float(np.max(np.abs(m[1][cols] - q_ref[cols]), initial=0.0))
            if gap > tol:
                why = f"measured joints are {gap:.3f} from the trajectory being executed (tolerance {tol})"
        if why is None:
            return
        self.stitcher.reset()
        self.counts["reanchored"] += 1
        self.get_logger().warning(f"re-anchoring to the measured state: {why}")
        self.diag.report("tracking", WARN, f"re-anchored to the measured state: {why}", now=True, **self.counts)

    def _on_chunk(self, msg: ActionChunk) -> None:
        self.counts["chunks"] += 1
        now_s = self._now_s()
        if self.node_cfg.initial_state == "joint_states":
            self._reanchor(now_s)
        try:
            stamp_s = (Time.from_msg(msg.header.stamp).nanoseconds - self._epoch_ns) * 1e-9
            chunk = Chunk.from_flat(stamp_s, msg.joint_names, msg.dt, msg.horizon, msg.positions)
            result = self.stitcher.process(chunk, now_s, self._measured_state(now_s, chunk))
        except ChunkError as exc:
            self.counts["rejected"] += 1
            self.get_logger().warning(f"rejected chunk: {exc}")
            self.diag.report("input", ERROR, f"rejected chunk: {exc}", now=True, reason=exc.reason, **self.counts)
            return
        if result.status is StitchStatus.FAILED:
            self.counts["failed"] += 1
            self.get_logger().error(f"no feasible trajectory: {'; '.join(result.messages)}")
            self.diag.report("solve", ERROR, "no feasible trajectory; previous one continues", now=True,
                             solve_ms=f"{result.solve_ms:.3f}", details="; ".join(result.messages), **self.counts)
            return
        self.counts["fallbacks"] += result.status is StitchStatus.FALLBACK
        out = trajectory_to_msg(result.trajectory, self._epoch_ns, self.node_cfg.point_lead_s)
        self.pub.publish(out)
        self.counts["published"] += 1
        self._send_to_bridge(out)
        rep = result.report
        level = OK if result.status is StitchStatus.OK else WARN
        self.diag.report("input", OK, "chunks accepted", **self.counts)
        self.diag.report(
            "solve", level, f"{result.generator} ({result.status.value})", now=level != OK,
            solve_ms=f"{result.solve_ms:.3f}", generator=result.generator, limit_margin=f"{rep.margin:.4f}",
            v_ratio=f"{rep.v_ratio:.4f}", a_ratio=f"{rep.a_ratio:.4f}", j_ratio=f"{rep.j_ratio:.4f}",
            constrained_joints=result.constrained_joints, trimmed_steps=result.trimmed_steps,
            details="; ".join(result.messages), **self.counts)

    def _send_to_bridge(self, traj: JointTrajectory) -> None:
        if self._bridge is None:
            return
        self._pending = traj
        self._wake.set()

    def _send_loop(self) -> None:
        timeout = self.node_cfg.bridge_timeout_s
        while not self._stop.is_set():
            if not self._wake.wait(0.1):
                continue
            self._wake.clear()
            traj, self._pending = self._pending, None
            if traj is None:
                continue
            try:
                handle = self._bridge.send(ExecuteTrajectory.Goal(trajectory=traj), server_timeout_s=timeout,
                                           accept_timeout_s=timeout)
                handle.get_result_async().add_done_callback(self._on_goal_result)
                self.diag.report("bridge", OK, f"sent to {self._bridge.name}")
            except ActionCallError as exc:
                self.diag.report("bridge", WARN, str(exc), now=True)

    def _on_goal_result(self, future) -> None:
        """A goal the bridge aborted (not because a newer one replaced it) was never executed."""
        res = future.result()
        result = getattr(res, "result", None)
        if result is None or result.error_code == ExecuteTrajectory.Result.SUCCESSFUL:
            return
        if "preempted" in result.error_string:
            return
        self._refused = f"error {result.error_code}: {result.error_string}"
        self.diag.report("bridge", WARN, f"{self._bridge.name} aborted a trajectory: {self._refused}", now=True)

    def close(self) -> None:
        """Stop the sender thread (called at shutdown)."""
        self._stop.set()
        if self._sender.is_alive():
            self._sender.join(timeout=2.0)


main = conventions.node_main(StitcherNode)
