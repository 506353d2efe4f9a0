"""`stitcher` node: ActionChunk in, limit-checked JointTrajectory out.

Wiring only: parameters -> StitcherConfig / StitcherNodeConfig, chunks ->
`Stitcher.process`, result -> `trajectory` (and optionally the bridge's
ExecuteTrajectory action), outcomes -> /diagnostics. A rejected chunk or a
failed stitch publishes nothing: the trajectory already sent stays in force.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import threading
import time
from typing import Any

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from plan_stack.action import ExecuteTrajectory
from plan_stack.config import ConfigError, param, validate
from plan_stack.joint_states import JointProblem, JointSelectError, JointSelector
from plan_stack.msg import ActionChunk
from plan_stack.ros.action_client import ActionCall, ActionCallError
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.repeats import RepeatFilter
from plan_stack.ros.time import stamp_to_ns
from plan_stack.ros.trajectory import header_stamp_ns, trajectory_from_cdr, trajectory_to_cdr, trajectory_to_msg
from plan_stack.stamps import s_to_ns
from plan_stack.trajectory.alignment import Chunk, ChunkError
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.core import Trajectory, TrajectoryError
from plan_stack.trajectory.stitching import Stitcher, StitchStatus

__all__ = ["StitcherNodeConfig", "StitcherNode", "main", "trajectory_to_msg"]

#: Reports of our trajectories by the bridge whose delays set the acknowledgement timeout.
_ACK_HISTORY = 20


class InitialState(enum.StrEnum):
    BRIDGE = "bridge"
    JOINT_STATES = "joint_states"
    CHUNK = "chunk"


@dataclasses.dataclass(frozen=True)
class StitcherNodeConfig:
    initial_state: InitialState = param(
        "What a trajectory starts from when it cannot stitch onto our own active one: `bridge` = what the bridge "
        "reports executing on active_trajectory (its accepted trajectories, holds and stops; no start until it has "
        "reported, at start-up and after a clock reset: a bridge without a state refuses a start taken from "
        "joint_states), `joint_states` = the measured state, `chunk` = the chunk's first sample at rest (only for "
        "open-loop simulation without joint_states)", InitialState.JOINT_STATES)
    bridge_ack_timeout_s: float = param(
        "initial_state bridge: a trajectory of ours that active_trajectory has not reported this long after it was "
        "published (or twice the slowest of the last 20 reports, if longer) counts as refused, and the next one "
        "stitches onto what the bridge executes instead (s)", 0.2, min=0.0)
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
    point_lead_s: float = param(
        "Stamp each trajectory this long before its first point is due (time_from_start starts at it; same "
        "absolute times): the bridge then joins its reference to the first point over the lead instead of "
        "taking it as a jump. The grid samples of the trajectory being executed over the lead, and back to now, "
        "are sent too, so the join never replaces more than part of one segment. Keep it <= command_latency_s; "
        "0 = first point at time 0", 0.0, min=0.0, max=1.0)
    reanchor_ignore_joints: tuple[str, ...] = param(
        "Joints whose distance from the trajectory does not count for re-anchoring (grippers: closed on an "
        "object they stay short of their reference by design)", (), read_only=True)
    diagnostics_period_s: float = param("Diagnostics republish period (s)", 1.0, min=0.01)
    # joint_states units -> stack units (ALOHA grippers: metres -> 0..1), per joint in joint_names order.
    state_offset: tuple[float, ...] = param(
        "Measured joint_states -> stack units: q_stack = (q - state_offset) * state_scale, one value per joint "
        "(empty = identity)", (), read_only=True)
    state_scale: tuple[float, ...] = param("see state_offset (empty = identity)", (), read_only=True)
    state_joint_names: tuple[str, ...] = param(
        "the joint_states joint each joint_names channel is read from, one per joint (empty = joint_names; a "
        "Franka's gripper width channel reads one finger joint, state_scale 2)", (), read_only=True)

    def __post_init__(self) -> None:
        validate(self)
        if len(self.state_offset) != len(self.state_scale):
            raise ConfigError("state_offset/state_scale: give both with one value per joint, or neither")


class StitcherNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("stitcher", **kwargs)
        self.cfg = declare_config(self, StitcherConfig)
        self.node_cfg = declare_config(self, StitcherNodeConfig)
        self.stitcher = Stitcher(self.cfg, lead_s=self.node_cfg.point_lead_s)
        self.stitcher.prepare(self.node_cfg.expected_horizon)
        # The library works in float seconds since this epoch: absolute epoch seconds as doubles
        # resolve only ~0.2 us, too coarse to recognise samples on the shared grid exactly.
        self._epoch_ns = (self.get_clock().now().nanoseconds // 1_000_000_000) * 1_000_000_000
        self._measured: tuple[float, np.ndarray, np.ndarray] | None = None  # (stamp_s, q, v)
        self.counts: dict[str, Any] = {"chunks": 0, "published": 0, "rejected": 0, "fallbacks": 0, "failed": 0,
                                       "reanchored": 0, "bad_joint_states": 0, "clamped_samples": 0,
                                       "clock_resets": 0, "bad_active_trajectories": 0,
                                       "interpolation_rejects": 0}
        if self.node_cfg.state_joint_names and len(self.node_cfg.state_joint_names) != len(self.cfg.joint_names):
            raise ConfigError(f"state_joint_names: {len(self.node_cfg.state_joint_names)} names for "
                              f"{len(self.cfg.joint_names)} joints")
        self._joints = JointSelector(self.node_cfg.state_joint_names or self.cfg.joint_names)
        ignored = set(self.node_cfg.reanchor_ignore_joints)
        self._reanchor_cols = np.array([i for i in self.stitcher._cidx if self.cfg.joint_names[i] not in ignored],
                                       dtype=int)
        # the last joint_states problem reported (None: the last message was good)
        self._joint_problem: JointProblem | None = None
        self._refused: str | None = None  # the bridge aborted our last goal (set by the sender thread)
        # initial_state bridge: what the bridge executes (config order, our epoch), whether it is the trajectory
        # we published last, and (stamp ns, published at) of that one.
        self._executing: Trajectory | None = None
        self._executing_ours = False
        self._sent: tuple[int, float] | None = None
        self._acked = False  # the bridge has reported the trajectory we published last
        self._ack_delays: collections.deque[float] = collections.deque(maxlen=_ACK_HISTORY)
        if self.node_cfg.state_scale and len(self.node_cfg.state_scale) != len(self.cfg.joint_names):
            raise ConfigError(f"state_scale: {len(self.node_cfg.state_scale)} values for "
                              f"{len(self.cfg.joint_names)} joints")
        self.diag = Diagnostics(self, self.node_cfg.diagnostics_period_s)
        self._reanchor_log = RepeatFilter()  # re-anchoring repeats each chunk while the bridge refuses them
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
        q = sel.position
        v = sel.velocity if len(sel.velocity) else np.zeros(len(sel.position))
        if self.node_cfg.state_scale:  # joint_states units -> the stack's (e.g. gripper metres -> 0..1)
            scale = np.asarray(self.node_cfg.state_scale, dtype=float)
            q, v = (q - np.asarray(self.node_cfg.state_offset, dtype=float)) * scale, v * scale
        self._measured = (self._now_s(), q, v)

    def _on_active_trajectory(self, data: bytes) -> None:
        """The bridge's trajectory in force (what it executes from the stamp on), in stack units."""
        try:
            traj = trajectory_from_cdr(data, self._epoch_ns).reordered(self.cfg.joint_names)
            self.stitcher.check_reported(traj, self._now_s())
        except TrajectoryError as exc:  # never stitched onto: reported
            self.counts["bad_active_trajectories"] += 1
            self.diag.report("bridge", ERROR, f"rejected active_trajectory: {exc}", now=True,
                             rejected=self.counts["bad_active_trajectories"])
            return
        sent = self._sent
        self._executing = traj
        self._executing_ours = sent is not None and abs(self._epoch_ns + s_to_ns(traj.stamp_s) - sent[0]) < 1000
        if sent is not None and self._executing_ours and not self._acked:
            self._ack_delays.append(self._now_s() - sent[1])
            self._reanchor_log.reset()  # followed again: the next refusal is news, said at once
        self._acked = self._acked or self._executing_ours

    def _on_clock_reset(self) -> None:
        """ROS time went back (simulator reset or restart): the active trajectory, the measured state and any
        goal not yet sent belong to the old world; drop them, so the next chunk starts from fresh joint_states
        (a chunk stamped before the reset now lies in the future and is rejected)."""
        self.stitcher.reset()
        self._measured = None
        self._pending = None
        self._refused = None
        self._executing, self._executing_ours, self._sent, self._acked = None, False, None, False
        self._epoch_ns = (self.get_clock().now().nanoseconds // 1_000_000_000) * 1_000_000_000
        self.counts["clock_resets"] += 1
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the active trajectory and the "
                                  "measured state")
        self.diag.report("clock", WARN, "clock jumped back: active trajectory and measured state dropped",
                         now=True, **self.counts)

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
        if self._executing is not None:  # initial_state bridge: where the bridge's reference will be
            q, v, a = self._executing.sample(np.array([now_s + self.cfg.command_latency_s]))
            return q[0], v[0], a[0]
        if self._measured is None or now_s - self._measured[0] > self.node_cfg.joint_state_timeout_s:
            return None
        _, q, v = self._measured
        return q, v, np.zeros_like(q)  # joint_states carry no acceleration

    def _ack_timeout_s(self) -> float:
        """`bridge_ack_timeout_s`, or twice the slowest of the recent reports when a loaded machine makes the
        bridge slower than that (a late report must not be taken for a refusal)."""
        return max(self.node_cfg.bridge_ack_timeout_s, 2.0 * max(self._ack_delays, default=0.0))

    def _follow_bridge(self, now_s: float) -> None:
        """initial_state bridge: stitch onto what the bridge executes. When that is not the trajectory we published
        last and ours was refused (aborted goal) or is not reported within `bridge_ack_timeout_s`, the bridge's
        trajectory in force becomes the one to stitch onto."""
        e = self._executing
        refused, self._refused = self._refused, None
        if self._executing_ours or self.stitcher.active is e:
            return
        sent = self._sent
        if not refused and not self._acked and sent is not None and now_s - sent[1] <= self._ack_timeout_s():
            return  # ours is still on its way to the bridge
        self.stitcher.adopt(e)
        if sent is None or (self._acked and not refused):
            # nothing of ours yet, or ours ran and the bridge has moved on (the watchdog's hold after its end,
            # a cancel's stop): its trajectory in force is the start, nothing refused
            return
        why = (f"the bridge refused the last trajectory ({refused})" if refused else
               f"the bridge did not report our last trajectory within {self._ack_timeout_s():.3f} s "
               f"(bridge_ack_timeout_s, or twice its slowest recent report): refused")
        self._sent = None
        self.counts["reanchored"] += 1
        text = self._reanchor_log(f"stitching onto what the bridge executes: {why}")
        if text is not None:  # a bridge that refuses everything (a protective stop) is said once, then counted
            self.get_logger().warning(text)
        self.diag.report("tracking", WARN, f"stitching onto what the bridge executes: {why}", now=True,
                         **self.counts)

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
            cols = self._reanchor_cols
            q_ref = active.sample(np.array([m[0]]))[0][0]
            gap = float(np.max(np.abs(m[1][cols] - q_ref[cols]), initial=0.0))
            if gap > tol:
                why = f"measured joints are {gap:.3f} from the trajectory being executed (tolerance {tol})"
        if why is None:
            return
        self.stitcher.reset()
        self.counts["reanchored"] += 1
        text = self._reanchor_log(f"re-anchoring to the measured state: {why}")
        if text is not None:
            self.get_logger().warning(text)
        self.diag.report("tracking", WARN, f"re-anchored to the measured state: {why}", now=True, **self.counts)

    def _on_chunk(self, msg: ActionChunk) -> None:
        self.counts["chunks"] += 1
        now_s = self._now_s()
        if self._executing is not None:
            self._follow_bridge(now_s)
        elif self.node_cfg.initial_state == InitialState.JOINT_STATES:
            self._reanchor(now_s)
        try:
            if self._executing is None and self.node_cfg.initial_state == InitialState.BRIDGE:
                # at start-up and after a clock reset the bridge has no state until its first joint state (then
                # it reports its hold) and refuses anything started from joint_states that reached us first
                raise ChunkError("no_state", "waiting for the bridge to report its state on active_trajectory "
                                 "(it has none before its first joint state, at start-up or after a clock reset)")
            stamp_s = (stamp_to_ns(msg.header.stamp) - self._epoch_ns) * 1e-9
            chunk = Chunk.from_flat(stamp_s, msg.joint_names, msg.dt, msg.horizon, msg.positions)
            result = self.stitcher.process(chunk, now_s, self._measured_state(now_s, chunk))
        except ChunkError as exc:
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
        self._sent = (header_stamp_ns(result.trajectory, self._epoch_ns, result.lead_s), now_s)
        self._executing_ours = self._acked = False
        if self._bridge is None:  # the topic only: serialized from the arrays (docs/trajectory.md, Over DDS)
            self.pub.publish(trajectory_to_cdr(result.trajectory, self._epoch_ns, lead_s=result.lead_s))
        else:
            out = trajectory_to_msg(result.trajectory, self._epoch_ns, lead_s=result.lead_s)
            self.pub.publish(out)
            self._send_to_bridge(out)
        self.counts["published"] += 1
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

    def _report_solve(self, level, message: str, values: dict[str, Any]) -> None:
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

    def _on_goal_result(self, future) -> None:
        """A goal the bridge aborted (not because a newer one replaced it) was never executed."""
        res = future.result()
        result = getattr(res, "result", None)
        if result is None or result.error_code == ExecuteTrajectory.Result.SUCCESSFUL:
            return
        if "preempted" in result.error_string:
            return
        self._refused = f"error {result.error_code}: {result.error_string}"
        name = self._bridge.name if self._bridge is not None else "the bridge"
        self.diag.report("bridge", WARN, f"{name} aborted a trajectory: {self._refused}", now=True)

    def close(self) -> None:
        """Stop the sender thread (called at shutdown)."""
        self._stop.set()
        if self._sender.is_alive():
            self._sender.join(timeout=2.0)


main = node_main(StitcherNode)
