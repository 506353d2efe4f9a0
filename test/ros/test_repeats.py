"""RepeatFilter: a new message at once, its repeats counted and summarised per period (no ROS)."""
from __future__ import annotations

import pytest

from plan_stack.ros.repeats import RepeatFilter


def test_repeats_are_counted_and_said_once_per_period(stepped_clock):
    clock = stepped_clock
    f = RepeatFilter(period_s=10.0, clock=clock)
    assert f("refused: stop") == "refused: stop"
    for _ in range(5):
        clock.t += 1.0
        assert f("refused: stop") is None
    clock.t += 5.0  # 10 s after it was said: said again with the count of what was held back
    assert f("refused: stop") == "refused: stop (again: 6 time(s) in the last 10 s)"
    clock.t += 1.0
    assert f("refused: stop") is None


def test_a_different_message_is_said_at_once_with_the_count_of_the_one_before(stepped_clock):
    clock = stepped_clock
    f = RepeatFilter(period_s=10.0, clock=clock)
    f("a")
    assert f("a") is None and f("a") is None
    assert f("b") == "b (the message before repeated 2 more time(s))"
    assert f("a") == "a"  # not a repeat any more: the last message was "b"


def test_reset_makes_the_next_occurrence_news(stepped_clock):
    clock = stepped_clock
    f = RepeatFilter(period_s=10.0, clock=clock)
    f("a")
    assert f("a") is None
    f.reset()
    assert f("a") == "a"


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period_s"):
        RepeatFilter(period_s=0.0)


def test_a_key_makes_messages_with_changing_figures_one_repeat(stepped_clock):
    """A refusal that carries an age: the same reason with a new figure each time is a repeat, said with its
    first figure and then counted; another key is news."""
    clock = stepped_clock
    f = RepeatFilter(period_s=10.0, clock=clock)
    assert f("plan features 2.1 s old", key="old") == "plan features 2.1 s old"
    clock.t += 1.0
    assert f("plan features 2.3 s old", key="old") is None
    clock.t += 9.0
    assert f("plan features 2.9 s old", key="old") == "plan features 2.9 s old (again: 2 time(s) in the last 10 s)"
    assert f("no joint state", key="joints") == "no joint state"
