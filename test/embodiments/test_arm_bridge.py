"""ArmBridge: the arm bridges' decisions without ROS (commands, watchdog, goals, clock reset)."""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from plan_stack.config import ConfigError, info_of
from plan_stack.embodiments.arm_bridge import (
    PREEMPTED,
    ArmBridge,
    ArmBridgeConfig,
    ArmBridgeSettings,
    CommandState,
    GoalOutcome,
    GoalStep,
    WatchdogState,
    follow_goal,
    robot_default,
    several_publishers,
)
from plan_stack.trajectory.checks import (
    GOAL_TOLERANCE_VIOLATED,
    INVALID_GOAL,
    INVALID_JOINTS,
    PATH_TOLERANCE_VIOLATED,
    SUCCESSFUL,
)
from plan_stack.trajectory.core import Trajectory, TrajectoryError
from plan_stack.trajectory.limits import Limits

NAMES = ("a", "b")
LIMITS = Limits.for_joints(NAMES, [-2.0, -2.0], [2.0, 2.0], [1.0, 1.0], [4.0, 4.0])
SETTINGS = ArmBridgeSettings(watchdog_timeout_s=0.5, jump_tolerance=0.02, goal_time_tolerance_s=1.0,
                             feedback_period_s=0.1, stop_deceleration_scale=0.8, max_start_delay_s=10.0)


def _bridge(settings=SETTINGS, q0=(0.0, 0.0)) -> ArmBridge:
    b = ArmBridge(NAMES, LIMITS, settings, np.array([True, True]), np.array([0.05, 0.05]))
    assert b.on_joint_state(np.array(q0), 0.0)  # the first measurement
    return b


def _move(target, duration=1.0, stamp=0.0, names=NAMES) -> Trajectory:
    """Rest to rest in `duration` (positions + zero velocities: cubic)."""
    q = np.array([target], float)
    return Trajectory(names, stamp, np.array([duration]), q, np.zeros_like(q))


def test_commands_are_refused_before_the_first_joint_state():
    b = ArmBridge(NAMES, LIMITS, SETTINGS, np.array([True, True]), np.array([0.05, 0.05]))
    acc = b.accept(_move([0.1, 0.1]), 1.0)
    assert not acc.verdict.ok and acc.verdict.error_code == INVALID_GOAL and "no joint_states" in acc.verdict.message
    assert acc.command is None and b.watchdog(1.0).state is WatchdogState.WAITING


def test_valid_command_is_restamped_reordered_and_mirrored():
    b = _bridge()
    acc = b.accept(_move([0.3, 0.1], names=("b", "a")), 2.0)  # stamp 0 = now; joints in another order
    assert acc.verdict.ok and acc.command is not None and acc.seq == b.seq == 1
    assert acc.command.joint_names == NAMES and acc.command.stamp_s == 2.0 and acc.end_s == 3.0
    assert acc.command.positions.tolist() == [[0.1, 0.3]]
    assert b.reference(3.5).positions == pytest.approx([0.1, 0.3])


@pytest.mark.parametrize("traj, code, words", [
    (_move([1.9, 0.0], duration=0.5), INVALID_GOAL, "velocity"),  # 1.9 rad in 0.5 s: above 1 rad/s
    (_move([0.1, 0.1], names=("a", "c")), INVALID_JOINTS, "unknown joint"),
    (_move([0.1, 0.1], stamp=100.0), INVALID_GOAL, "max_start_delay"),
])
def test_invalid_commands_change_nothing(traj, code, words):
    b = _bridge()
    acc = b.accept(traj, 1.0)
    assert not acc.verdict.ok and acc.verdict.error_code == code and words in acc.verdict.message
    assert acc.command is None and b.seq == 0 and b.follower.holding


def test_malformed_messages_are_refused():
    acc = ArmBridge.malformed(TrajectoryError("points: a trajectory needs at least one point"))
    assert acc.verdict.error_code == INVALID_GOAL and acc.command is None


