"""Where a stitched trajectory starts: measured joints, the bridge's trajectory in force, or a chunk (no DDS)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.stamps import s_to_ns
from plan_stack.trajectory.alignment import Chunk, ChunkError
from plan_stack.trajectory.config import InitialState, StitcherConfig, StitcherNodeConfig
from plan_stack.trajectory.core import Trajectory, TrajectoryError
from plan_stack.trajectory.start_state import ACK_HISTORY, Anchor, StartState
from plan_stack.trajectory.stitching import Stitcher

NAMES = ("j0", "j1", "j2", "grip")
DT = 0.02


class Clock:
    """Seconds since the node's epoch, stepped by the test."""

    def __init__(self, now_s: float = 10.0) -> None:
        self.now_s = now_s

    def step(self, dt_s: float) -> float:
        self.now_s += dt_s
        return self.now_s


def _start(**node_kw) -> StartState:
    cfg = StitcherConfig(joint_names=NAMES, discrete_joints=("grip",), v_max=2.0, a_max=10.0, j_max=100.0,
                         q_min=(-3.0,) * 3, q_max=(3.0,) * 3)
    return StartState(Stitcher(cfg), StitcherNodeConfig(**node_kw))


def _chunk(stamp_s: float, q0: np.ndarray, H: int = 20, names=NAMES) -> Chunk:
    ref = np.tile(q0, (H, 1))
    ref[:, 0] += np.linspace(0.0, 0.05, H)
    return Chunk(stamp_s, names, DT, ref)


def _trajectory(stamp_s: float, q: np.ndarray, n: int = 10, names=NAMES) -> Trajectory:
    """A trajectory at rest at `q`, stamped `stamp_s`: what a bridge reports holding."""
    return Trajectory(names, stamp_s, np.arange(n) * DT, np.tile(q, (n, 1)), np.zeros((n, len(q))),
                      np.zeros((n, len(q))))


def _stitch(start: StartState, now_s: float, q0: np.ndarray) -> Trajectory:
    """One chunk through the stitcher from the start `start` picks, as the node does."""
    chunk = _chunk(now_s, q0)
    result = start.stitcher.process(chunk, now_s, start.initial(now_s, chunk))
    assert result.trajectory is not None
    return result.trajectory


# --- configuration ------------------------------------------------------------------------------------------


def test_state_mapping_needs_both_lists_of_equal_length():
    assert StitcherNodeConfig(state_offset=(0.0, 0.01), state_scale=(1.0, 25.0)).state_scale == (1.0, 25.0)
    with pytest.raises(ConfigError, match="state_offset"):
        StitcherNodeConfig(state_offset=(0.0,), state_scale=())


@pytest.mark.parametrize("node_kw, match", [
    (dict(state_joint_names=("a", "b")), r"state_joint_names: 2 names for 4 joints"),
    (dict(state_offset=(0.0,) * 3, state_scale=(1.0,) * 3), r"state_scale: 3 values for 4 joints"),
])
def test_measured_state_mapping_must_give_one_value_per_joint(node_kw, match):
    with pytest.raises(ConfigError, match=match):
        _start(**node_kw)


# --- initial_state joint_states -----------------------------------------------------------------------------


def test_the_measured_state_is_the_start_until_it_is_older_than_the_timeout():
    clock = Clock()
    start = _start(joint_state_timeout_s=0.5)
    chunk = _chunk(clock.now_s, np.zeros(4))
    assert start.initial(clock.now_s, chunk) is None  # nothing measured yet
    q, v = np.array([0.1, 0.2, 0.3, 1.0]), np.array([0.5, 0.0, -0.5, 0.0])
    start.measure(q, v, clock.now_s)
    q0, v0, a0 = start.initial(clock.step(0.5), chunk)
    np.testing.assert_array_equal(q0, q)
    np.testing.assert_array_equal(v0, v)
    np.testing.assert_array_equal(a0, np.zeros(4))  # joint_states carry no acceleration
    assert start.initial(clock.step(1e-3), chunk) is None


def test_measured_states_are_mapped_to_stack_units_and_missing_velocities_are_zero():
    start = _start(state_offset=(0.0, 0.0, 0.0, 0.01), state_scale=(1.0, 1.0, 1.0, 25.0))
    start.measure(np.array([0.1, 0.2, 0.3, 0.03]), np.array([1.0, 0.0, 0.0, 0.02]), 1.0)
    stamp_s, q, v = start.measured
    assert stamp_s == 1.0
    np.testing.assert_allclose(q, [0.1, 0.2, 0.3, 0.5])
    np.testing.assert_allclose(v, [1.0, 0.0, 0.0, 0.5])
    start.measure(np.array([0.1, 0.2, 0.3, 0.03]), np.zeros(0), 2.0)
    np.testing.assert_array_equal(start.measured[2], np.zeros(4))


