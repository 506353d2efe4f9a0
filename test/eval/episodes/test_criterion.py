"""Success criteria of closed-loop episodes (ROS-free)."""
from __future__ import annotations

import pytest

from plan_stack.eval.episodes.criterion import ALOHA_MAX_REWARD, EpisodeSignals, done_early, judge


@pytest.mark.parametrize("reward, ok", [(None, False), (0, False), (3, False), (ALOHA_MAX_REWARD, True)])
def test_aloha_needs_the_full_staged_reward(reward, ok):
    v = judge("aloha", EpisodeSignals(sim_time_s=5.0, max_reward=reward))
    assert v.success is ok
    assert ("no ground-truth reward" in v.reason) if reward is None else f"{reward}/4" in v.reason
    assert done_early("aloha", EpisodeSignals(max_reward=reward)) is ok


@pytest.mark.parametrize("flag, ok", [(None, False), (False, False), (True, True)])
def test_franka_needs_the_success_flag(flag, ok):
    assert judge("franka", EpisodeSignals(success_flag=flag)).success is ok
    assert done_early("franka", EpisodeSignals(success_flag=flag)) is ok


def test_drive_needs_the_whole_duration_and_distance_without_a_fault():
    assert judge("drive", EpisodeSignals(sim_time_s=60.0, distance_m=480.0)).success
    short = judge("drive", EpisodeSignals(sim_time_s=59.0, distance_m=470.0))
    assert not short.success and "59.0" in short.reason
    crash = judge("drive", EpisodeSignals(sim_time_s=61.0, safety_faults=1, distance_m=480.0))
    assert not crash.success and "collision" in crash.reason
    # a car that never leaves its start (every plan refused) is safe but does not drive
    parked = judge("drive", EpisodeSignals(sim_time_s=61.0, distance_m=0.0))
    assert not parked.success and "0 m" in parked.reason and "240 m" in parked.reason
    assert not judge("drive", EpisodeSignals(sim_time_s=61.0, distance_m=239.0)).success
    assert judge("drive", EpisodeSignals(sim_time_s=20.0, distance_m=45.0), drive_required_s=10.0).success
    assert not judge("drive", EpisodeSignals(sim_time_s=20.0, distance_m=35.0), drive_required_s=10.0).success
    assert done_early("drive", EpisodeSignals(safety_faults=1)) and not done_early("drive", EpisodeSignals())


def test_unknown_robot_is_refused():
    with pytest.raises(ValueError, match="robot"):
        judge("ur5", EpisodeSignals())


def test_each_robot_gets_its_registry_criterion_and_its_row_fields():
    from plan_stack.eval.episodes.criterion import SafeDriving, StagedReward, SuccessFlag, criterion_of

    assert isinstance(criterion_of("aloha"), StagedReward) and isinstance(criterion_of("franka"), SuccessFlag)
    assert isinstance(criterion_of("drive"), SafeDriving)
    assert criterion_of("aloha").row(EpisodeSignals(max_reward=3)) == {"max_reward": 3}
    assert criterion_of("franka").row(EpisodeSignals(success_flag=True)) == {}
    assert criterion_of("drive").row(EpisodeSignals(safety_faults=2, distance_m=12.345)) == {"distance_m": 12.3}