def test_watchdog_holds_once_per_idle_lapse():
    b = _bridge()
    assert b.accept(_move([0.2, 0.0]), 0.0).verdict.ok
    assert b.watchdog(0.5).state is WatchdogState.FOLLOWING
    assert b.watchdog(1.1).state is WatchdogState.IDLE  # idle from here
    hold = b.watchdog(1.7)
    assert hold.state is WatchdogState.HOLDING and hold.command is not None and b.hold_sent
    assert hold.command.positions[0] == pytest.approx([0.2, 0.0]) and hold.idle_s == pytest.approx(0.6)
    again = b.watchdog(1.8)
    assert again.state is WatchdogState.HOLDING and again.command is None  # sent once
    assert b.accept(_move([0.0, 0.0]), 1.9).verdict.ok
    assert not b.hold_sent and b.watchdog(2.0).state is WatchdogState.FOLLOWING


def test_goal_succeeds_within_tolerance_with_paced_feedback():
    b = _bridge()
    acc = b.accept(_move([0.2, -0.2]), 0.0)
    mon = b.monitor(acc, 0.0)
    feedback = []
    for t in np.arange(0.0, 1.0, 0.02):
        b.on_joint_state(b.follower.peek(t).positions, t)  # the robot tracks perfectly
        step = mon.step(t, False)
        assert step.outcome is GoalOutcome.RUNNING
        feedback += [step.feedback] if step.feedback else []
    assert 9 <= len(feedback) <= 11 and max(f[1] for f in feedback) < 1e-9  # every 0.1 s
    b.on_joint_state(np.array([0.19, -0.21]), 1.0)
    done = mon.step(1.0, False)
    assert done.outcome is GoalOutcome.SUCCEEDED and done.error_code == SUCCESSFUL


def test_goal_tolerance_is_enforced_after_goal_time_tolerance():
    b = _bridge()
    mon = b.monitor(b.accept(_move([0.2, -0.2]), 0.0), 0.0)
    b.on_joint_state(np.array([0.0, -0.2]), 1.0)  # joint a stuck
    assert mon.step(1.5, False).outcome is GoalOutcome.RUNNING  # still within goal_time_tolerance
    end = mon.step(2.01, False)
    assert end.outcome is GoalOutcome.TOLERANCE_VIOLATED and end.error_code == GOAL_TOLERANCE_VIOLATED
    assert end.message.startswith("a is 0.2 from its goal")


def test_tracking_error_uses_the_reference_at_the_measurement_stamp():
    b = _bridge()
    mon = b.monitor(b.accept(_move([0.5, 0.0]), 0.0), 0.0)
    for t in np.arange(0.0, 0.52, 0.02):
        mon.step(t, False)
    b.on_joint_state(b.follower.peek(0.3).positions, 0.3)  # a late message: exact at its own stamp
    assert mon.step(0.52, False).outcome is GoalOutcome.RUNNING and mon.max_error < 1e-3
    present = _bridge(ArmBridgeSettings(**{**SETTINGS.__dict__, "track_at_measurement_stamp": False}))
    mon = present.monitor(present.accept(_move([0.5, 0.0]), 0.0), 0.0)
    present.on_joint_state(present.follower.peek(0.3).positions, 0.3)
    mon.step(0.52, False)
    assert mon.max_error > 0.05  # compared with the reference now, 0.22 s further on


def test_a_newer_command_preempts_a_goal():
    b = _bridge()
    first = b.accept(_move([0.2, 0.0]), 0.0)
    mon = b.monitor(first, 0.0)
    b.accept(_move([0.0, 0.2]), 0.1)
    step = mon.step(0.2, False)
    assert step.outcome is GoalOutcome.PREEMPTED and step.error_code == INVALID_GOAL and step.message == PREEMPTED
    late = b.monitor(first, 0.3)
    assert isinstance(late, GoalStep) and late.outcome is GoalOutcome.PREEMPTED