def test_measured_joints_far_from_the_active_trajectory_re_anchor_to_the_measured_state():
    clock = Clock()
    start = _start(reanchor_tolerance=0.1)
    q = np.zeros(4)
    start.measure(q, np.zeros(0), clock.now_s)
    _stitch(start, clock.now_s, q)
    start.measure(q + [0.05, 0.0, 0.0, 0.0], np.zeros(0), clock.step(DT))
    assert start.before_chunk(clock.now_s) is None and start.stitcher.active is not None  # within tolerance
    start.measure(q + [0.0, 0.3, 0.0, 0.0], np.zeros(0), clock.step(DT))
    event = start.before_chunk(clock.now_s)
    assert event is not None and event.onto is Anchor.MEASURED and start.stitcher.active is None
    assert "measured joints are 0.300 from the trajectory being executed (tolerance 0.1)" in event.why
    assert event.log_text.startswith("re-anchoring to the measured state: ")
    assert event.report_text.startswith("re-anchored to the measured state: ")


def test_ignored_joints_discrete_joints_and_a_zero_tolerance_never_re_anchor():
    clock = Clock()
    for node_kw, offset in [(dict(reanchor_ignore_joints=("j1",)), [0.0, 0.5, 0.0, 0.0]),
                            ({}, [0.0, 0.0, 0.0, 1.0]),  # the gripper is discrete: never compared
                            (dict(reanchor_tolerance=0.0), [0.5, 0.5, 0.5, 0.0])]:
        start = _start(**node_kw)
        start.measure(np.zeros(4), np.zeros(0), clock.now_s)
        _stitch(start, clock.now_s, np.zeros(4))
        start.measure(np.array(offset, dtype=float), np.zeros(0), clock.step(DT))
        assert start.before_chunk(clock.now_s) is None and start.stitcher.active is not None


def test_a_stale_measurement_does_not_re_anchor():
    clock = Clock()
    start = _start(joint_state_timeout_s=0.5)
    start.measure(np.zeros(4), np.zeros(0), clock.now_s)
    _stitch(start, clock.now_s, np.zeros(4))
    start.measure(np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(0), clock.now_s)
    assert start.before_chunk(clock.step(0.6)) is None and start.stitcher.active is not None


def test_a_refused_goal_re_anchors_once_to_the_measured_state():
    clock = Clock()
    start = _start()
    start.measure(np.zeros(4), np.zeros(0), clock.now_s)
    _stitch(start, clock.now_s, np.zeros(4))
    worker = threading.Thread(target=start.on_refused, args=("error -1: limits",))  # the action client's thread
    worker.start()
    worker.join()
    assert start.refused == "error -1: limits"
    event = start.before_chunk(clock.step(DT))
    assert event is not None and event.why == "the bridge refused the last trajectory (error -1: limits)"
    assert start.refused is None and start.stitcher.active is None
    _stitch(start, clock.now_s, np.zeros(4))
    assert start.before_chunk(clock.step(DT)) is None  # said once


# --- initial_state chunk ------------------------------------------------------------------------------------


def test_open_loop_the_first_chunk_starts_at_its_first_sample_at_rest():
    start = _start(initial_state="chunk")
    q = np.array([0.1, 0.2, 0.3, 1.0])
    chunk = _chunk(10.0, q[[3, 0, 1, 2]], names=("grip", "j0", "j1", "j2"))  # any joint order
    q0, v0, a0 = start.initial(10.0, chunk)
    np.testing.assert_array_equal(q0, q)
    np.testing.assert_array_equal(v0, np.zeros(4))
    np.testing.assert_array_equal(a0, np.zeros(4))
    assert start.initial(10.0, _chunk(10.0, q[:3], names=NAMES[:3])) is None  # process() says why
    _stitch(start, 10.0, q)
    assert start.initial(10.02, chunk) is None  # after that, the last trajectory is where the robot is
    assert start.before_chunk(10.02) is None


# --- initial_state bridge -----------------------------------------------------------------------------------


def test_without_a_report_of_the_bridge_no_trajectory_starts():
    start = _start(initial_state="bridge")
    with pytest.raises(ChunkError, match="waiting for the bridge to report its state") as info:
        start.require_state()
    assert info.value.reason == "no_state"
    _start(initial_state="joint_states").require_state()  # only initial_state bridge waits


