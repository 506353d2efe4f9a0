"""`stitcher` node: ActionChunk in, limit-checked JointTrajectory out.

Wiring only: parameters -> StitcherConfig / StitcherNodeConfig, chunks ->
`Stitcher.process` from the start `StartState` picks (joint states, the
bridge's active_trajectory), result -> `trajectory` (and optionally the bridge's
ExecuteTrajectory action), outcomes -> /diagnostics. A rejected chunk or a
failed stitch publishes nothing: the trajectory already sent stays in force.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from plan_stack.action import ExecuteTrajectory
from plan_stack.joint_states import JointProblem, JointSelectError, JointSelector
from plan_stack.msg import ActionChunk, BridgeState
from plan_stack.ros.action_client import ActionCall, ActionCallError
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.repeats import RepeatFilter
from plan_stack.ros.time import stamp_to_ns
from plan_stack.ros.trajectory import header_stamp_ns, trajectory_from_cdr, trajectory_to_cdr, trajectory_to_msg
from plan_stack.trajectory.alignment import Chunk, ChunkError
from plan_stack.trajectory.config import InitialState, StitcherConfig, StitcherNodeConfig
from plan_stack.trajectory.core import TrajectoryError
from plan_stack.trajectory.start_state import Reanchor, StartState
from plan_stack.trajectory.stitching import Stitcher, StitchStatus

__all__ = ["StitcherNodeConfig", "StitcherNode", "main", "trajectory_to_msg"]


class StitcherNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("stitcher", **kwargs)
        self.cfg = declare_config(self, StitcherConfig)
        self.node_cfg = declare_config(self, StitcherNodeConfig)
        self.stitcher = Stitcher(self.cfg, lead_s=self.node_cfg.point_lead_s)
        self.stitcher.prepare(self.node_cfg.expected_horizon)
        # The library works in float seconds since this epoch: absolute epoch seconds as doubles
        # resolve only ~0.2 us, too coarse to recognise samples on the shared grid exactly.
        self._epoch_ns = (self.get_clock().now().nanoseconds // 1_000_000_000) * 1_000_000_000
        self.counts: dict[str, Any] = {"chunks": 0, "published": 0, "rejected": 0, "fallbacks": 0, "failed": 0,
                                       "reanchored": 0, "bad_joint_states": 0, "clamped_samples": 0,
                                       "clock_resets": 0, "bad_active_trajectories": 0,
                                       "interpolation_rejects": 0, "paused": 0, "bad_bridge_states": 0}
        self.start = StartState(self.stitcher, self.node_cfg)  # what a trajectory starts from
        self._joints = JointSelector(self.node_cfg.state_joint_names or self.cfg.joint_names)
        # the last joint_states problem reported (None: the last message was good)
        self._joint_problem: JointProblem | None = None
        self.diag = Diagnostics(self, self.node_cfg.diagnostics_period_s)
        self._reanchor_log = RepeatFilter()  # re-anchoring repeats each chunk while the bridge refuses them
        self._pause_log = RepeatFilter()  # a pause drops every chunk until the bridge follows commands again
        # OK outcomes are reported at most once per diagnostics period (building the status costs ~0.2 ms per
        # chunk otherwise); the latest one waiting is flushed by this timer. Anything not OK is reported at once.
        self._ok_report: tuple[str, dict[str, Any]] | None = None
        self._ok_reported_at = -float("inf")
        # on the steady clock: the flush is about wall time, and a sim-time timer also fires on time jumps
        self.create_timer(self.node_cfg.diagnostics_period_s, self._flush_ok_report,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.pub = self.create_publisher(JointTrajectory, "trajectory", RELIABLE_QOS)
        self.create_subscription(ActionChunk, "action_chunk", self._on_chunk, RELIABLE_QOS)
        self.create_subscription(JointState, "joint_states", self._on_joint_state, SENSOR_QOS)
        if self.node_cfg.initial_state == InitialState.BRIDGE:
            # raw: read with numpy (`trajectory_from_cdr`), not as one Python object per point
            self.create_subscription(JointTrajectory, "active_trajectory", self._on_active_trajectory, LATCHED_QOS,
                                     raw=True)
        # the bridge's command state: paused while it refuses every command, a refusal of ours acted on at once
        self.create_subscription(BridgeState, "bridge_state", self._on_bridge_state, LATCHED_QOS)
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
        on_clock_reset(self, self._on_clock_reset)

    # --- callbacks -----------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            sel = self._joints.select(msg.name, msg.position, msg.velocity)
        except JointSelectError as exc:  # never a measured state: reported, not silently dropped
            self.counts["bad_joint_states"] += 1
            self.diag.report("joint_states", ERROR, f"rejected: {exc}", now=exc.reason is not self._joint_problem,
                             reason=exc.reason.value, rejected=self.counts["bad_joint_states"])
            self._joint_problem = exc.reason
            return
        if self._joint_problem is not None:
            self._joint_problem = None
            self.diag.report("joint_states", OK, "joint states accepted", now=True,
                             rejected=self.counts["bad_joint_states"])
        self.start.measure(sel.position, sel.velocity, self._now_s())

    def _on_active_trajectory(self, data: bytes) -> None:
        """The bridge's trajectory in force (what it executes from the stamp on), in stack units."""
        try:
            acked = self.start.on_active_trajectory(trajectory_from_cdr(data, self._epoch_ns), self._now_s())
        except TrajectoryError as exc:  # never stitched onto: reported
            self.counts["bad_active_trajectories"] += 1
            self.diag.report("bridge", ERROR, f"rejected active_trajectory: {exc}", now=True,
                             rejected=self.counts["bad_active_trajectories"])
            return
        if acked:
            self._reanchor_log.reset()  # followed again: the next refusal is news, said at once

    def _on_bridge_state(self, msg: BridgeState) -> None:
        """Whether the bridge follows commands (a protective stop refuses them all until it is cleared) and the
        last command it refused (by stamp: one of ours re-anchors the next chunk at once)."""
        known = (BridgeState.WAITING, BridgeState.READY, BridgeState.PROTECTIVE_STOP)
        if msg.state not in known:  # never taken for "follows commands" nor for a stop: reported, ignored
            self.counts["bad_bridge_states"] += 1
            self.diag.report("bridge", ERROR, f"rejected bridge_state: unknown state {msg.state} (expected one of "
                             f"{list(known)})", now=True, rejected=self.counts["bad_bridge_states"])
            return
        refused = None
        if msg.refused_stamp.sec or msg.refused_stamp.nanosec:
            refused = (stamp_to_ns(msg.refused_stamp) - self._epoch_ns,
                       f"error {msg.refused_code}: {msg.refused_reason}")
        # paused by a protective stop only: before its first joint state (WAITING) the bridge has reported no
        # state either, and a chunk waits for that report (`no_state`), or is refused like any other command
        stopped = msg.state == BridgeState.PROTECTIVE_STOP
        if not self.start.on_bridge_state(not stopped, msg.reason, refused):
            return
        paused = self.start.paused
        if paused is not None:
            self._pause_log.reset()
            self.get_logger().warning(self._pause_log(self._pause_text(paused)) or "paused")
            self.diag.report("bridge", WARN, f"paused: the bridge refuses every command ({paused})", now=True,
                             **self.counts)
        else:
            self.get_logger().info("the bridge follows commands again: resuming")
            self.diag.report("bridge", OK, "the bridge follows commands again", now=True, **self.counts)

    @staticmethod
    def _pause_text(paused: str) -> str:
        return (f"paused: the bridge refuses every command ({paused}); chunks are dropped until it follows "
                "commands again")

    def _on_clock_reset(self) -> None:
        """ROS time went back (simulator reset or restart): the active trajectory, the measured state and any
        goal not yet sent belong to the old world; drop them, so the next chunk starts from fresh joint_states
        (a chunk stamped before the reset now lies in the future and is rejected)."""
        self.start.reset()
        self._pending = None
        self._epoch_ns = (self.get_clock().now().nanoseconds // 1_000_000_000) * 1_000_000_000
        self.counts["clock_resets"] += 1
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the active trajectory and the "
                                  "measured state")
        self.diag.report("clock", WARN, "clock jumped back: active trajectory and measured state dropped",
                         now=True, **self.counts)

    def _now_s(self) -> float:
        return (self.get_clock().now().nanoseconds - self._epoch_ns) * 1e-9

    def _report_reanchor(self, event: Reanchor) -> None:
        self.counts["reanchored"] += 1
        text = self._reanchor_log(event.log_text)
        if text is not None:  # a bridge that refuses everything (a protective stop) is said once, then counted
            self.get_logger().warning(text)
        self.diag.report("tracking", WARN, event.report_text, now=True, **self.counts)

    def _on_chunk(self, msg: ActionChunk) -> None:
        self.counts["chunks"] += 1
        now_s = self._now_s()
        event = self.start.before_chunk(now_s)
        if event is not None:
            self._report_reanchor(event)
        try:
            self.start.require_state()
            stamp_s = (stamp_to_ns(msg.header.stamp) - self._epoch_ns) * 1e-9
            chunk = Chunk.from_flat(stamp_s, msg.joint_names, msg.dt, msg.horizon, msg.positions)
            result = self.stitcher.process(chunk, now_s, self.start.initial(now_s, chunk))
        except ChunkError as exc:
            if exc.reason == "paused":  # said when the pause began, then every 10 s with a count; never published
                self.counts["paused"] += 1
                text = self._pause_log(self._pause_text(self.start.paused or ""))
                if text is not None:
                    self.get_logger().warning(text)
                self.diag.report("input", WARN, f"dropped chunk: {exc}", reason=exc.reason, **self.counts)
                return
            self.counts["rejected"] += 1
            self.get_logger().warning(f"rejected chunk: {exc}")
            self.diag.report("input", WARN, f"rejected chunk: {exc}", now=True, reason=exc.reason, **self.counts)
            return
        if result.status is StitchStatus.FAILED:
            self.counts["failed"] += 1
            self.counts["interpolation_rejects"] += result.interpolation_rejects
            self.get_logger().error(f"no feasible trajectory: {'; '.join(result.messages)}")
            self.diag.report("solve", ERROR, "no feasible trajectory; previous one continues", now=True,
                             solve_ms=f"{result.solve_ms:.3f}", details="; ".join(result.messages), **self.counts)
            return
        self.counts["fallbacks"] += result.status is StitchStatus.FALLBACK
        self.counts["clamped_samples"] += result.clamped_samples
        self.counts["interpolation_rejects"] += result.interpolation_rejects
        # every result but FAILED carries a trajectory and its limit report
        assert result.trajectory is not None and result.report is not None
        # the lead less the samples of the trajectory being executed that the stitcher put inside it
        self.start.on_published(header_stamp_ns(result.trajectory, self._epoch_ns, result.lead_s) - self._epoch_ns,
                                now_s)
        if self._bridge is None:  # the topic only: serialized from the arrays (docs/trajectory.md, "Inner workings")
            self.pub.publish(trajectory_to_cdr(result.trajectory, self._epoch_ns, lead_s=result.lead_s))
        else:
            out = trajectory_to_msg(result.trajectory, self._epoch_ns, lead_s=result.lead_s)
            self.pub.publish(out)
            self._send_to_bridge(out)
        self.counts["published"] += 1
        if self.diag.level("clock") == WARN:  # recovered from a clock reset
            self.diag.report("clock", OK, "trajectories published after the clock reset", **self.counts)
        rep = result.report
        level = OK if result.status is StitchStatus.OK else WARN
        values = dict(
            solve_ms=f"{result.solve_ms:.3f}", generator=result.generator, limit_margin=f"{rep.margin:.4f}",
            v_ratio=f"{rep.v_ratio:.4f}", a_ratio=f"{rep.a_ratio:.4f}", j_ratio=f"{rep.j_ratio:.4f}",
            constrained_joints=result.constrained_joints, trimmed_steps=result.trimmed_steps,
            clamped=result.clamped_samples, details="; ".join(result.messages), **self.counts)
        message = f"{result.generator} ({result.status.value})"
        if level == OK and time.monotonic() - self._ok_reported_at < self.node_cfg.diagnostics_period_s:
            self._ok_report = (message, values)  # the timer reports it (or a newer one) within a period
            return
        self._report_solve(level, message, values)

    def _report_solve(self, level: Any, message: str, values: dict[str, Any]) -> None:
        self._ok_report = None
        if level == OK:
            self._ok_reported_at = time.monotonic()
        self.diag.report("input", OK, "chunks accepted", **{k: values[k] for k in self.counts})
        self.diag.report("solve", level, message, now=level != OK, **values)

    def _flush_ok_report(self) -> None:
        pending = self._ok_report
        if pending is not None:
            self._report_solve(OK, *pending)

    def _send_to_bridge(self, traj: JointTrajectory) -> None:
        if self._bridge is None:
            return
        self._pending = traj
        self._wake.set()

    def _send_loop(self) -> None:
        bridge = self._bridge
        if bridge is None:  # started only when there is a bridge
            return
        timeout = self.node_cfg.bridge_timeout_s
        while not self._stop.is_set():
            if not self._wake.wait(0.1):
                continue
            self._wake.clear()
            traj, self._pending = self._pending, None
            if traj is None:
                continue
            try:
                handle = bridge.send(ExecuteTrajectory.Goal(trajectory=traj), server_timeout_s=timeout,
                                           accept_timeout_s=timeout)
                handle.get_result_async().add_done_callback(self._on_goal_result)
                self.diag.report("bridge", OK, f"sent to {bridge.name}")
            except ActionCallError as exc:
                self.diag.report("bridge", WARN, str(exc), now=True)

    def _on_goal_result(self, future: Any) -> None:
        """A goal the bridge aborted (not because a newer one replaced it) was never executed."""
        res = future.result()
        result = getattr(res, "result", None)
        if result is None or result.error_code == ExecuteTrajectory.Result.SUCCESSFUL:
            return
        if "preempted" in result.error_string:
            return
        refused = f"error {result.error_code}: {result.error_string}"
        self.start.on_refused(refused)
        name = self._bridge.name if self._bridge is not None else "the bridge"
        self.diag.report("bridge", WARN, f"{name} aborted a trajectory: {refused}", now=True)

    def close(self) -> None:
        """Stop the sender thread (called at shutdown)."""
        self._stop.set()
        if self._sender.is_alive():
            self._sender.join(timeout=2.0)


main = node_main(StitcherNode)