@pytest.mark.parametrize("lead", [0.0, 0.03])
def test_cancel_stops_within_the_acceleration_limits(lead):
    settings = ArmBridgeSettings(**{**SETTINGS.__dict__, "stop_lead_s": lead})
    b = _bridge(settings)
    acc = b.accept(_move([1.2, -1.2], duration=2.0), 0.0)
    assert acc.verdict.ok
    step = b.monitor(acc, 0.0).step(1.0, True)  # mid-motion: 0.9 rad/s
    assert step.outcome is GoalOutcome.CANCELED and step.error_code == SUCCESSFUL
    stop = step.command
    assert stop is not None and stop.stamp_s == pytest.approx(1.0 + lead)
    assert np.all(stop.velocities[-1] == 0.0)
    q, v, a = (np.array(x) for x in zip(*[(r.positions, r.velocities, r.accelerations)
                                          for r in (b.follower.sample(t) for t in np.arange(1.0, 3.0, 0.005))]))
    assert np.all(np.abs(a) <= 0.8 * LIMITS.a_max * 1.001) and np.all(v[-1] == 0.0)
    assert b.seq == 2  # the stop is a command: a goal still running would be preempted by it


def test_clock_reset_forgets_the_state_and_ends_goals():
    b = _bridge()
    mon = b.monitor(b.accept(_move([0.2, 0.0]), 5.0), 5.0)
    b.clock_reset()
    assert b.follower is None and b.measured is None and b.reference(0.1) is None
    assert mon.step(0.1, False).outcome is GoalOutcome.PREEMPTED
    assert not b.accept(_move([0.2, 0.0]), 0.1).verdict.ok and b.stop(0.1) is None
    assert b.on_joint_state(np.array([0.0, 0.0]), 0.2)  # the next measurement starts a new reference


def test_a_measurement_beyond_a_limit_by_more_than_the_range_is_implausible():
    b = _bridge()
    assert b.implausible_state(np.array([2.5, -2.0])) is None  # beyond the limit, but by less than the range
    why = b.implausible_state(np.array([0.0, 1e300]))
    assert why is not None and why.startswith("position of b (1e+300) lies beyond its limits")
    assert b.implausible_state(np.array([-6.01, 0.0])) is not None


def test_hold_is_the_reference_in_force_without_a_command():
    """What the bridge reports executing before any command: its reference (the first measured state) at rest."""
    assert ArmBridge(NAMES, LIMITS, SETTINGS, np.array([True, True]), np.array([0.05, 0.05])).hold(1.0) is None
    b = _bridge(q0=(0.2, -0.1))
    hold = b.hold(1.0)
    assert hold.joint_names == NAMES and hold.stamp_s == 1.0 and hold.times_s.tolist() == [0.0]
    assert hold.positions.tolist() == [[0.2, -0.1]]
    b.accept(_move([0.3, 0.1]), 1.0)
    assert b.hold(3.0).positions[0] == pytest.approx([0.3, 0.1])  # after the command: where it came to rest


def test_an_early_message_is_checked_from_the_reference_at_its_stamp():
    """A continuation stamped a little after the bridge's clock (the sender's clock runs ahead) joins the
    reference where the bridge will be at the stamp: accepted. Checked from the reference at arrival, as if
    the arm were still there at the stamp, the same message needs an impossible jerk and was refused."""
    b = _bridge()
    ramp_t = np.arange(1, 41) * 0.05  # 0.8 rad/s on joint a (limit 1 rad/s), from rest at t = 0
    speed = 0.8
    ramp = np.stack([speed * np.maximum(ramp_t - 0.25, 0.0) + speed * np.minimum(ramp_t, 0.25) ** 2 / 0.5,
                     np.zeros_like(ramp_t)], axis=1)
    vel = np.stack([speed * np.minimum(ramp_t / 0.25, 1.0), np.zeros_like(ramp_t)], axis=1)
    assert b.accept(Trajectory(NAMES, 0.0001, ramp_t, ramp, vel), 0.0).verdict.ok
    now, stamp = 1.0, 1.06  # the message arrives 60 ms before its stamp
    ahead = b.follower.peek(stamp)
    t = np.arange(1, 11) * 0.05
    cont = Trajectory(NAMES, stamp, t, ahead.positions + np.outer(t, ahead.velocities),
                      np.repeat(ahead.velocities[None], len(t), axis=0))
    acc = b.accept(cont, now)
    assert acc.verdict.ok, acc.verdict.message
    # the arm then follows the continuation without a jump at the stamp
    before, after = b.reference(stamp - 1e-3).positions, b.reference(stamp + 1e-3).positions
    assert np.max(np.abs(after - before)) < 0.01