def test_the_bridge_trajectory_in_force_is_sampled_a_command_latency_ahead():
    cfg = StitcherConfig(joint_names=NAMES, discrete_joints=("grip",), command_latency_s=0.1)
    start = StartState(Stitcher(cfg), StitcherNodeConfig(initial_state=InitialState.BRIDGE))
    n = 20
    ramp = Trajectory(NAMES, 10.0, np.arange(n) * DT, np.outer(np.arange(n) * DT, [1.0, 0.0, 0.0, 0.0]),
                      np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)), np.zeros((n, 4)))
    assert start.on_active_trajectory(ramp, 10.0) is False  # not ours: nothing acknowledged
    start.require_state()
    q0, v0, _ = start.initial(10.0, _chunk(10.0, np.zeros(4)))
    assert q0[0] == pytest.approx(0.1) and v0[0] == pytest.approx(1.0)
    assert start.before_chunk(10.0) is None  # nothing of ours yet: the bridge's trajectory is the start, silently
    assert start.stitcher.active is start.executing


def test_reports_in_another_joint_order_are_reordered_and_bad_ones_refused():
    start = _start(initial_state="bridge")
    report = _trajectory(10.0, np.array([1.0, 0.1, 0.2, 0.3]), names=("grip", "j0", "j1", "j2"))
    start.on_active_trajectory(report, 10.0)
    np.testing.assert_array_equal(start.executing.positions[0], [0.1, 0.2, 0.3, 1.0])
    with pytest.raises(TrajectoryError, match="future"):
        start.on_active_trajectory(_trajectory(20.0, np.zeros(4)), 10.0)
    with pytest.raises(TrajectoryError):
        start.on_active_trajectory(_trajectory(10.0, np.array([9.0, 0.0, 0.0, 0.0])), 10.0)
    assert start.executing.stamp_s == 10.0  # the good report stays in force


def _bridge_running_ours(clock: Clock) -> tuple[StartState, Trajectory]:
    """initial_state bridge: the bridge holds, we published a trajectory stitched onto its hold, it reports ours."""
    start = _start(initial_state="bridge", bridge_ack_timeout_s=0.2)
    start.on_active_trajectory(_trajectory(clock.now_s, np.zeros(4)), clock.now_s)
    start.before_chunk(clock.now_s)
    ours = _stitch(start, clock.now_s, np.zeros(4))
    start.on_published(s_to_ns(ours.stamp_s), clock.now_s)
    assert start.sent is not None and not start.acked
    assert start.on_active_trajectory(ours, clock.step(0.05)) is True  # the first report of ours
    assert start.acked and start.executing_ours
    assert start.on_active_trajectory(ours, clock.step(0.01)) is False  # already acknowledged
    return start, ours


def test_our_trajectory_reported_by_the_bridge_is_stitched_onto():
    clock = Clock()
    start, ours = _bridge_running_ours(clock)
    assert start.before_chunk(clock.step(DT)) is None and start.stitcher.active is ours


def test_a_trajectory_not_reported_within_the_ack_timeout_counts_as_refused():
    clock = Clock()
    start, ours = _bridge_running_ours(clock)
    second = _stitch(start, clock.step(DT), np.zeros(4))
    start.on_published(s_to_ns(second.stamp_s), clock.now_s)
    hold = _trajectory(clock.now_s + 0.005, np.zeros(4))
    start.on_active_trajectory(hold, clock.step(0.01))  # the bridge executes something else (not ours)
    assert not start.executing_ours
    assert start.before_chunk(clock.step(0.19)) is None  # ours may still be on its way
    assert start.stitcher.active is second
    event = start.before_chunk(clock.step(0.02))
    assert event is not None and event.onto is Anchor.BRIDGE
    assert "did not report our last trajectory within 0.200 s" in event.why
    assert event.log_text == event.report_text == f"stitching onto what the bridge executes: {event.why}"
    assert start.stitcher.active is hold and start.sent is None


def test_a_refused_trajectory_is_replaced_by_the_bridge_one_at_once():
    clock = Clock()
    start, _ = _bridge_running_ours(clock)
    second = _stitch(start, clock.step(DT), np.zeros(4))
    start.on_published(s_to_ns(second.stamp_s), clock.now_s)
    start.on_refused("error -4: jump")
    event = start.before_chunk(clock.step(DT))
    assert event is not None and event.why == "the bridge refused the last trajectory (error -4: jump)"
    assert start.stitcher.active is start.executing


def test_when_ours_ran_and_the_bridge_moved_on_its_trajectory_is_the_start_silently():
    clock = Clock()
    start, _ = _bridge_running_ours(clock)
    watchdog_hold = _trajectory(clock.step(1.0), np.zeros(4))
    start.on_active_trajectory(watchdog_hold, clock.now_s)
    assert start.before_chunk(clock.step(DT)) is None and start.stitcher.active is watchdog_hold


