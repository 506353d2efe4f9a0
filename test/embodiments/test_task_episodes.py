"""TaskEpisodes: when a simulator's task ends, its outcome and the next scene's seed (no ROS)."""
from __future__ import annotations

import pytest

from plan_stack.embodiments.task_episodes import STALE_COMMAND_LEAD_S, TaskEnd, TaskEpisodes


def test_a_task_ends_once_when_solved_with_its_outcome():
    e = TaskEpisodes("transfer_cube", seed=7, max_reward=4, time_limit_s=20.0)
    assert e.update(1.0, 2, TaskEnd.RESET) is None
    out = e.update(3.5, 4, TaskEnd.RESET)
    assert out is not None and (out.episode, out.seed, out.success, out.reason) == (1, 7, True, "success")
    assert (out.max_reward, out.end_s, out.duration_s, out.next, out.next_seed) == (4, 3.5, 3.5, TaskEnd.RESET, 8)
    assert "task 1 (transfer_cube, seed 7): solved in 3.50 s" in out.text() and "resetting to seed 8" in out.text()
    assert e.update(3.6, 4, TaskEnd.RESET) is None  # said once: the scene's task has ended


def test_the_time_limit_ends_an_unsolved_task_with_its_best_reward():
    e = TaskEpisodes("transfer_cube", seed=0, max_reward=4, time_limit_s=2.0)
    e.update(0.5, 3, TaskEnd.HOLD)
    assert e.update(1.98, 1, TaskEnd.HOLD) is None
    out = e.update(2.0, 0, TaskEnd.HOLD)
    assert out is not None and (out.success, out.reason, out.max_reward) == (False, "time_limit", 3)
    assert "not solved (time limit)" in out.text() and "holding the end state" in out.text()


def test_no_time_limit_means_only_success_ends_the_task():
    e = TaskEpisodes("insertion", seed=0, max_reward=4)
    assert e.update(1e6, 3, TaskEnd.CONTINUE) is None


def test_the_next_scene_takes_the_next_seed_and_starts_a_new_task():
    e = TaskEpisodes("transfer_cube", seed=7, max_reward=4, time_limit_s=5.0)
    e.update(5.0, 2, TaskEnd.RESET)
    assert e.next_scene() == 8
    assert e.update(1.0, 0, TaskEnd.RESET) is None  # a new task: the old best reward is gone
    out = e.update(5.0, 0, TaskEnd.RESET)
    assert out is not None and (out.episode, out.seed, out.max_reward, out.next_seed) == (2, 8, 0, 9)


def test_commands_stamped_in_the_old_scene_s_time_are_told_apart_after_a_reset():
    e = TaskEpisodes("transfer_cube", seed=0, max_reward=4, time_limit_s=12.0)
    assert not e.from_before_reset(11.5, 0.1)  # no reset yet: a command due ahead is the caller's business
    e.update(12.0, 0, TaskEnd.RESET)
    e.next_scene()
    lead = STALE_COMMAND_LEAD_S
    assert e.from_before_reset(11.9, 0.05)  # sent for the old scene's 11.9 s, arrived after the reset
    assert e.from_before_reset(12.0 + lead, 0.05)
    assert not e.from_before_reset(0.15, 0.05)  # a command for the new scene, due with a normal lead
    assert not e.from_before_reset(12.0 + lead + 0.1, 0.05)  # later than the old scene ever was: a wrong stamp
    assert not e.from_before_reset(11.9, 11.0)  # the new scene got there: not to be told apart by its stamp


@pytest.mark.parametrize("max_reward, limit", [(0, 1.0), (4, -1.0)])
def test_bad_arguments_are_refused(max_reward, limit):
    with pytest.raises(ValueError):
        TaskEpisodes("transfer_cube", 0, max_reward, limit)