def _ramp(stamp: float) -> Trajectory:
    """From rest at `stamp`: 2 units/s² for 0.4 s, then 0.8 units/s (joint b mirrored), a point every 20 ms."""
    t = np.arange(0.0, 1.0, 0.02)
    q = np.where(t < 0.4, t ** 2, 0.16 + 0.8 * (t - 0.4))
    v = np.where(t < 0.4, 2 * t, 0.8)
    a = np.where(t < 0.4, 2.0, 0.0)
    return Trajectory(NAMES, stamp, t, np.stack([q, -q], 1), np.stack([v, -v], 1), np.stack([a, -a], 1))


def test_a_late_command_joins_over_late_join_s_when_that_passes_the_check():
    """Delivered 5 ms after its first point was due, the join from the present reference to the next point
    (15 ms away) is too sharp: refused as it is; with late_join_s the points due within it are dropped, the
    join over 0.115 s passes every limit, and what is sent and followed is that trimmed command."""
    late = _ramp(stamp=1.0)
    plain = _bridge().accept(late, 1.005)
    assert not plain.verdict.ok and plain.verdict.error_code == INVALID_GOAL and plain.verdict.curve
    assert "interpolated" in plain.verdict.message
    bridge = _bridge(ArmBridgeSettings(**{**SETTINGS.__dict__, "late_join_s": 0.1}))
    acc = bridge.accept(late, 1.005)
    assert acc.verdict.ok and acc.verdict.error_code == SUCCESSFUL and "late by 0.005 s" in acc.verdict.message
    cmd = acc.command
    assert cmd is not None and cmd.stamp_s == 1.0 and len(cmd.times_s) == len(late.times_s) - 6 + 1
    # first the present reference (at rest at 0) due now, so the command says which curve runs from now on;
    # then the points after the join, unchanged
    assert cmd.times_s[:2] == pytest.approx([0.005, 0.12]) and not cmd.positions[0].any()
    assert not cmd.velocities[0].any() and np.array_equal(cmd.positions[1:], late.positions[6:])
    # the reference the bridge now follows stays inside the limits (finite differences of dense samples)
    ts = np.arange(1.005, 2.0, 0.001)
    refs = [bridge.reference(t) for t in ts]
    v = np.array([r.velocities for r in refs])
    a = np.array([r.accelerations for r in refs])
    assert np.abs(v).max() <= 1.0 * (1 + 1e-6) and np.abs(a).max() <= 4.0 * (1 + 1e-6)


@pytest.mark.parametrize("now, words", [(1.03, "acceleration"), (1.11, "velocity")])
def test_a_late_command_still_refused_when_no_join_within_the_limits_exists(now, words):
    """Too late to reach within the limits even over late_join_s: the original refusal stands, nothing sent."""
    bridge = _bridge(ArmBridgeSettings(**{**SETTINGS.__dict__, "late_join_s": 0.1}))
    acc = bridge.accept(_ramp(stamp=1.0), now)
    assert not acc.verdict.ok and words in acc.verdict.message and acc.command is None
    assert bridge.follower is not None and bridge.follower.holding


