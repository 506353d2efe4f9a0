"""Base of the arm bridges (`aloha_bridge`, `franka_bridge`): the stack's joint trajectories -> a robot's controllers.

Serves `execute_trajectory` (plan_stack/action/ExecuteTrajectory) and follows
streamed trajectories on `trajectory`. Every command is validated
(`embodiments.validation`: names, timing, finiteness, URDF + config limits on
the curve the controllers will actually follow) and either rejected with an
error code and message (nothing is sent) or reordered to the stack's joint
order and handed to the embodiment's `_publish_command`, with the resolved
header stamp.

The bridge keeps its own copy of the controllers' reference (same
interpolation), so it can report tracking error against `joint_states`, stop
on cancel by decelerating from the reference within the acceleration limits,
and run the watchdog: once no trajectory covers the present for
`watchdog_timeout`, it commands an explicit hold of the last reference
position and reports it on /diagnostics. Must run on the sim/robot clock
(`use_sim_time: true` with the simulator).

An embodiment supplies its config type and implements `_configure` (stack
joint names, limits, command publishers), `_joint_to_stack` (joint_states
units -> stack units), `_publish_command` and, where it differs from
"decelerate from the present reference", `_stop_start`. The config must have
`watchdog_timeout`, `jump_tolerance`, `goal_time_tolerance`,
`feedback_period`, `stop_deceleration_scale`, `goal_tolerance` and `max_start_delay`.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import time

import numpy as np
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from plan_stack.action import ExecuteTrajectory
from plan_stack.embodiments.joint_trajectory import Reference, Trajectory, TrajectoryError, TrajectoryFollower
from plan_stack.embodiments.trajectory_convert import trajectory_from_msg
from plan_stack.embodiments.validation import (
    GOAL_TOLERANCE_VIOLATED,
    INVALID_GOAL,
    SUCCESSFUL,
    JointLimits,
    Verdict,
    check_trajectory,
    stop_trajectory,
)
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, STALE, WARN, Diagnostics
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.time import clock_s, stamp_to_s

__all__ = ["ArmBridgeNode"]

#: Wall-clock poll period of a running goal (cancel/preemption latency); feedback is paced
#: separately by `feedback_period` on the robot clock.
_GOAL_POLL_S = 0.005
#: Reference samples kept to compare each joint_states message with the reference at its stamp.
_HISTORY_LEN = 200


class ArmBridgeNode(Node):
    #: joint_states joints the bridge needs, in the order `_joint_to_stack` takes them (set by `_configure`).
    state_joint_names: tuple[str, ...]
    #: True: tracking error compares a measurement with the reference at the measurement's stamp;
    #: False: with the reference now.
    track_at_measurement_stamp = True
    #: an executing goal blocks its thread while it monitors the motion; the
    #: stream, joint states and watchdog need threads of their own meanwhile.
    executor_threads = 3

    def __init__(self, node_name: str, config_type: type, **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self.cfg = cfg = declare_config(self, config_type)
        self._lock = threading.Lock()
        self._group = ReentrantCallbackGroup()
        self.names, self.limits = self._configure(cfg)
        #: which channels count for tracking error, and each channel's goal tolerance (inf: not checked).
        self._tracked, self._goal_tolerance = self._goal_checks(cfg)
        self._follower: TrajectoryFollower | None = None  # created from the first joint_states
        self._measured: np.ndarray | None = None  # stack units
        self._measured_s = 0.0  # joint_states stamp (s)
        self._seq = 0  # bumps on every accepted command; a running goal seeing another value was preempted
        self._hold_sent = False
        self._idle_since_s: float | None = None
        self.diagnostics = Diagnostics(self, 1.0)
        self.create_subscription(JointState, "joint_states", self._on_joint_states, SENSOR_QOS,
                                 callback_group=self._group)
        self.create_subscription(JointTrajectory, "trajectory", self._on_stream, RELIABLE_QOS,
                                 callback_group=self._group)
        self._server = ActionServer(
            self, ExecuteTrajectory, "execute_trajectory", self._execute,
            goal_callback=lambda goal: GoalResponse.ACCEPT,
            cancel_callback=lambda handle: CancelResponse.ACCEPT,
            callback_group=self._group,
        )
        self.create_timer(cfg.watchdog_timeout / 4.0, self._watchdog, callback_group=self._group)
        on_clock_reset(self, self._on_clock_reset)

    # --- embodiment hooks ---------------------------------------------------------

    def _configure(self, cfg) -> tuple[tuple[str, ...], JointLimits]:
        """Create the command publishers, set `state_joint_names`; return (stack joint names, limits)."""
        raise NotImplementedError

    def _goal_checks(self, cfg) -> tuple[np.ndarray, np.ndarray]:
        """(tracked mask, per-channel goal tolerance) over the stack channels."""
        raise NotImplementedError

    def _joint_to_stack(self, q: np.ndarray) -> np.ndarray:
        """joint_states positions (in `state_joint_names` order) -> stack vector."""
        raise NotImplementedError

    def _publish_command(self, traj: Trajectory) -> None:
        """Send a stack trajectory (stack joint order, absolute stamp) to the robot's controllers."""
        raise NotImplementedError

    def _on_first_state(self, q: np.ndarray) -> None:
        """Called once, with the lock held, when the first joint_states message arrives."""

    def _stop_start(self, now: float) -> tuple[Reference, float]:
        """(reference to stop from, stamp of the stop trajectory); lock held."""
        return self._follower.sample(now), now

    def _on_clock_reset(self) -> None:
        """Time went back (simulator reset/restart): forget the reference and the measured state.

        Holding or tracking the pre-reset reference would drive the reset robot back to where the old one
        was; running goals end (preempted), and commands are refused until joint_states arrive again.
        """
        with self._lock:
            self._follower = None
            self._measured = None
            self._seq += 1
            self._hold_sent = False
            self._idle_since_s = None
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the reference and measured state")
        self.diagnostics.report("clock", WARN, "clock jumped back: state dropped; waiting for "
                                "joint_states", now=True)

    # --- inputs -----------------------------------------------------------------

    def _now(self) -> float:
        return clock_s(self)

    def _on_joint_states(self, msg: JointState) -> None:
        index = {n: i for i, n in enumerate(msg.name)}
        needed = self.state_joint_names
        problem = None
        if any(n not in index for n in needed) or len(msg.position) != len(msg.name):
            problem = f"joint_states lacks some of {list(needed)}"
        elif len(index) != len(msg.name):
            problem = "joint_states names a joint twice"
        else:
            raw = np.array([msg.position[index[n]] for n in needed], dtype=np.float64)
            if not np.all(np.isfinite(raw)):
                problem = "joint_states has NaN/inf positions"
        q = None if problem is not None else self._joint_to_stack(raw)
        if q is not None:
            # Beyond a position limit by more than the joint's whole range: a sensor or message fault.
            lo, hi = self.limits.lower, self.limits.upper
            span = np.where(np.isfinite(hi - lo), hi - lo, np.inf)
            out = np.flatnonzero((q < lo - span) | (q > hi + span))
            if len(out):
                problem = (f"joint_states position of {self.names[out[0]]} ({q[out[0]]:.6g}) lies beyond its "
                           f"limits [{lo[out[0]]:.4g}, {hi[out[0]]:.4g}] by more than their range")
        if problem is not None:  # never measured, never held to, never tracked against
            self.diagnostics.report("joint_states", ERROR, f"rejected: {problem}", now=True)
            return
        with self._lock:
            self._measured = q
            self._measured_s = stamp_to_s(msg.header.stamp)
            if self._follower is None:
                self._follower = TrajectoryFollower(self.names, q)
                self._on_first_state(q)

    def _on_stream(self, msg: JointTrajectory) -> None:
        verdict = self._accept(msg)[0]
        if not verdict.ok:
            self.get_logger().warning(f"rejected streamed trajectory ({verdict.error_code}): {verdict.message}")
            self.diagnostics.report("commands", ERROR, f"rejected: {verdict.message}", now=True,
                                    error_code=verdict.error_code)

    # --- commanding ---------------------------------------------------------------

    def _accept(self, msg: JointTrajectory) -> tuple[Verdict, int, float]:
        """Validate and, if valid, send a stack trajectory. Returns (verdict, seq, end time)."""
        try:
            traj = trajectory_from_msg(msg)
        except TrajectoryError as exc:
            return Verdict(False, INVALID_GOAL, str(exc)), -1, 0.0
        with self._lock:
            now = self._now()
            if self._follower is None:
                return Verdict(False, INVALID_GOAL, "no joint_states received yet: the robot state is unknown"), -1, 0.0
            initial = self._follower.sample(now)
            ahead = traj.start_s(now) + float(traj.times_s[0]) - now if len(traj.times_s) else 0.0
            if ahead > self.cfg.max_start_delay:
                return Verdict(False, INVALID_GOAL,
                               f"header.stamp: the first point is due in {ahead:.3f} s, more than max_start_delay "
                               f"{self.cfg.max_start_delay} s ahead (a wrong clock or stamp?)"), -1, 0.0
            verdict = check_trajectory(traj, self.names, self.limits, now, initial,
                                       jump_tolerance=self.cfg.jump_tolerance)
            if not verdict.ok:
                return verdict, -1, 0.0
            order = [traj.joint_names.index(n) for n in self.names]
            traj = dataclasses.replace(
                traj, joint_names=self.names, stamp_s=traj.start_s(now), positions=traj.positions[:, order],
                velocities=None if traj.velocities is None else traj.velocities[:, order],
                accelerations=None if traj.accelerations is None else traj.accelerations[:, order])
            self._send(traj, now)
            return verdict, self._seq, traj.stamp_s + float(traj.times_s[-1])

    def _send(self, traj: Trajectory, now: float) -> None:
        """Publish to the controllers and mirror in our reference (lock held)."""
        if traj.stamp_s == 0.0:
            traj = dataclasses.replace(traj, stamp_s=now)
        self._follower.set_trajectory(traj, now)
        self._publish_command(traj)
        self._seq += 1
        self._hold_sent = False
        self._idle_since_s = None

    def _stop(self) -> None:
        """Decelerate to rest within the acceleration limits (from `_stop_start`)."""
        with self._lock:
            if self._follower is None:  # state dropped (clock reset): nothing is being commanded
                return
            now = self._now()
            ref, t0 = self._stop_start(now)
            stop = stop_trajectory(ref, self.limits, self.cfg.stop_deceleration_scale)
            self._send(dataclasses.replace(stop, stamp_s=t0), now)

    def _watchdog(self) -> None:
        with self._lock:
            now = self._now()
            if self._follower is None:
                self.diagnostics.report("watchdog", STALE, "waiting for joint_states")
                return
            ref = self._follower.sample(now)
            if not self._follower.holding:
                self.diagnostics.report("watchdog", OK, "following a trajectory")
                return
            if self._idle_since_s is None:
                self._idle_since_s = now
            idle = now - self._idle_since_s
            if idle < self.cfg.watchdog_timeout:
                return
            sent_now = not self._hold_sent
            if sent_now:  # not _send: a hold must not preempt a goal still settling into its tolerance
                hold = Trajectory(self.names, now, np.array([0.0]), ref.positions[None, :])
                self._follower.set_trajectory(hold, now)
                self._publish_command(hold)
                self._hold_sent = True
        self.diagnostics.report(
            "watchdog", WARN, "no trajectory covers the present: holding the last commanded position",
            now=sent_now, idle_s=f"{idle:.3f}", held_positions=np.round(ref.positions, 4).tolist())

    # --- action -----------------------------------------------------------------

    def _execute(self, goal_handle) -> ExecuteTrajectory.Result:
        verdict, seq, end_s = self._accept(goal_handle.request.trajectory)
        if not verdict.ok:
            self.get_logger().warning(f"rejected goal ({verdict.error_code}): {verdict.message}")
            self.diagnostics.report("commands", ERROR, f"rejected: {verdict.message}", now=True,
                                    error_code=verdict.error_code)
            goal_handle.abort()
            return ExecuteTrajectory.Result(error_code=verdict.error_code, error_string=verdict.message)
        start_s = self._now()
        with self._lock:
            target = self._follower.final_positions if self._seq == seq else None
        if target is None:
            goal_handle.abort()
            return ExecuteTrajectory.Result(error_code=INVALID_GOAL, error_string="preempted by a newer trajectory")
        tracked, tolerance = self._tracked, self._goal_tolerance
        max_err = 0.0
        last_fb = -np.inf
        history: collections.deque = collections.deque(maxlen=_HISTORY_LEN)  # (time, reference)
        while True:
            time.sleep(_GOAL_POLL_S)
            with self._lock:
                now = self._now()
                if self._seq != seq:
                    goal_handle.abort()
                    return ExecuteTrajectory.Result(error_code=INVALID_GOAL,
                                                    error_string="preempted by a newer trajectory")
                history.append((now, self._follower.sample(now).positions))
                measured, measured_s = self._measured, self._measured_s
            if goal_handle.is_cancel_requested:
                self._stop()
                goal_handle.canceled()
                return ExecuteTrajectory.Result(error_code=SUCCESSFUL, error_string="canceled: stopping within limits")
            if self.track_at_measurement_stamp:
                # Compare the measurement with the reference at the measurement's own stamp, not with "now".
                ref = min(history, key=lambda h: abs(h[0] - measured_s))[1]
            else:
                ref = history[-1][1]
            err = float(np.max(np.abs(ref - measured)[tracked]))
            max_err = max(max_err, err)
            if now - last_fb >= self.cfg.feedback_period:
                goal_handle.publish_feedback(ExecuteTrajectory.Feedback(
                    time_from_start=max(now - start_s, 0.0), max_tracking_error=max_err))
                last_fb = now
            if now >= end_s:
                final = np.abs(target - measured)
                if np.all(final <= tolerance):
                    goal_handle.succeed()
                    return ExecuteTrajectory.Result(error_code=SUCCESSFUL, error_string="")
                if now >= end_s + self.cfg.goal_time_tolerance:
                    j = int(np.argmax(final - tolerance))
                    goal_handle.abort()
                    return ExecuteTrajectory.Result(
                        error_code=GOAL_TOLERANCE_VIOLATED,
                        error_string=f"{self.names[j]} is {final[j]:.4g} from its goal after goal_time_tolerance")

    def close(self) -> None:
        self._server.destroy()
