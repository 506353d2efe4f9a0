"""Base of the arm bridge nodes (`aloha_bridge`, `franka_bridge`): stack trajectories -> a robot's controllers.

Serves `execute_trajectory` (plan_stack/action/ExecuteTrajectory) and follows streamed trajectories on
`trajectory`. Publishes on `active_trajectory` (latched) every command it sends its controllers (accepted
trajectories, watchdog holds, stops; a hold at the first joint state), in stack units and its joint order: the
trajectory in force from its stamp on, so the stitcher stitches onto what the bridge executes, not onto what it
sent. Wiring only: every decision (validation, re-stamping, the mirrored reference, the watchdog, goal
monitoring, tolerance checks, stops) is `embodiments.arm_bridge.ArmBridge`'s, and the robot's joints, limits,
joint_states units and settings are its `ArmBridgeConfig`'s; this node converts messages, holds the lock around
the library, publishes the commands it returns through the embodiment's `_publish_command` (on the publishers
of its `_create_publishers`) and reports on /diagnostics. Run it on the sim/robot clock (`use_sim_time`).
"""
from __future__ import annotations

import threading
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
    ArmBridgeConfig,
    GoalOutcome,
    WatchdogState,
    follow_goal,
    several_publishers,
)
from plan_stack.joint_states import JointSelectError, JointSelector
from plan_stack.msg import BridgeState
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, STALE, WARN, Diagnostics
from plan_stack.ros.graph import publisher_nodes
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.repeats import RepeatFilter
from plan_stack.ros.time import clock_s, s_to_stamp, stamp_to_s
from plan_stack.ros.trajectory import trajectory_from_cdr, trajectory_from_msg, trajectory_to_cdr
from plan_stack.trajectory.core import Trajectory, TrajectoryError

__all__ = ["ArmBridgeNode"]

#: Wall-clock poll period of a running goal (cancel/preemption latency); feedback is paced
#: separately by the feedback period on the robot clock.
_GOAL_POLL_S = 0.005
#: diagnostics cadence, and how often the joint_states publishers are counted (a graph query)
_DIAGNOSTICS_PERIOD_S = 1.0

_WATCHDOG_LEVEL = {WatchdogState.WAITING: STALE, WatchdogState.FOLLOWING: OK, WatchdogState.HOLDING: WARN}