def test_a_late_command_with_a_bad_point_in_its_past_is_refused_not_trimmed():
    """Only a refusal of the curve is retried: a non-finite value (even in a point already due) stays a refusal."""
    late = _ramp(stamp=1.0)
    pos = late.positions.copy()
    pos[0, 0] = np.nan
    bad = Trajectory(NAMES, 1.0, late.times_s, pos, late.velocities, late.accelerations)
    acc = _bridge(ArmBridgeSettings(**{**SETTINGS.__dict__, "late_join_s": 0.1})).accept(bad, 1.005)
    assert not acc.verdict.ok and "non-finite" in acc.verdict.message and not acc.verdict.curve


# --- protective stop -------------------------------------------------------------------

COLLISION = dataclasses.replace(SETTINGS, collision_tracking_error=np.array([0.2, np.inf]))


def _measure(b: ArmBridge, q, stamp_s: float, now_s: float):
    b.on_joint_state(np.array(q, float), stamp_s)
    return b.check_collision(now_s)


def test_tracking_error_over_the_threshold_stops_and_holds_where_measured():
    b = _bridge(COLLISION)
    assert b.accept(_move([1.0, 0.5], duration=2.0), 0.0).verdict.ok
    for k in range(1, 10):  # following the reference: no stop
        t = 0.02 * k
        assert _measure(b, b.reference(t).positions, t, t + 0.004) is None
    lagging = b.reference(0.2).positions - [0.25, 0.0]  # joint a held back by 0.25 rad: an obstacle
    stop = _measure(b, lagging, 0.2, 0.204)
    assert stop is not None and stop.joint == "a" and stop.error == pytest.approx(0.25, abs=0.01)
    assert "collision" in stop.reason and b.protective_stop is stop
    # a is held where measured (no more push), b keeps its present reference (a gripper keeps its grasp)
    assert stop.command.positions[0, 0] == pytest.approx(lagging[0])
    assert stop.command.positions[0, 1] == pytest.approx(b.reference(0.204).positions[1])
    assert b.reference(1.5).positions == pytest.approx(stop.command.positions[0])  # the goal is not resumed


def test_the_reference_is_taken_at_the_measurements_stamp():
    """States that arrive 0.24 s after they were measured, on a joint moving at up to 0.94 rad/s: compared with
    the reference when they were measured (not now, 0.2 rad further on), they are no collision."""
    move = _move([1.0, 0.0], duration=1.6)
    twin = _bridge()  # the same command on a second bridge: the reference at any past time
    assert twin.accept(move, 0.0).verdict.ok
    grid = [0.02 * k for k in range(80)]
    past = {round(t, 2): twin.reference(t).positions.copy() for t in grid}
    b = _bridge(COLLISION)
    assert b.accept(move, 0.0).verdict.ok
    lag, gap = 0.24, 0.0
    for t in grid[1:]:
        stamp = round(max(t - lag, 0.0), 2)
        assert _measure(b, past[stamp], stamp, t) is None, t
        gap = max(gap, float(np.abs(b.reference(t).positions - past[stamp]).max()))
    assert gap > 0.2  # what a comparison with the present reference would have taken for a collision


def test_a_stop_refuses_commands_ends_goals_and_clears_on_reset():
    b = _bridge(COLLISION)
    acc = b.accept(_move([1.0, 0.0], duration=2.0), 0.0)
    monitor = b.monitor(acc, 0.0)
    assert _measure(b, [-0.3, 0.0], 0.1, 0.104) is not None
    step = monitor.step(0.11, False)
    assert step.outcome is GoalOutcome.PROTECTIVE_STOP and step.error_code == PATH_TOLERANCE_VIOLATED
    refused = b.accept(_move([0.0, 0.0]), 0.2)
    assert not refused.verdict.ok and "reset_protective_stop" in refused.verdict.message and refused.command is None
    assert _measure(b, [-0.9, 0.0], 0.3, 0.304) is None  # latched: one stop, not one per joint state
    assert b.reset_protective_stop() is not None and b.protective_stop is None
    assert b.reset_protective_stop() is None
    assert b.accept(_move([0.0, 0.0]), 0.4).verdict.ok


