"""Base of the arm bridge nodes (`aloha_bridge`, `franka_bridge`): the stack's joint trajectories -> a robot's controllers.

Serves `execute_trajectory` (plan_stack/action/ExecuteTrajectory) and follows
streamed trajectories on `trajectory`. Publishes on `active_trajectory`
(latched) every command it sends its controllers (accepted trajectories,
watchdog holds, stops; a hold at the first joint state), in stack units and
its joint order: the trajectory in force from its stamp on, so the stitcher
stitches onto what the bridge executes, not onto what it sent. Wiring only: every decision (validation,
re-stamping, the mirrored reference, the watchdog, goal monitoring, tolerance
checks, stops) is `embodiments.arm_bridge.ArmBridge`'s; this node converts
messages, holds the lock around the library, publishes the commands it returns
through the embodiment's `_publish_command` and reports on /diagnostics. Must
run on the sim/robot clock (`use_sim_time: true` with the simulator).

An embodiment supplies its config type and implements `_configure` (stack
joint names, limits, command publishers, `state_joint_names`), `_goal_checks`,
`_joint_to_stack` (joint_states units -> stack units), `_publish_command` and,
where it differs, `_settings` (the `ArmBridgeSettings` from its config).
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from plan_stack.action import ExecuteTrajectory
from plan_stack.embodiments.arm_bridge import (
    Acceptance,
    ArmBridge,
    ArmBridgeSettings,
    GoalOutcome,
    GoalStep,
    WatchdogState,
)
from plan_stack.joint_states import JointSelectError, JointSelector
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, STALE, WARN, Diagnostics
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.repeats import RepeatFilter
from plan_stack.ros.time import clock_s, stamp_to_s
from plan_stack.ros.trajectory import trajectory_from_cdr, trajectory_from_msg, trajectory_to_cdr
from plan_stack.trajectory.core import Trajectory, TrajectoryError
from plan_stack.trajectory.limits import Limits

__all__ = ["ArmBridgeNode"]

#: Wall-clock poll period of a running goal (cancel/preemption latency); feedback is paced
#: separately by the feedback period on the robot clock.
_GOAL_POLL_S = 0.005
#: diagnostics cadence, and how often the joint_states publishers are counted (a graph query)
_DIAGNOSTICS_PERIOD_S = 1.0

_WATCHDOG_LEVEL = {WatchdogState.WAITING: STALE, WatchdogState.FOLLOWING: OK,
                   WatchdogState.HOLDING: WARN}


class ArmBridgeNode(Node):
    #: joint_states joints the bridge needs, in the order `_joint_to_stack` takes them (set by `_configure`).
    state_joint_names: tuple[str, ...]
    #: an executing goal blocks its thread while it monitors the motion; the
    #: stream, joint states and watchdog need threads of their own meanwhile.
    executor_threads = 3

    def __init__(self, node_name: str, config_type: type, **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        # the robot's bridge config: its type is the subclass's
        self.cfg: Any = declare_config(self, config_type)
        cfg: Any = self.cfg
        self._lock = threading.Lock()
        self._group = ReentrantCallbackGroup()
        names, limits = self._configure(cfg)
        tracked, tolerance = self._goal_checks(cfg)
        self.bridge = ArmBridge(names, limits, self._settings(cfg), tracked, tolerance)
        self.names, self.limits = self.bridge.names, limits
        self._joints = JointSelector(self.state_joint_names)
        self.diagnostics = Diagnostics(self, _DIAGNOSTICS_PERIOD_S)
        self._refusal_log = RepeatFilter()
        self._refusals = 0  # commands refused since start (diagnostics `commands`, value `refused`)
        self.create_subscription(JointState, "joint_states", self._on_joint_states, SENSOR_QOS,
                                 callback_group=self._group)
        # raw: the stream is read with numpy (`trajectory_from_cdr`), not as one Python object per point
        self.create_subscription(JointTrajectory, "trajectory", self._on_stream, RELIABLE_QOS,
                                 callback_group=self._group, raw=True)
        self._active_pub = self.create_publisher(JointTrajectory, "active_trajectory", LATCHED_QOS)
        self._server = ActionServer(
            self, ExecuteTrajectory, "execute_trajectory", self._execute,
            goal_callback=lambda goal: GoalResponse.ACCEPT,
            cancel_callback=lambda handle: CancelResponse.ACCEPT,
            callback_group=self._group,
        )
        self.create_timer(self.bridge.settings.watchdog_timeout_s / 4.0, self._watchdog, callback_group=self._group)
        self.create_service(Trigger, "~/reset_protective_stop", self._on_reset_protective_stop,
                            callback_group=self._group)
        self.create_timer(_DIAGNOSTICS_PERIOD_S, self._check_joint_state_publishers, callback_group=self._group)
        on_clock_reset(self, self._on_clock_reset)

    # --- embodiment hooks ---------------------------------------------------------

    def _configure(self, cfg) -> tuple[tuple[str, ...], Limits]:
        """Create the command publishers, set `state_joint_names`; return (stack joint names, limits)."""
        raise NotImplementedError

    def _goal_checks(self, cfg) -> tuple[np.ndarray, np.ndarray]:
        """(tracked mask, per-channel goal tolerance) over the stack channels."""
        raise NotImplementedError

    def _settings(self, cfg) -> ArmBridgeSettings:
        """The shared bridge behaviour from the node config."""
        collision = None
        if cfg.collision_tracking_error:  # 0 for a joint: not checked
            collision = np.asarray(cfg.collision_tracking_error, dtype=float)
            collision = np.where(collision > 0.0, collision, np.inf)
        return ArmBridgeSettings(
            watchdog_timeout_s=cfg.watchdog_timeout, jump_tolerance=cfg.jump_tolerance,
            goal_time_tolerance_s=cfg.goal_time_tolerance_s, feedback_period_s=cfg.feedback_period_s,
            stop_deceleration_scale=cfg.stop_deceleration_scale, max_start_delay_s=cfg.max_start_delay_s,
            late_join_s=cfg.late_join_s, collision_tracking_error=collision)

    def _joint_to_stack(self, q: np.ndarray) -> np.ndarray:
        """joint_states positions (in `state_joint_names` order) -> stack vector."""
        raise NotImplementedError

    def _publish_command(self, traj: Trajectory) -> None:
        """Send a stack trajectory (stack joint order, absolute stamp) to the robot's controllers."""
        raise NotImplementedError

    def _on_first_state(self, q: np.ndarray) -> None:
        """Called once, with the lock held, when the first joint_states message arrives."""

    def _command(self, traj: Trajectory) -> None:
        """Send a command to the controllers and say on `active_trajectory` that it is now in force."""
        self._publish_command(traj)
        self._active_pub.publish(trajectory_to_cdr(traj))

    # Read-only views of the library's state, kept for callers (tests, scripts) written before `ArmBridge`.
    _follower = property(lambda self: self.bridge.follower)
    _measured = property(lambda self: self.bridge.measured)
    _measured_s = property(lambda self: self.bridge.measured_s)
    _seq = property(lambda self: self.bridge.seq)
    _hold_sent = property(lambda self: self.bridge.hold_sent)

    @property
    def ready(self) -> bool:
        """True once a joint state has been received (commands can be validated)."""
        return self.bridge.follower is not None

    def _on_clock_reset(self) -> None:
        """Time went back (simulator reset/restart): the library forgets the reference and the measured state.

        Holding or tracking the pre-reset reference would drive the reset robot back to where the old one
        was; running goals end (preempted), and commands are refused until joint_states arrive again.
        """
        with self._lock:
            stopped = self.bridge.protective_stop is not None
            self.bridge.clock_reset()
        if stopped:
            self.diagnostics.report("protective_stop", OK, "cleared by the clock reset", now=True)
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the reference and measured state")
        self.diagnostics.report("clock", WARN, "clock jumped back: state dropped; waiting for "
                                "joint_states", now=True)

    def _joint_state_publishers(self) -> tuple[str, list[str]]:
        """The resolved joint_states topic and the nodes publishing it."""
        topic = self.resolve_topic_name("joint_states")
        nodes = [f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in self.get_publishers_info_by_topic(topic)]
        return topic, sorted(nodes)

    def _more_than_one_robot(self) -> str:
        """Why the measurement may jump, when more than one node publishes joint_states (else empty): two
        robots or simulators on one ROS domain each send their own joint states, and the tracking check
        reads the jumps between them as a collision."""
        topic, nodes = self._joint_state_publishers()
        if len(nodes) < 2:
            return ""
        return f"{len(nodes)} publishers on {topic} ({', '.join(nodes)}): two robots or simulators on one ROS domain?"

    def _check_joint_state_publishers(self) -> None:
        said = self._more_than_one_robot()
        if said:
            self.diagnostics.report("joint_states_publishers", WARN, said)
        else:
            self.diagnostics.report("joint_states_publishers", OK, "one publisher or none")

    # --- inputs -----------------------------------------------------------------

    def _now(self) -> float:
        return clock_s(self)

    def _on_joint_states(self, msg: JointState) -> None:
        try:
            raw = self._joints.select(msg.name, msg.position).position
        except JointSelectError as exc:  # never measured, never held to, never tracked against
            self.diagnostics.report("joint_states", ERROR, f"rejected: {exc}", now=True,
                                    reason=exc.reason.value)
            return
        q = self._joint_to_stack(raw)
        problem = self.bridge.implausible_state(q)
        if problem is not None:  # a sensor or message fault: never measured, held to or tracked against
            self.diagnostics.report("joint_states", ERROR, f"rejected: joint_states {problem}", now=True,
                                    reason="implausible")
            return
        with self._lock:
            if self.bridge.on_joint_state(q, stamp_to_s(msg.header.stamp)):
                self._on_first_state(q)
                held = self.bridge.hold(self._now())
                assert held is not None  # the bridge has its first state now
                self._active_pub.publish(trajectory_to_cdr(held))
                return
            stop = self.bridge.check_collision(self._now())
            if stop is not None:
                self._command(stop.command)
        if stop is not None:
            self._refusal_log.reset()
            service = f"{self.get_fully_qualified_name()}/reset_protective_stop"
            also = self._more_than_one_robot()
            also = f" [{also}]" if also else ""
            self.get_logger().error(f"protective stop: {stop.reason}{also}; arms held where measured, commands "
                                    f"refused until {service} is called (ros2 service call {service} "
                                    f"std_srvs/srv/Trigger)")
            self.diagnostics.report("protective_stop", ERROR, f"protective stop: {stop.reason}{also}", now=True,
                                    joint=stop.joint, tracking_error=f"{stop.error:.4f}",
                                    threshold=f"{stop.threshold:.4g}")

    def _on_reset_protective_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """An operator saw to what the arms hit: accept commands again, from the hold in force."""
        with self._lock:
            stop = self.bridge.reset_protective_stop()
        response.success = stop is not None
        response.message = f"cleared: {stop.reason}" if stop is not None else "no protective stop to clear"
        if stop is not None:
            self._refusal_log.reset()
            self.get_logger().warning(f"protective stop reset ({stop.reason})")
            self.diagnostics.report("protective_stop", OK, "reset: commands accepted again", now=True)
        return response

    def _on_stream(self, data: bytes) -> None:
        verdict = self._accept(data).verdict
        if not verdict.ok:
            self._report_refusal("streamed trajectory", verdict)

    def _report_refusal(self, what: str, verdict) -> None:
        text = self._refusal_log(f"rejected {what} ({verdict.error_code}): {verdict.message}")
        if text is not None:  # repeats of one reason (a protective stop refuses every command) are counted
            self.get_logger().warning(text)
        with self._lock:
            self._refusals += 1
            refused = self._refusals
        self.diagnostics.report("commands", ERROR, f"rejected: {verdict.message}", now=True,
                                error_code=verdict.error_code, refused=refused)

    # --- commanding ---------------------------------------------------------------

    def _accept(self, msg: JointTrajectory | bytes) -> Acceptance:
        """Validate and, if valid, send a command (`msg`: an action goal's message, or a streamed one serialized)."""
        try:
            traj = trajectory_from_cdr(msg) if isinstance(msg, bytes) else trajectory_from_msg(msg)
        except TrajectoryError as exc:
            return ArmBridge.malformed(exc)
        with self._lock:
            acc = self.bridge.accept(traj, self._now())
            if acc.command is not None:
                self._command(acc.command)
        if acc.verdict.ok and acc.verdict.message:  # accepted late, joined over late_join_s: said, not silent
            self.diagnostics.report("commands", WARN, f"accepted: {acc.verdict.message}", now=True)
        return acc

    def _watchdog(self) -> None:
        with self._lock:
            decision = self.bridge.watchdog(self._now())
            if decision.command is not None:
                self._command(decision.command)
        if decision.state is WatchdogState.IDLE:
            return
        if decision.state is WatchdogState.HOLDING:
            held = decision.held_positions if decision.held_positions is not None else np.zeros(0)
            self.diagnostics.report("watchdog", WARN, decision.state.value,
                                    now=decision.command is not None, idle_s=f"{decision.idle_s:.3f}",
                                    held_positions=np.round(held, 4).tolist())
        else:
            self.diagnostics.report("watchdog", _WATCHDOG_LEVEL[decision.state], decision.state.value)

    # --- action -----------------------------------------------------------------

    def _execute(self, goal_handle) -> ExecuteTrajectory.Result:
        acc = self._accept(goal_handle.request.trajectory)
        if not acc.verdict.ok:
            self._report_refusal("goal", acc.verdict)
            goal_handle.abort()
            return ExecuteTrajectory.Result(error_code=acc.verdict.error_code, error_string=acc.verdict.message)
        with self._lock:
            monitor = self.bridge.monitor(acc, self._now())
        while not isinstance(monitor, GoalStep):
            time.sleep(_GOAL_POLL_S)
            cancel = goal_handle.is_cancel_requested
            with self._lock:
                step = monitor.step(self._now(), cancel)
                if step.command is not None:
                    self._command(step.command)
            if step.feedback is not None and step.outcome is not GoalOutcome.CANCELED:
                goal_handle.publish_feedback(ExecuteTrajectory.Feedback(
                    time_from_start=step.feedback[0], max_tracking_error=step.feedback[1]))
            if step.outcome is not GoalOutcome.RUNNING:
                monitor = step
        step = monitor
        if step.outcome is GoalOutcome.SUCCEEDED:
            goal_handle.succeed()
        elif step.outcome is GoalOutcome.CANCELED:
            goal_handle.canceled()
        else:
            goal_handle.abort()
        return ExecuteTrajectory.Result(error_code=step.error_code, error_string=step.message)

    def close(self) -> None:
        self._server.destroy()