class ArmBridgeNode(Node):
    #: an executing goal blocks its thread while it monitors the motion; the
    #: stream, joint states and watchdog need threads of their own meanwhile.
    executor_threads = 3

    def __init__(self, node_name: str, config_type: type, **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        # the robot's bridge config: its type is the subclass's
        self.cfg: Any = declare_config(self, config_type)
        cfg: ArmBridgeConfig = self.cfg
        self._lock = threading.Lock()
        self._group = ReentrantCallbackGroup()
        self._create_publishers(cfg)
        self.limits = cfg.limits()
        self.bridge = ArmBridge(cfg.joint_names, self.limits, cfg.settings(), *cfg.goal_checks())
        self.names = self.bridge.names
        self._joints = JointSelector(cfg.state_joint_names)
        self.diagnostics = Diagnostics(self, _DIAGNOSTICS_PERIOD_S)
        self._refusal_log = RepeatFilter()
        self._refusals = 0  # commands refused since start (diagnostics `commands`, value `refused`)
        self._last_refusal: tuple[float, int, str] | None = None  # (its header stamp s, code, message)
        self.create_subscription(JointState, "joint_states", self._on_joint_states, SENSOR_QOS,
                                 callback_group=self._group)
        # raw: the stream is read with numpy (`trajectory_from_cdr`), not as one Python object per point
        self.create_subscription(JointTrajectory, "trajectory", self._on_stream, RELIABLE_QOS,
                                 callback_group=self._group, raw=True)
        self._active_pub = self.create_publisher(JointTrajectory, "active_trajectory", LATCHED_QOS)
        # whether commands are followed now (a protective stop refuses them all) and the last one refused
        self._state_pub = self.create_publisher(BridgeState, "bridge_state", LATCHED_QOS)
        self._publish_state()
        self._server = ActionServer(self, ExecuteTrajectory, "execute_trajectory", self._execute,
                                    goal_callback=lambda goal: GoalResponse.ACCEPT,
                                    cancel_callback=lambda handle: CancelResponse.ACCEPT, callback_group=self._group)
        self.create_timer(self.bridge.settings.watchdog_timeout_s / 4.0, self._watchdog, callback_group=self._group)
        self.create_service(Trigger, "~/reset_protective_stop", self._on_reset_protective_stop,
                            callback_group=self._group)
        self.create_timer(_DIAGNOSTICS_PERIOD_S, self._check_joint_state_publishers, callback_group=self._group)
        on_clock_reset(self, self._on_clock_reset)

    # --- embodiment hooks ---------------------------------------------------------

    def _create_publishers(self, cfg) -> None:
        """Create the robot's command publishers (the config is the embodiment's)."""
        raise NotImplementedError

    def _publish_command(self, traj: Trajectory) -> None:
        """Send a stack trajectory (stack joint order, absolute stamp) to the robot's controllers."""
        raise NotImplementedError

    def _on_first_state(self, q: np.ndarray) -> None:
        """Called once, with the lock held, when the first joint_states message arrives."""

    def _command(self, traj: Trajectory) -> None:
        """Send a command to the controllers and say on `active_trajectory` what is now in force: the curve the
        controllers follow from it (`ArmBridge.in_force`: its points from the reference at its activation on),
        so that a trajectory generator stitches onto the reference the bridge holds. Called with the lock held,
        right after the library returned `traj`."""
        self._publish_command(traj)
        in_force = self.bridge.in_force
        if in_force is None or in_force.stamp_s != traj.stamp_s:  # not the library's last command: as sent
            in_force = traj
        self._active_pub.publish(trajectory_to_cdr(in_force))

    def _publish_state(self) -> None:
        """Say on `bridge_state` (latched) whether commands are followed now and which was refused last. Called
        after every change of either (start, first joint state, protective stop, its reset, clock reset, each
        refusal); takes the lock, so that states go out in the order they arose."""
        with self._lock:
            self._publish_state_locked()

    def _publish_state_locked(self) -> None:
        """`_publish_state` with the lock already held."""
        state, reason = self.bridge.command_state()
        msg = BridgeState(state=int(state), reason=reason, refused=self._refusals)
        msg.header.stamp = self.get_clock().now().to_msg()
        if self._last_refusal is not None:
            stamp_s, code, text = self._last_refusal
            msg.refused_stamp, msg.refused_code, msg.refused_reason = s_to_stamp(stamp_s), int(code), text
        self._state_pub.publish(msg)

    @property
    def ready(self) -> bool:
        """True once a joint state has been received (commands can be validated)."""
        return self.bridge.follower is not None

    def _on_clock_reset(self) -> None:
        """Time went back (simulator reset/restart): the library forgets the reference and the measured state.

        Holding or tracking the pre-reset reference would drive the reset robot back to where the old one
        was; running goals end (preempted), and commands are refused until joint_states arrive again.
        """
        with self._lock:  # reported with the lock held: the first joint state after it reports the recovery
            stopped = self.bridge.protective_stop is not None
            self.bridge.clock_reset()
            self.diagnostics.report("clock", WARN, "clock jumped back: state dropped; waiting for joint_states",
                                    now=True)
        self._publish_state()  # waiting for joint_states again (a protective stop is cleared by the reset)
        if stopped:
            self.diagnostics.report("protective_stop", OK, "cleared by the clock reset", now=True)
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the reference and measured state")

    def _more_than_one_robot(self) -> str:
        topic = self.resolve_topic_name("joint_states")
        return several_publishers(topic, publisher_nodes(self, topic))

    def _check_joint_state_publishers(self) -> None:
        said = self._more_than_one_robot()
        self.diagnostics.report("joint_states_publishers", WARN if said else OK, said or "one publisher or none")

    # --- inputs -----------------------------------------------------------------

    def _now(self) -> float:
        return clock_s(self)

    def _on_joint_states(self, msg: JointState) -> None:
        try:
            raw = self._joints.select(msg.name, msg.position).position
        except JointSelectError as exc:  # never measured, never held to, never tracked against
            self.diagnostics.report("joint_states", ERROR, f"rejected: {exc}", now=True, reason=exc.reason.value)
            return
        q = self.cfg.joint_to_stack(raw)
        problem = self.bridge.implausible_state(q)
        if problem is not None:  # a sensor or message fault: never measured, held to or tracked against
            self.diagnostics.report("joint_states", ERROR, f"rejected: joint_states {problem}", now=True,
                                    reason="implausible")
            return
        stamp_s = stamp_to_s(msg.header.stamp)
        stop = None
        with self._lock:
            backward = self.bridge.stamped_before_measurement(stamp_s)
            first_backward = backward and self.bridge.backward_states == 1
        if backward:  # a reset world whose clock jump has not reached this node yet: the reset follows
            if first_backward:
                self.diagnostics.report("clock", WARN, "joint_states stamped before the measurement in force (a "
                                        "simulator reset not yet on /clock?): not measured", now=True)
            return
        with self._lock:
            if self.bridge.on_joint_state(q, stamp_s):
                if self.diagnostics.level("clock") == WARN:  # the state is rebuilt after a clock reset
                    self.diagnostics.report("clock", OK, "joint states received after the clock reset", now=True)
                self._on_first_state(q)
                held = self.bridge.hold(self._now())
                assert held is not None  # the bridge has its first state now
                self._publish_state_locked()  # ready: commands are followed from the hold, reported next
                self._active_pub.publish(trajectory_to_cdr(held))
                first = True
            else:
                first = False
                stop = self.bridge.check_collision(self._now())
                if stop is not None:
                    self._command(stop.command)
                    self._publish_state_locked()  # every command refused from now on: a generator pauses
        if first:
            return
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
            self._publish_state()
            self._refusal_log.reset()
            self.get_logger().warning(f"protective stop reset ({stop.reason})")
            self.diagnostics.report("protective_stop", OK, "reset: commands accepted again", now=True)
        return response

    def _on_stream(self, data: bytes) -> None:
        acc, stamp_s = self._accept(data)
        if not acc.verdict.ok:
            self._report_refusal("streamed trajectory", acc.verdict, stamp_s)

    def _report_refusal(self, what: str, verdict, stamp_s: float) -> None:
        """Log, count and report a refused command (`stamp_s`: its header stamp as received, 0 when it did not
        convert); `bridge_state` names it, so that its sender learns at once which of its commands was refused."""
        text = self._refusal_log(f"rejected {what} ({verdict.error_code}): {verdict.message}")
        if text is not None:  # repeats of one reason (a protective stop refuses every command) are counted
            self.get_logger().warning(text)
        with self._lock:
            self._refusals += 1
            refused = self._refusals
            self._last_refusal = (stamp_s, int(verdict.error_code), verdict.message)
        self._publish_state()
        self.diagnostics.report("commands", ERROR, f"rejected: {verdict.message}", now=True,
                                error_code=verdict.error_code, refused=refused)

    # --- commanding ---------------------------------------------------------------

    def _accept(self, msg: JointTrajectory | bytes) -> tuple[Acceptance, float]:
        """Validate and, if valid, send a command (`msg`: an action goal's message, or a streamed one serialized);
        (the verdict, the command's header stamp as received: 0 when it does not convert)."""
        try:
            traj = trajectory_from_cdr(msg) if isinstance(msg, bytes) else trajectory_from_msg(msg)
        except TrajectoryError as exc:
            return ArmBridge.malformed(exc), 0.0
        with self._lock:
            acc = self.bridge.accept(traj, self._now())
            if acc.command is not None:
                self._command(acc.command)
        if acc.verdict.ok and acc.verdict.message:  # accepted late, joined over late_join_s: said, not silent
            self.diagnostics.report("commands", WARN, f"accepted: {acc.verdict.message}", now=True)
        elif acc.verdict.ok and self.diagnostics.level("commands") not in (None, OK):  # followed again
            self.diagnostics.report("commands", OK, "commands accepted", now=True, refused=self._refusals)
        return acc, traj.stamp_s

    def _watchdog(self) -> None:
        with self._lock:
            decision = self.bridge.watchdog(self._now())
            if decision.command is not None:
                self._command(decision.command)
        if decision.state is WatchdogState.HOLDING:
            held = decision.held_positions if decision.held_positions is not None else np.zeros(0)
            self.diagnostics.report("watchdog", WARN, decision.state.value, now=decision.command is not None,
                                    idle_s=f"{decision.idle_s:.3f}", held_positions=np.round(held, 4).tolist())
        elif decision.state is not WatchdogState.IDLE:
            self.diagnostics.report("watchdog", _WATCHDOG_LEVEL[decision.state], decision.state.value)

    # --- action -----------------------------------------------------------------

    def _execute(self, goal_handle) -> ExecuteTrajectory.Result:
        acc, stamp_s = self._accept(goal_handle.request.trajectory)
        if not acc.verdict.ok:
            self._report_refusal("goal", acc.verdict, stamp_s)
            goal_handle.abort()
            return ExecuteTrajectory.Result(error_code=acc.verdict.error_code, error_string=acc.verdict.message)
        with self._lock:
            monitor = self.bridge.monitor(acc, self._now())
        step = follow_goal(monitor, self._now, lambda: goal_handle.is_cancel_requested, self._lock, self._command,
                           lambda t, e: goal_handle.publish_feedback(ExecuteTrajectory.Feedback(
                               time_from_start=t, max_tracking_error=e)), _GOAL_POLL_S)
        ending = {GoalOutcome.SUCCEEDED: goal_handle.succeed, GoalOutcome.CANCELED: goal_handle.canceled}
        ending.get(step.outcome, goal_handle.abort)()  # a preemption, a tolerance missed, a protective stop: abort
        return ExecuteTrajectory.Result(error_code=step.error_code, error_string=step.message)

    def close(self) -> None:
        self._server.destroy()