def test_a_clock_reset_clears_a_stop():
    b = _bridge(COLLISION)
    assert _measure(b, [0.5, 0.0], 0.02, 0.03) is not None
    b.clock_reset()
    assert b.protective_stop is None
    assert b.on_joint_state(np.zeros(2), 0.0)  # the reset robot's first state
    assert b.accept(_move([0.1, 0.0]), 0.0).verdict.ok


def test_the_command_state_says_when_every_command_is_refused_and_why():
    b = ArmBridge(NAMES, LIMITS, COLLISION, np.array([True, True]), np.array([0.05, 0.05]))
    state, why = b.command_state()
    assert state is CommandState.WAITING and "no joint_states" in why
    b.on_joint_state(np.zeros(2), 0.0)
    assert b.command_state() == (CommandState.READY, "")
    assert _measure(b, [0.5, 0.0], 0.02, 0.03) is not None
    state, why = b.command_state()
    assert state is CommandState.PROTECTIVE_STOP and "collision" in why and "reset_protective_stop" in why
    assert why == b.accept(_move([0.1, 0.0]), 0.1).verdict.message  # what each refusal says
    b.reset_protective_stop()
    assert b.command_state() == (CommandState.READY, "")
    b.clock_reset()
    assert b.command_state()[0] is CommandState.WAITING and b.in_force is None


@pytest.mark.parametrize("arrives", [0.9, 1.0, 1.005])
def test_in_force_is_the_curve_the_controllers_follow_from_the_activation(arrives):
    """What the bridge reports on active_trajectory: the command's points after its activation (its stamp, or
    its arrival when later), from the reference there; sampled, it is the follower's reference."""
    b = _bridge()
    target = np.array([0.2, -0.1])
    assert b.accept(_move(target, duration=1.0, stamp=0.5), 0.5).verdict.ok  # moving when the next one comes
    s = np.array([0.6, 0.8])  # on that cubic (rest to rest from 0.5 s to 1.5 s) at 1.1 s and 1.3 s, then on
    q = np.vstack([np.outer(3 * s**2 - 2 * s**3, target), [0.25, -0.15]])
    v = np.vstack([np.outer(6 * s - 6 * s**2, target), [0.0, 0.0]])
    acc = b.accept(Trajectory(NAMES, 1.0, np.array([0.1, 0.3, 0.8]), q, v), arrives)
    assert acc.verdict.ok, acc.verdict.message
    report = b.in_force
    assert report is not None and report.stamp_s == 1.0 and report.t0_s == pytest.approx(max(1.0, arrives))
    ts = np.arange(max(1.0, arrives), 2.2, 0.0031)
    q, v, a = report.sample(ts)
    for t, qi, vi in zip(ts, q, v):
        ref = b.follower.sample(t)
        np.testing.assert_allclose(qi, ref.positions, atol=1e-9)
        np.testing.assert_allclose(vi, ref.velocities, atol=1e-7)
    hold = b.watchdog(5.0)  # idle: the watchdog's hold is in force, reported as it is
    hold = b.watchdog(5.6)
    assert hold.command is not None and b.in_force is not None
    assert b.in_force.stamp_s == 5.6 and np.array_equal(b.in_force.positions, hold.command.positions)


def test_a_joint_state_from_a_reset_the_clock_has_not_shown_yet_is_not_measured():
    """A simulator reset: its first joint states (stamped from 0 again, at the start pose) may reach the bridge
    before /clock shows the jump. Compared with the old scene's reference they would be a collision; stamped
    before the measurement in force, they are not measured until the clock reset comes."""
    b = _bridge(COLLISION)
    assert b.accept(_move([1.0, 0.0], duration=2.0), 0.0).verdict.ok
    for k in range(1, 50):
        t = 0.02 * k
        assert _measure(b, b.reference(t).positions, t, t) is None
    assert b.stamped_before_measurement(0.002)  # the reset world's first state, stamped 0.002 s
    assert b.protective_stop is None and b.measured_s == pytest.approx(0.98)
    b.clock_reset()  # the jump arrives: the next state is the first of the new world
    assert not b.stamped_before_measurement(0.004) and b.on_joint_state(np.zeros(2), 0.004)


