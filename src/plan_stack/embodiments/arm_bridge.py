"""Arm bridge logic without ROS: what to command, what to report, when a goal ends.

`ArmBridge` is everything the arm bridge nodes (`aloha_bridge`,
`franka_bridge`) decide, as plain calls that return decisions; the nodes
convert messages, hold the lock, publish the commands and report.

* Commands (`accept`): a trajectory is validated (`trajectory.checks`:
  names, timing, finiteness, URDF + config limits on the curve the
  controllers will actually follow, starting from the present reference),
  refused with an error code and message, or re-stamped (a zero stamp
  becomes "now"), reordered to the bridge's joint order and returned as
  the command to send; the bridge mirrors it in its own reference
  (`TrajectoryFollower`, the controllers' interpolation).
* Watchdog (`watchdog`): once no trajectory covers the present for
  `watchdog_timeout_s`, one explicit hold of the last reference position.
* Goals (`GoalMonitor`): tracking error against the measured joints,
  feedback pacing, preemption by a newer command, cancel (a stop within
  the acceleration limits), goal and goal-time tolerances.
* Protective stop (`check_collision`): a joint measured further from the
  reference than its `collision_tracking_error` is taken for a collision:
  the arms are held where they are measured (the servos stop pushing into
  what they hit; grippers keep their reference, so a held object stays
  held) and every command is refused until `reset_protective_stop`.
* Clock reset (`clock_reset`): the reference and the measured state are
  forgotten (a protective stop too); commands are refused until joint states
  arrive again. A joint state stamped before the measurement in force
  (`stamped_before_measurement`: a simulator reset whose clock jump has not
  reached the node yet) is not measured: compared with the old world's
  reference it would look like a collision.
* Goal polling (`follow_goal`): a running goal stepped every few ms of wall
  time until it ends, under the node's lock.
* Configuration (`ArmBridgeConfig`): the parameters both arm bridges share,
  extended by each robot's config, which also gives its limits, how its
  joint_states read in stack units, and the settings and goal checks
  `ArmBridge` takes.
* What it executes: every command returned here (accepted trajectory,
  watchdog hold, stop) is the trajectory in force from its stamp on; before
  the first one, `hold` (the reference where the first joint state put it).
  The node publishes each on `active_trajectory`, so a trajectory generator
  can stitch onto what the bridge executes rather than onto what it sent.

Not thread-safe: the node calls `ArmBridge` and its monitors with its lock held.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from plan_stack.config import ConfigError, info_of, param, validate
from plan_stack.trajectory.checks import (
    GOAL_TOLERANCE_VIOLATED,
    INVALID_GOAL,
    PATH_TOLERANCE_VIOLATED,
    SUCCESSFUL,
    Verdict,
    check_trajectory,
    stop_trajectory,
)
from plan_stack.trajectory.core import Reference, Trajectory, TrajectoryError, TrajectoryFollower, followed
from plan_stack.trajectory.limits import Limits

__all__ = ["ArmBridgeConfig", "robot_default", "ArmBridgeSettings", "ArmBridge", "Acceptance", "CommandState",
           "WatchdogState",
           "WatchdogDecision", "GoalOutcome", "GoalStep", "GoalMonitor", "PREEMPTED", "ProtectiveStop", "follow_goal",
           "several_publishers"]

#: Reference samples a goal keeps to compare each measurement with the reference at its stamp.
_HISTORY_LEN = 200
#: Reference samples (one per joint state) the collision check keeps to find the reference at a measurement's
#: stamp; a joint state older than all of them is compared with the oldest.
_COLLISION_HISTORY_LEN = 16
#: Joint states stamped before the measurement in force, in a row, after which the robot's time is taken to
#: have restarted without this node's clock showing it (a bag loop, a driver restarted on its own time base).
BACKWARD_STATES_RESET = 25
PREEMPTED = "preempted by a newer trajectory"


@dataclasses.dataclass(frozen=True)
class ArmBridgeSettings:
    """The bridge behaviour both arm bridges share (from their node configs)."""

    watchdog_timeout_s: float
    jump_tolerance: float
    goal_time_tolerance_s: float
    feedback_period_s: float
    stop_deceleration_scale: float
    max_start_delay_s: float
    #: a cancel stops from where the reference will be this long from now (0: from the present reference)
    stop_lead_s: float = 0.0
    #: tracking error against the reference at the measurement's stamp (True) or at the present (False)
    track_at_measurement_stamp: bool = True
    #: a late command (its first point already due) whose curve fails the check only because the join from the
    #: present reference to its next point is too short is accepted without its points due within this long
    #: (s) from now, when the curve joined that way passes the same check (0: refused as it is)
    late_join_s: float = 0.0
    #: per channel (bridge joint order): a measurement further than this from the reference at its stamp is a
    #: collision and makes a protective stop (inf: not checked; None: no collision check at all)
    collision_tracking_error: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class ArmBridgeConfig:
    """The parameters both arm bridges (`aloha_bridge`, `franka_bridge`) share; each robot's bridge config
    extends it with its joints, limits and controllers, and overrides a field where its text or default is the
    robot's own. `_check` is the robot's own validation, run between the field checks and the
    collision_tracking_error length check."""

    joint_names: tuple[str, ...] = param("stack joint names, in the bridge's channel order", read_only=True)
    urdf_path: str = param("URDF with joint limits; empty = the package's URDF of the robot", "")
    velocity_scale: float = param("fraction of the URDF velocity limits the bridge allows", 1.0, min=0.01, max=1.0)
    watchdog_timeout: float = param(
        "s after the last trajectory ends (or after start) before the bridge commands an explicit hold and reports it",
        0.5, min=0.01)
    goal_tolerance: float = param("max |joint error| at the end of a goal", 0.05, min=0.0)
    goal_time_tolerance_s: float = param("s after a goal's last point to reach goal_tolerance", 1.0, min=0.0)
    max_start_delay_s: float = param(
        "a command whose first point is due further ahead than this (s) is refused: a wrong clock or stamp "
        "(e.g. wall-clock stamps on sim time) would otherwise queue it for years", 10.0, min=0.0)
    jump_tolerance: float = param("max difference between the present reference and a point due now (rad, m)",
                                  0.02, min=0.0)
    feedback_period_s: float = param("s between ExecuteTrajectory feedback messages", 0.05, min=0.001)
    late_join_s: float = param(
        "a command delivered after its first point was due, refused only because the join from the present "
        "reference to its next point is too short, is accepted without its points due within this long (s), "
        "when the curve joined that way passes every limit (0: refused)", 0.1, min=0.0, max=1.0)
    collision_tracking_error: tuple[float, ...] = param(
        "per joint (bridge joint order): a joint measured further than this from the reference at its stamp "
        "(rad; grippers normalised) is taken for a collision: protective stop, the arms held where measured and "
        "every command refused until ~/reset_protective_stop; 0 = joint not checked, empty = no check",
        (), min=0.0)
    stop_deceleration_scale: float = param("fraction of the acceleration limit used to stop on cancel", 0.8,
                                           min=0.05, max=1.0)

    def __post_init__(self) -> None:
        validate(self)
        self._check()
        if len(self.collision_tracking_error) not in (0, len(self.joint_names)):
            raise ConfigError(f"collision_tracking_error: expected none or {len(self.joint_names)} values (one per "
                              f"joint of joint_names), got {len(self.collision_tracking_error)}")

    def _check(self) -> None:
        """The robot's own rules (its joints, per-joint lists); raise ConfigError naming the field."""

    def settings(self) -> ArmBridgeSettings:
        """The shared bridge behaviour; a robot's config adds what differs (`stop_lead_s`, ...)."""
        collision = None
        if self.collision_tracking_error:  # 0 for a joint: not checked
            collision = np.asarray(self.collision_tracking_error, dtype=float)
            collision = np.where(collision > 0.0, collision, np.inf)
        return ArmBridgeSettings(
            watchdog_timeout_s=self.watchdog_timeout, jump_tolerance=self.jump_tolerance,
            goal_time_tolerance_s=self.goal_time_tolerance_s, feedback_period_s=self.feedback_period_s,
            stop_deceleration_scale=self.stop_deceleration_scale, max_start_delay_s=self.max_start_delay_s,
            late_join_s=self.late_join_s, collision_tracking_error=collision)

    def goal_checks(self) -> tuple[np.ndarray, np.ndarray]:
        """(tracked mask, per-channel goal tolerance) over the stack channels: every channel tracked and held
        to `goal_tolerance`, unless the robot says otherwise."""
        n = len(self.joint_names)
        return np.ones(n, dtype=bool), np.full(n, self.goal_tolerance)

    def limits(self) -> Limits:
        """The limits the bridge enforces, in stack units and `joint_names` order (the robot's URDF and this
        config); raises LimitsError."""
        raise NotImplementedError

    @property
    def state_joint_names(self) -> tuple[str, ...]:
        """The joint_states joints the bridge reads, in the order `joint_to_stack` takes them."""
        return self.joint_names

    def joint_to_stack(self, q: np.ndarray) -> np.ndarray:
        """Measured positions (`state_joint_names` order, joint_states units) -> the stack's channels and units."""
        return q