def test_the_ack_timeout_grows_to_twice_the_slowest_recent_report():
    clock = Clock()
    start = _start(initial_state="bridge", bridge_ack_timeout_s=0.2)
    assert start.ack_timeout_s() == 0.2
    for delay_s in [0.05, 0.3] + [0.01] * ACK_HISTORY:
        traj = _trajectory(clock.step(1.0), np.zeros(4))
        start.on_published(s_to_ns(traj.stamp_s), clock.now_s)
        start.on_active_trajectory(traj, clock.step(delay_s))
        if delay_s == 0.3:
            assert start.ack_timeout_s() == pytest.approx(0.6)
    assert start.ack_timeout_s() == 0.2  # the slow report has left the history


def test_a_clock_reset_forgets_everything_of_the_old_world():
    clock = Clock()
    start, _ = _bridge_running_ours(clock)
    start.measure(np.zeros(4), np.zeros(0), clock.now_s)
    start.on_refused("error -1")
    start.reset()
    assert start.stitcher.active is None and start.measured is None and start.executing is None
    assert start.sent is None and not start.acked and not start.executing_ours and start.refused is None
    with pytest.raises(ChunkError, match="waiting for the bridge"):
        start.require_state()


# --- the bridge's bridge_state --------------------------------------------------------------------------------


def test_a_refusal_named_on_bridge_state_re_anchors_at_once_and_no_timeout_applies():
    clock = Clock()
    start, ours = _bridge_running_ours(clock)
    start.on_bridge_state(True, "", None)  # this bridge names its refusals
    second = _stitch(start, clock.step(DT), np.zeros(4))
    start.on_published(s_to_ns(second.stamp_s), clock.now_s)
    # not reported for far longer than the acknowledgement timeout: still on its way, not taken for refused
    assert start.before_chunk(clock.step(1.0)) is None and start.stitcher.active is second
    start.on_bridge_state(True, "", (s_to_ns(ours.stamp_s), "error -1: an older refusal"))  # settled: ignored
    assert start.refused is None
    start.on_bridge_state(True, "", (s_to_ns(second.stamp_s), "error -1: velocity"))
    event = start.before_chunk(clock.step(DT))
    assert event is not None and event.why == "the bridge refused the last trajectory (error -1: velocity)"
    assert start.stitcher.active is start.executing is ours


def test_the_ack_timeout_runs_from_the_oldest_unreported_publication():
    """Chunks every 0.11 s, none reported (a bridge without bridge_state refusing them): the timeout of 0.2 s is
    not restarted by each newer publication."""
    clock = Clock()
    start, ours = _bridge_running_ours(clock)
    for _ in range(2):
        assert start.before_chunk(clock.step(0.11)) is None
        traj = _stitch(start, clock.now_s, np.zeros(4))
        start.on_published(s_to_ns(traj.stamp_s), clock.now_s)
    event = start.before_chunk(clock.step(0.11))  # 0.22 s after the first of them
    assert event is not None and "did not report" in event.why and start.stitcher.active is ours


def test_a_protective_stop_pauses_until_cleared_then_the_bridge_hold_is_the_start():
    clock = Clock()
    start, _ = _bridge_running_ours(clock)
    assert start.on_bridge_state(False, "protective stop: a collision?", None) is True
    with pytest.raises(ChunkError, match="the bridge refuses every command .protective stop") as info:
        start.require_state()
    assert info.value.reason == "paused" and start.before_chunk(clock.step(DT)) is None
    hold = _trajectory(clock.now_s, np.array([0.3, 0.0, 0.0, 0.0]))
    start.on_active_trajectory(hold, clock.step(0.01))  # the stop's hold
    assert start.on_bridge_state(False, "protective stop: a collision?", None) is False  # no change
    assert start.on_bridge_state(True, "", None) is True  # reset by an operator
    start.require_state()
    event = start.before_chunk(clock.step(DT))
    assert event is not None and event.onto is Anchor.BRIDGE and "follows commands again" in event.why
    assert start.stitcher.active is hold and start.sent is None
    assert start.before_chunk(clock.step(DT)) is None  # said once


def test_a_report_of_ours_that_is_not_our_curve_replaces_it():
    """The bridge activated our trajectory later than its stamp from a reference elsewhere (a late join): its
    report is ours by stamp, but not the curve we published; the next chunk stitches onto the report."""
    clock = Clock()
    start, ours = _bridge_running_ours(clock)
    second = _stitch(start, clock.step(DT), np.zeros(4))
    start.on_published(s_to_ns(second.stamp_s), clock.now_s)
    joined = Trajectory(NAMES, second.stamp_s, second.times_s[2:],
                        second.positions[2:] + 0.01, second.velocities[2:], second.accelerations[2:])
    assert start.on_active_trajectory(joined, clock.step(0.01)) is True and start.executing_ours
    assert start.before_chunk(clock.step(DT)) is None and start.stitcher.active is joined
    start2, ours2 = _bridge_running_ours(Clock())
    assert start2.before_chunk(10.0 + 0.08) is None and start2.stitcher.active is ours2  # the same curve: kept