def test_joint_states_that_keep_going_back_in_time_are_taken_for_a_restart():
    """No clock reset follows (a driver restarted on its own time base, a bag loop): after BACKWARD_STATES_RESET
    states in a row stamped before the measurement in force, the bridge resets as on a clock reset."""
    from plan_stack.embodiments.arm_bridge import BACKWARD_STATES_RESET

    b = _bridge(COLLISION)
    assert not b.stamped_before_measurement(0.0)  # the same stamp: not before
    b.on_joint_state(np.zeros(2), 100.0)
    for k in range(BACKWARD_STATES_RESET - 1):
        assert b.stamped_before_measurement(1.0 + 0.02 * k)
    assert not b.stamped_before_measurement(2.0) and b.follower is None  # reset: the state is the first again
    assert b.on_joint_state(np.zeros(2), 2.0)


def test_no_thresholds_no_check_and_a_wrong_count_is_an_error():
    b = _bridge()
    assert _measure(b, [1.5, 0.0], 0.02, 0.03) is None
    with pytest.raises(ValueError, match="collision_tracking_error"):
        ArmBridge(NAMES, LIMITS, dataclasses.replace(SETTINGS, collision_tracking_error=np.array([0.2])),
                  np.array([True, True]), np.array([0.05, 0.05]))


# --- ArmBridgeConfig ------------------------------------------------------------------------------------------


def test_the_shared_config_gives_the_settings_and_goal_checks():
    cfg = ArmBridgeConfig(joint_names=NAMES, watchdog_timeout=0.4, jump_tolerance=0.03, goal_time_tolerance_s=2.0,
                          feedback_period_s=0.2, stop_deceleration_scale=0.5, max_start_delay_s=3.0, late_join_s=0.05,
                          collision_tracking_error=(0.2, 0.0), goal_tolerance=0.01)
    settings = cfg.settings()
    assert (settings.watchdog_timeout_s, settings.jump_tolerance, settings.goal_time_tolerance_s,
            settings.feedback_period_s, settings.stop_deceleration_scale, settings.max_start_delay_s,
            settings.late_join_s, settings.stop_lead_s, settings.track_at_measurement_stamp) == (
        0.4, 0.03, 2.0, 0.2, 0.5, 3.0, 0.05, 0.0, True)
    assert settings.collision_tracking_error.tolist() == [0.2, np.inf]  # 0: that joint is not checked
    assert ArmBridgeConfig(joint_names=NAMES).settings().collision_tracking_error is None  # empty: no check
    tracked, tolerance = cfg.goal_checks()
    assert tracked.tolist() == [True, True] and tolerance.tolist() == [0.01, 0.01]
    assert cfg.state_joint_names == NAMES
    q = np.array([0.1, 0.2])
    assert cfg.joint_to_stack(q) is q
    with pytest.raises(NotImplementedError):
        cfg.limits()  # a robot's config knows its URDF


@pytest.mark.parametrize("kw, match", [
    (dict(collision_tracking_error=(0.2,)), r"^collision_tracking_error: expected none or 2 values \(one per joint "
                                            r"of joint_names\), got 1"),
    (dict(watchdog_timeout=0.0), r"^watchdog_timeout: 0.0 is below the minimum 0.01"),
    (dict(velocity_scale=1.5), r"^velocity_scale: 1.5 is above the maximum 1.0"),
])
def test_the_shared_config_refuses_bad_values(kw, match):
    with pytest.raises(ConfigError, match=match):
        ArmBridgeConfig(joint_names=NAMES, **kw)