def robot_default(name: str, default: Any) -> Any:
    """`ArmBridgeConfig`'s parameter `name` (description, bounds, read-only flag) with a robot's own default."""
    info = info_of(ArmBridgeConfig.__dataclass_fields__[name])
    return param(info.description, default, min=info.min, max=info.max, choices=info.choices,
                 read_only=info.read_only)


@dataclasses.dataclass(frozen=True)
class ProtectiveStop:
    """Why the bridge stopped (the first joint over its collision threshold) and the hold it sent."""

    time_s: float  # the measurement's stamp
    joint: str
    error: float
    threshold: float
    command: Trajectory

    @property
    def reason(self) -> str:
        return (f"{self.joint} measured {self.error:.3f} from its reference at {self.time_s:.3f} s "
                f"(collision_tracking_error {self.threshold:.3g}): a collision?")


@dataclasses.dataclass(frozen=True)
class Acceptance:
    """A command's verdict; when accepted, the command to send (bridge joint order, absolute stamp)."""

    verdict: Verdict
    seq: int = -1
    end_s: float = 0.0
    command: Trajectory | None = None


class CommandState(enum.IntEnum):
    """Whether the bridge follows commands now (the values are `plan_stack/msg/BridgeState`'s constants)."""

    WAITING = 0  # no joint state yet: the robot state is unknown, every command is refused
    READY = 1  # commands are checked and, when valid, followed
    PROTECTIVE_STOP = 2  # held after a collision: every command is refused until `reset_protective_stop`


