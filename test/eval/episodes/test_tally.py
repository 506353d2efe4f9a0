"""An episode's bookkeeping: counts, violations, what the diagnostics say, and the row made of them (no DDS)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from plan_stack.eval.episodes.tally import STATE_POSITION_SLACK, STATE_VELOCITY_FACTOR, EpisodeTally
from plan_stack.trajectory.core import Trajectory, TrajectoryError
from plan_stack.trajectory.limits import Limits

NAMES = ("left_waist", "left_shoulder", "left_gripper")
LIMITS = Limits.for_joints(NAMES, [-1.0, -1.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 5.0], [10.0, 10.0, 40.0])


def _tally(limits=LIMITS, check_joint_states=True, driving=False) -> EpisodeTally:
    return EpisodeTally("aloha", "aloha_sim", "aloha_bridge", limits, check_joint_states, driving)


def _move(duration_s: float) -> Trajectory:
    """The waist from rest at 0 to rest at 0.9 rad in `duration_s` (a cubic: peak 1.35 / duration_s rad/s)."""
    return Trajectory(NAMES, 5.0, np.array([0.0, duration_s]), np.array([[0.0, 0.0, 0.5], [0.9, 0.0, 0.5]]),
                      np.zeros((2, 3)))


def test_the_row_has_the_counts_then_what_they_mean_in_order():
    t = _tally()
    for key in ("observations", "plans", "chunks"):
        t.count(key)
    t.trajectory(lambda: _move(1.0))
    t.reward(4)
    row = t.row()
    assert list(row) == [
        "observations", "plans", "plan_features", "chunks", "trajectories", "bridge_commands", "bridge_rejections",
        "trajectory_limit_violations", "state_limit_violations", "limit_violations", "bridge_accepted",
        "bridge_stale", "joint_travel_rad", "joint_travel_joint", "first_violation", "first_rejection", "safety_faults",
        "first_safety_fault", "protective_stop", "stitcher_rejected", "stitcher_clamped_samples",
        "stitcher_reanchored", "stitcher_failed", "max_reward"]
    assert (row["observations"], row["trajectories"], row["limit_violations"], row["bridge_accepted"]) == (1, 1, 0, 1)
    assert row["stitcher_rejected"] is None and row["max_reward"] == 4  # the criterion's own field last


def test_trajectories_beyond_the_bridge_limits_and_malformed_ones_are_violations():
    t = _tally()
    t.trajectory(lambda: _move(1.0))
    t.trajectory(lambda: _move(0.3))  # peak 4.5 rad/s > 2.0

    def malformed() -> Trajectory:
        raise TrajectoryError("points: a trajectory needs at least one point")

    t.trajectory(malformed)
    row = t.row()
    assert row["trajectories"] == 3 and row["trajectory_limit_violations"] == 2 and row["limit_violations"] == 2
    assert row["first_violation"].startswith("trajectory: ") and "velocity" in row["first_violation"]
    driving = _tally(limits=None, driving=True)
    driving.trajectory(malformed)  # not joint space: counted, never checked
    assert driving.row()["trajectory_limit_violations"] == 0


def test_measured_arm_joints_are_held_to_their_urdf_limits_with_slack():
    t = _tally()
    names = ["left_gripper", "left_shoulder", "left_waist", "other"]  # any order, other joints ignored
    t.joint_state(names, [0.5, 0.0, 0.0, 9.0], [], 1.0)
    t.joint_state(names, [2.0, 0.0, 1.0 + STATE_POSITION_SLACK * 0.9, 9.0], [], 1.1)  # grippers are not checked
    assert t.row()["state_limit_violations"] == 0
    t.joint_state(names, [0.5, -0.2, 1.0 + STATE_POSITION_SLACK * 1.1, 9.0], [], 1.2)
    t.joint_state(names, [0.5, 0.0, 0.0, 9.0], [0.0, 2.0 * STATE_VELOCITY_FACTOR * 1.01, 0.0, 0.0], 1.25)
    row = t.row()
    assert row["state_limit_violations"] == 2
    assert row["first_violation"] == ("joint_states: left_waist at 1.0110 rad, sim time 1.200 s: outside its URDF "
                                      "limits or too fast")
    assert row["joint_travel_joint"] == "left_waist" and row["joint_travel_rad"] == pytest.approx(1.011)


def test_too_fast_joints_name_their_speed_and_unchecked_robots_are_not_checked():
    t = _tally()
    t.joint_state(NAMES, [0.0, 0.0, 0.5], [0.0, 2.3, 0.0], 3.0)
    assert t.row()["first_violation"] == ("joint_states: left_shoulder at 0.0000 rad, 2.300 rad/s (limit 2.000), "
                                          "sim time 3.000 s: outside its URDF limits or too fast")
    t.joint_state(["left_waist", "left_gripper"], [5.0, 5.0], [], 3.1)  # an arm joint missing: not judged
    assert t.row()["state_limit_violations"] == 1
    unchecked = _tally(check_joint_states=False)
    unchecked.joint_state(NAMES, [5.0, 5.0, 5.0], [], 1.0)
    assert unchecked.row()["state_limit_violations"] == 0 and unchecked.row()["joint_travel_joint"] is None


def test_the_bridges_refusals_count_from_its_log_or_its_own_counter_whichever_is_larger():
    t = _tally()
    t.log("/aloha_bridge", "rejected streamed trajectory (-4): jump")
    t.log("/aloha_bridge", "accepted late")
    t.log("/stitcher", "rejected chunk: stale")
    assert t.row()["bridge_rejections"] == 1
    assert t.row()["first_rejection"] == "rejected streamed trajectory (-4): jump"
    t.diagnostic("aloha_bridge: commands", True, "rejected: jump", [("error_code", "-4"), ("refused", "7")])
    t.diagnostic("aloha_bridge: commands", True, "rejected: jump", [("refused", "5")])  # an older report
    for _ in range(3):
        t.trajectory(lambda: _move(1.0))
    row = t.row()
    assert row["bridge_rejections"] == 7 and row["bridge_accepted"] == 3 - 7  # as the row always said


def test_the_driving_bridges_rejected_and_stale_plans_both_count_from_its_plans_diagnostic():
    """drive_bridge drops a plan as `rejected` or `stale` and counts both in its `plans` status; a stale plan is
    logged as `plan stale: ...`, which the `rejected` log count never saw."""
    t = EpisodeTally("drive", "drive_sim", "drive_bridge", None, False, True)
    assert t.row()["bridge_stale"] is None  # not reported (an arm bridge never is)
    t.log("/drive_bridge", "plan stale: plan is 4.100 s old, beyond its 4 s horizon")
    t.log("/drive_bridge", "plan rejected: points: non-finite waypoint 3")
    t.diagnostic("drive_bridge: plans", True, "stale: plan is 4.1 s old", [
        ("outcome", "stale"), ("forwarded", "40"), ("smoothed", "2"), ("rejected", "1"), ("stale", "6"),
        ("no_primitive", "0"), ("no_odometry", "0")])
    t.diagnostic("drive_bridge: plans", False, "forwarded", [("points", "51"), ("rejected", "1"), ("stale", "5")])
    row = t.row()
    assert (row["bridge_stale"], row["bridge_rejections"]) == (6, 1)  # counters only grow: the largest seen
    assert row["first_rejection"] == "plan rejected: points: non-finite waypoint 3"


def test_diagnostics_give_safety_faults_once_each_the_first_stop_and_the_largest_counters():
    t = _tally()
    for message in ("left_arm hit right_arm (96 N)", "left_arm hit right_arm (96 N)", "again (120 N)"):
        t.diagnostic("aloha_sim: safety", True, message, [])
    t.diagnostic("aloha_sim: safety", False, "arms apart", [])
    t.diagnostic("aloha_bridge: protective_stop", True, "x" * 400, [])
    t.diagnostic("aloha_bridge: protective_stop", True, "a later stop", [])
    t.diagnostic("stitcher: input", False, "chunks accepted", [("rejected", "2"), ("reanchored", "1")])
    t.diagnostic("stitcher: solve", False, "mpc (ok)", [("rejected", "1"), ("failed", "n/a")])
    row = t.row()
    assert row["safety_faults"] == 2 and row["first_safety_fault"] == "left_arm hit right_arm (96 N)"
    assert t.signals().safety_faults == 2
    assert row["protective_stop"] == "x" * 300
    assert (row["stitcher_rejected"], row["stitcher_reanchored"], row["stitcher_failed"]) == (2, 1, None)


def test_ground_truth_signals_accumulate():
    t = _tally(limits=None, driving=True)
    t.clock(2.0)
    t.clock(1.0)  # sim time never goes back here
    for xy in ((0.0, 0.0), (3.0, 4.0), (float("nan"), 0.0), (3.0, 10.0)):
        t.odometry(*xy)
    t.success(False)
    t.success(True)
    t.success(False)
    s = t.signals()
    assert s.sim_time_s == 2.0 and s.distance_m == pytest.approx(11.0) and s.success_flag is True
    s.sim_time_s = 99.0  # a copy
    assert t.signals().sim_time_s == 2.0


def test_counts_from_many_threads_add_up():
    t = _tally()
    threads = [threading.Thread(target=lambda: [t.count("chunks") for _ in range(1000)]) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.row()["chunks"] == 4000