def test_a_robot_default_keeps_the_shared_description_bounds_and_flags():
    shared = info_of(ArmBridgeConfig.__dataclass_fields__["collision_tracking_error"])
    own = robot_default("collision_tracking_error", (0.3, 0.3))
    assert isinstance(own, dataclasses.Field) and own.default == (0.3, 0.3)
    assert own.metadata["plan_stack"] == shared


def test_two_joint_states_publishers_are_named_as_a_likely_second_robot():
    assert several_publishers("/joint_states", ["/aloha_sim"]) == ""
    assert several_publishers("/joint_states", ["/a/sim", "/b/sim"]) == (
        "2 publishers on /joint_states (/a/sim, /b/sim): two robots or simulators on one ROS domain?")


# --- follow_goal ---------------------------------------------------------------------------------------------


class _Polls:
    """The robot clock advanced by each poll's wall-clock sleep; the robot follows the reference exactly."""

    def __init__(self, bridge: ArmBridge, dt_s: float) -> None:
        self.bridge, self.dt_s, self.now_s, self.count = bridge, dt_s, 0.0, 0

    def sleep(self, poll_s: float) -> None:
        assert poll_s == 0.005
        self.count += 1
        self.now_s += self.dt_s
        ref = self.bridge.reference(self.now_s)
        self.bridge.on_joint_state(ref.positions.copy(), self.now_s)


def _follow(b: ArmBridge, polls: _Polls, cancel_after: int | None = None):
    lock = threading.Lock()
    sent: list = []
    feedback: list = []

    def send(traj) -> None:
        assert lock.locked()  # commands go out while the bridge's decision is still the latest
        sent.append(traj)

    monitor = b.monitor(b.accept(_move([0.2, -0.2]), 0.0), 0.0)
    step = follow_goal(monitor, lambda: polls.now_s, lambda: cancel_after is not None and polls.count > cancel_after,
                       lock, send, lambda t, e: feedback.append((t, e)), 0.005, sleep=polls.sleep)
    return step, sent, feedback


def test_following_a_goal_polls_until_it_succeeds_with_paced_feedback():
    b = _bridge()
    polls = _Polls(b, 0.02)
    step, sent, feedback = _follow(b, polls)
    assert step.outcome is GoalOutcome.SUCCEEDED and step.error_code == SUCCESSFUL and sent == []
    assert polls.count == 50  # the goal's 1 s in polls of 0.02 s
    times = np.array([t for t, _ in feedback])
    assert times[0] == pytest.approx(0.02)  # at the first poll, then paced by feedback_period_s (0.1 s)
    assert np.all(np.diff(times) > 0.1 - 1e-9) and np.all(np.diff(times) < 0.12 + 1e-9)
    assert all(e == pytest.approx(0.0, abs=1e-12) for _, e in feedback)


def test_a_cancel_sends_its_stop_under_the_lock_and_no_feedback_with_it():
    b = _bridge()
    _, _, uncancelled = _follow(b, _Polls(b, 0.02))
    due = [round(t / 0.02) for t, _ in uncancelled]  # the polls that give feedback
    b = _bridge()
    polls = _Polls(b, 0.02)
    step, sent, feedback = _follow(b, polls, cancel_after=due[3] - 1)  # cancelled at a poll due to give feedback
    assert step.outcome is GoalOutcome.CANCELED and polls.count == due[3]
    assert len(sent) == 1 and sent[0].positions.shape[1] == 2  # the stop, within the acceleration limits
    assert feedback == uncancelled[:3]  # paced feedback before the cancel, none with it


def test_a_goal_already_preempted_is_not_polled():
    b = _bridge()
    first = b.accept(_move([0.2, -0.2]), 0.0)
    b.accept(_move([0.1, 0.1]), 0.0)
    step = b.monitor(first, 0.0)
    assert isinstance(step, GoalStep)
    polls = _Polls(b, 0.02)
    out = follow_goal(step, lambda: polls.now_s, lambda: False, threading.Lock(), lambda t: None,
                      lambda t, e: None, 0.005, sleep=polls.sleep)
    assert out is step and out.message == PREEMPTED and polls.count == 0