class WatchdogState(enum.Enum):
    WAITING = "waiting for joint_states"
    FOLLOWING = "following a trajectory"
    IDLE = "idle, within watchdog_timeout"
    HOLDING = "no trajectory covers the present: holding the last commanded position"


@dataclasses.dataclass(frozen=True)
class WatchdogDecision:
    state: WatchdogState
    command: Trajectory | None = None  # the hold to send now (once per idle lapse)
    idle_s: float = 0.0
    held_positions: np.ndarray | None = None


class GoalOutcome(enum.Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    CANCELED = "canceled"
    PREEMPTED = "preempted"
    TOLERANCE_VIOLATED = "goal tolerance violated"
    PROTECTIVE_STOP = "protective stop"


@dataclasses.dataclass(frozen=True)
class GoalStep:
    """One poll of a running goal: its outcome, the result code and message, feedback and a stop to send."""

    outcome: GoalOutcome
    error_code: int = SUCCESSFUL
    message: str = ""
    feedback: tuple[float, float] | None = None  # (time_from_start, max_tracking_error)
    command: Trajectory | None = None


class ArmBridge:
    """The decisions of one arm bridge (stack joint order `joint_names`, `limits` in that order).

    `tracked`: the channels whose tracking error counts; `goal_tolerance`: each
    channel's tolerance at the end of a goal (inf: not checked).
    """

    def __init__(self, joint_names: Sequence[str], limits: Limits, settings: ArmBridgeSettings,
                 tracked: np.ndarray, goal_tolerance: np.ndarray) -> None:
        self.names = tuple(joint_names)
        self.limits = limits
        self.settings = settings
        self.tracked = np.asarray(tracked, dtype=bool)
        self.goal_tolerance = np.asarray(goal_tolerance, dtype=float)
        self.follower: TrajectoryFollower | None = None  # created from the first joint state
        self.measured: np.ndarray | None = None  # stack units
        self.measured_s = 0.0  # the measurement's stamp
        self.seq = 0  # bumps on every command sent; a goal seeing another value was preempted
        self.hold_sent = False
        self._idle_since_s: float | None = None
        self.protective_stop: ProtectiveStop | None = None  # latched until `reset_protective_stop`
        #: the curve the controllers follow from the last command on (`core.followed`: the command's points due
        #: after its activation, from the reference there), stamped as the command; None before the first
        self.in_force: Trajectory | None = None
        self._reference_history: collections.deque = collections.deque(maxlen=_COLLISION_HISTORY_LEN)
        self.backward_states = 0  # joint states in a row stamped before the measurement in force
        thresholds = settings.collision_tracking_error
        if thresholds is not None and np.shape(thresholds) != (len(self.names),):
            raise ValueError(f"collision_tracking_error: expected {len(self.names)} values (one per joint of "
                             f"{list(self.names)}), got {np.shape(thresholds)}")

    # --- inputs -----------------------------------------------------------------

    def implausible_state(self, q: np.ndarray) -> str | None:
        """Why a finite measurement cannot be a real one (beyond a position limit by more than the joint's
        whole range: a sensor or message fault), or None."""
        lo, hi = self.limits.q_min, self.limits.q_max
        span = np.where(np.isfinite(hi - lo), hi - lo, np.inf)
        out = np.flatnonzero((q < lo - span) | (q > hi + span))
        if not len(out):
            return None
        i = int(out[0])
        return (f"position of {self.names[i]} ({q[i]:.6g}) lies beyond its limits [{lo[i]:.4g}, {hi[i]:.4g}] "
                "by more than their range")

    def stamped_before_measurement(self, stamp_s: float) -> bool:
        """True when a joint state stamped `stamp_s` must not be measured: stamped before the measurement in
        force, its world is not the reference's (a simulator reset the node's clock has not shown yet; the clock
        reset follows). After BACKWARD_STATES_RESET of them in a row the robot's time restarted without a clock
        reset: the bridge resets as it would on one (False: the state is the first of the new world)."""
        if self.measured is None or stamp_s >= self.measured_s:
            self.backward_states = 0
            return False
        self.backward_states += 1
        if self.backward_states < BACKWARD_STATES_RESET:
            return True
        self.clock_reset()
        return False

    def on_joint_state(self, q: np.ndarray, stamp_s: float) -> bool:
        """A validated measurement in stack units; True when it is the first (the reference starts there)."""
        self.measured = np.asarray(q, dtype=float)
        self.measured_s = float(stamp_s)
        if self.follower is None:
            self.follower = TrajectoryFollower(self.names, self.measured)
            return True
        return False

    def check_collision(self, now_s: float) -> ProtectiveStop | None:
        """After each joint state: the protective stop it causes (its hold is the command to send), else None.

        The measurement is compared with the reference at its own stamp (interpolated between the references
        sampled at the previous joint states' arrivals), so transport delay is not taken for tracking error.
        A position servo pushed off its reference by an obstacle is the only sensor this needs."""
        thresholds = self.settings.collision_tracking_error
        if thresholds is None or self.follower is None or self.measured is None or self.protective_stop is not None:
            return None
        present = self.follower.sample(now_s).positions.copy()
        history = self._reference_history
        history.append((now_s, present))
        times = np.array([h[0] for h in history])
        k = int(np.searchsorted(times, self.measured_s))
        if k == 0 or k == len(history):
            reference = history[min(k, len(history) - 1)][1]
        else:
            (t0, r0), (t1, r1) = history[k - 1], history[k]
            w = (self.measured_s - t0) / (t1 - t0) if t1 > t0 else 1.0
            reference = r0 + w * (r1 - r0)
        error = np.abs(self.measured - reference)
        j = int(np.argmax(error / thresholds))
        if not error[j] > thresholds[j]:
            return None
        held = np.where(np.isfinite(thresholds), self.measured, present)
        hold = self._send(self.follower, Trajectory(self.names, now_s, np.array([0.0]), held[None, :]), now_s)
        self.protective_stop = ProtectiveStop(self.measured_s, self.names[j], float(error[j]), float(thresholds[j]),
                                              hold)
        return self.protective_stop

    def reset_protective_stop(self) -> ProtectiveStop | None:
        """An operator cleared the stop: commands are accepted again from the hold. The stop cleared, or None."""
        stop, self.protective_stop = self.protective_stop, None
        self._reference_history.clear()
        return stop

    def clock_reset(self) -> None:
        """Time went back: forget the reference and the measured state; running goals end preempted."""
        self.follower = None
        self.measured = None
        self.in_force = None
        self.protective_stop = None
        self.backward_states = 0
        self._reference_history.clear()
        self.seq += 1
        self.hold_sent = False
        self._idle_since_s = None

    def command_state(self) -> tuple[CommandState, str]:
        """(whether commands are followed now, why not and what ends it: "" when READY)."""
        if self.follower is None:
            return CommandState.WAITING, "no joint_states received yet: the robot state is unknown"
        if self.protective_stop is not None:
            return CommandState.PROTECTIVE_STOP, (f"protective stop: {self.protective_stop.reason}; commands are "
                                                  "refused until reset_protective_stop")
        return CommandState.READY, ""

    def reference(self, now_s: float) -> Reference | None:
        """The reference now (None before the first joint state)."""
        return None if self.follower is None else self.follower.sample(now_s)

    def hold(self, now_s: float) -> Trajectory | None:
        """What the bridge executes without a command: its present reference as a one-point trajectory at
        `now_s` (None before the first joint state). Published as the trajectory in force at start-up."""
        if self.follower is None:
            return None
        return Trajectory(self.names, now_s, np.array([0.0]), self.follower.peek(now_s).positions[None, :].copy())

    # --- commands ----------------------------------------------------------------

    @staticmethod
    def malformed(exc: TrajectoryError) -> Acceptance:
        """The refusal of a message that does not even convert to a trajectory."""
        return Acceptance(Verdict(False, INVALID_GOAL, str(exc)))

    def accept(self, traj: Trajectory, now_s: float) -> Acceptance:
        """Validate a command against the present reference; when valid, the command to send."""
        state, why = self.command_state()
        if state is not CommandState.READY or self.follower is None:
            return Acceptance(Verdict(False, INVALID_GOAL, why))
        start = traj.start_s(now_s)
        initial = self._initial(self.follower, start, now_s)
        ahead = start + float(traj.times_s[0]) - now_s
        limit = self.settings.max_start_delay_s
        if ahead > limit:
            return Acceptance(Verdict(False, INVALID_GOAL,
                                      f"header.stamp: the first point is due in {ahead:.3f} s, more than "
                                      f"max_start_delay_s {limit} s ahead (a wrong clock or stamp?)"))
        verdict = check_trajectory(traj, self.names, self.limits, now_s, initial,
                                   jump_tolerance=self.settings.jump_tolerance)
        if not verdict.ok and verdict.curve:
            traj, verdict = self._late_joined(traj, now_s, initial, verdict)
        if not verdict.ok:
            return Acceptance(verdict)
        command = dataclasses.replace(traj.reordered(self.names), stamp_s=traj.start_s(now_s))
        self._send(self.follower, command, now_s)
        return Acceptance(verdict, self.seq, command.stamp_s + float(command.times_s[-1]), command)

    def _late_joined(self, traj: Trajectory, now_s: float, initial: Reference, refusal: Verdict
                     ) -> tuple[Trajectory, Verdict]:
        """A late command (delivered after its first point was due: the generator's lead was eaten by
        transport or a loaded machine) joins the present reference to its next point over what is left, which
        can be a few ms: a sharp curve the check refuses although the rest of the command is fine. Dropping the
        points due within `late_join_s` joins over at least that long instead, as a trajectory generator's own
        lead would have; the trimmed command passes the same check or the original refusal stands. What is
        sent is the trimmed command (the curve checked is the curve executed)."""
        join = self.settings.late_join_s
        start = traj.start_s(now_s)
        due = start + traj.times_s
        if join <= 0.0 or traj.stamp_s == 0.0 or due[0] >= now_s or due[-1] <= now_s + join:
            return traj, refusal
        first = int(np.searchsorted(due, now_s + join, side="right"))
        # The present reference as the first point (due now: the controller's state, so the curve is the same
        # join), then the points after the join: what active_trajectory reports is the curve executed from now.
        order = [self.names.index(n) for n in traj.joint_names]  # the reference in the command's joint order
        here = [initial.positions, initial.velocities, initial.accelerations]

        def rows(arr: np.ndarray, k: int) -> np.ndarray:
            return np.vstack([np.asarray(here[k], float)[order][None], arr[first:]])

        trimmed = Trajectory(traj.joint_names, traj.stamp_s,
                             np.concatenate([[now_s - start], traj.times_s[first:]]), rows(traj.positions, 0),
                             None if traj.velocities is None else rows(traj.velocities, 1),
                             None if traj.accelerations is None else rows(traj.accelerations, 2))
        verdict = check_trajectory(trimmed, self.names, self.limits, now_s, initial,
                                   jump_tolerance=self.settings.jump_tolerance)
        if not verdict.ok:
            return traj, refusal
        late = now_s - float(due[0])
        return trimmed, Verdict(True, SUCCESSFUL, f"late by {late:.3f} s: {first} points due within late_join_s "
                                                  f"{join} s dropped, joined to the next over "
                                                  f"{float(due[first]) - now_s:.3f} s")

    def _send(self, follower: TrajectoryFollower, traj: Trajectory, now_s: float) -> Trajectory:
        if traj.stamp_s == 0.0:
            traj = dataclasses.replace(traj, stamp_s=now_s)
        self._put_in_force(follower, traj, now_s)
        self.seq += 1
        self.hold_sent = False
        self._idle_since_s = None
        return traj

    @staticmethod
    def _initial(follower: TrajectoryFollower, start_s: float, now_s: float) -> Reference:
        """The reference a command starting at `start_s` is joined from: now, or at its stamp when the message
        arrived early (another process's clock runs a few ms ahead). The follower is brought to now first (a
        command already due takes over); one still pending is replaced by this command, so it does not count."""
        present = follower.sample(now_s)
        return follower.peek(start_s, pending=False) if start_s > now_s else present

    def _put_in_force(self, follower: TrajectoryFollower, traj: Trajectory, now_s: float) -> None:
        """Queue `traj` (absolute stamp) on the follower and keep the curve it will follow as `in_force`: from
        the reference at its activation (its stamp, or now when that has passed), as `accept` checked it."""
        start = traj.stamp_s
        initial = self._initial(follower, start, now_s)
        follower.set_trajectory(traj, now_s)
        self.in_force = followed(traj, start, initial, max(start, now_s))

    def stop(self, now_s: float) -> Trajectory | None:
        """Decelerate to rest within the acceleration limits: the command to send (None: nothing commanded)."""
        if self.follower is None:
            return None
        t0 = now_s + max(self.settings.stop_lead_s, 0.0)
        ref = self._initial(self.follower, t0, now_s)  # where the stop takes over from
        stop = stop_trajectory(ref, self.limits, self.settings.stop_deceleration_scale)
        return self._send(self.follower, dataclasses.replace(stop, stamp_s=t0), now_s)

    def watchdog(self, now_s: float) -> WatchdogDecision:
        """The watchdog's state; once per idle lapse past `watchdog_timeout_s`, a hold command."""
        if self.follower is None:
            return WatchdogDecision(WatchdogState.WAITING)
        ref = self.follower.sample(now_s)
        if not self.follower.holding:
            return WatchdogDecision(WatchdogState.FOLLOWING)
        if self._idle_since_s is None:
            self._idle_since_s = now_s
        idle = now_s - self._idle_since_s
        if idle < self.settings.watchdog_timeout_s:
            return WatchdogDecision(WatchdogState.IDLE, idle_s=idle)
        hold = None
        if not self.hold_sent:  # not _send: a hold must not preempt a goal still settling into its tolerance
            hold = Trajectory(self.names, now_s, np.array([0.0]), ref.positions[None, :])
            self._put_in_force(self.follower, hold, now_s)
            self.hold_sent = True
        return WatchdogDecision(WatchdogState.HOLDING, hold, idle, ref.positions)

    # --- goals ---------------------------------------------------------------------

    def monitor(self, acceptance: Acceptance, now_s: float) -> GoalMonitor | GoalStep:
        """A monitor for an accepted goal, or the preempted step when a newer command already replaced it."""
        if self.seq != acceptance.seq or self.follower is None:
            return GoalStep(GoalOutcome.PREEMPTED, INVALID_GOAL, PREEMPTED)
        return GoalMonitor(self, acceptance.seq, now_s, acceptance.end_s, self.follower.final_positions)


class GoalMonitor:
    """Follows one accepted goal until it succeeds, is canceled or preempted, or misses its tolerance."""

    def __init__(self, bridge: ArmBridge, seq: int, start_s: float, end_s: float, target: np.ndarray) -> None:
        self._bridge = bridge
        self.seq = seq
        self.start_s = start_s
        self.end_s = end_s
        self.target = target
        self.max_error = 0.0
        self._last_feedback_s = -np.inf
        self._history: collections.deque = collections.deque(maxlen=_HISTORY_LEN)  # (time, reference positions)

    def step(self, now_s: float, cancel_requested: bool) -> GoalStep:
        """One poll (bridge lock held). A cancel returns the stop command to send."""
        b = self._bridge
        if b.protective_stop is not None:
            return GoalStep(GoalOutcome.PROTECTIVE_STOP, PATH_TOLERANCE_VIOLATED,
                            f"protective stop: {b.protective_stop.reason}")
        if b.seq != self.seq or b.follower is None:
            return GoalStep(GoalOutcome.PREEMPTED, INVALID_GOAL, PREEMPTED)
        self._history.append((now_s, b.follower.sample(now_s).positions))
        if cancel_requested:
            return GoalStep(GoalOutcome.CANCELED, SUCCESSFUL, "canceled: stopping within limits",
                            command=b.stop(now_s))
        if b.settings.track_at_measurement_stamp:
            # Compare the measurement with the reference at the measurement's own stamp, not with "now".
            ref = min(self._history, key=lambda h: abs(h[0] - b.measured_s))[1]
        else:
            ref = self._history[-1][1]
        err = float(np.max(np.abs(ref - b.measured)[b.tracked]))
        self.max_error = max(self.max_error, err)
        feedback = None
        if now_s - self._last_feedback_s >= b.settings.feedback_period_s:
            feedback = (max(now_s - self.start_s, 0.0), self.max_error)
            self._last_feedback_s = now_s
        if now_s >= self.end_s:
            final = np.abs(self.target - b.measured)
            if np.all(final <= b.goal_tolerance):
                return GoalStep(GoalOutcome.SUCCEEDED, SUCCESSFUL, "", feedback)
            if now_s >= self.end_s + b.settings.goal_time_tolerance_s:
                j = int(np.argmax(final - b.goal_tolerance))
                return GoalStep(GoalOutcome.TOLERANCE_VIOLATED, GOAL_TOLERANCE_VIOLATED,
                                f"{b.names[j]} is {final[j]:.4g} from its goal after goal_time_tolerance_s", feedback)
        return GoalStep(GoalOutcome.RUNNING, feedback=feedback)


def several_publishers(topic: str, nodes: Sequence[str]) -> str:
    """Why the measurement may jump when more than one node publishes joint_states on `topic` (else ""): two
    robots or simulators on one ROS domain each send their own joint states, and the tracking check reads the
    jumps between them as a collision."""
    if len(nodes) < 2:
        return ""
    return f"{len(nodes)} publishers on {topic} ({', '.join(nodes)}): two robots or simulators on one ROS domain?"


def follow_goal(monitor: GoalMonitor | GoalStep, now: Callable[[], float], cancel_requested: Callable[[], bool],
                lock: AbstractContextManager, send: Callable[[Trajectory], None],
                feedback: Callable[[float, float], None], poll_s: float,
                sleep: Callable[[float], None] = time.sleep) -> GoalStep:
    """Poll an accepted goal every `poll_s` of wall time until it ends; its last step.

    Each poll reads `cancel_requested()`, then steps the monitor at `now()` with `lock` (the bridge's) held and
    sends the stop a cancel returns while still holding it, so commands go out in the order the bridge decided
    them. `feedback(time_from_start, max_tracking_error)` is called after the lock is released, as paced by
    `feedback_period_s`, never with the cancel's step. `monitor` may already be the final step (preempted).
    """
    while not isinstance(monitor, GoalStep):
        sleep(poll_s)
        cancel = cancel_requested()
        with lock:
            step = monitor.step(now(), cancel)
            if step.command is not None:
                send(step.command)
        if step.feedback is not None and step.outcome is not GoalOutcome.CANCELED:
            feedback(*step.feedback)
        if step.outcome is not GoalOutcome.RUNNING:
            monitor = step
    return monitor
