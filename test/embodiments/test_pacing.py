"""StackPacer: sim time held within a lead of the stack's answers (ROS-free)."""
from __future__ import annotations

import threading

import pytest

from plan_stack.embodiments.pacing import StackPacer


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.05  # every look at the clock is 50 ms later
        return self.t


def test_limit_is_the_slowest_gate():
    p = StackPacer(["chunk", "plan"], [0.6, 1.0], timeout_s=10.0)
    assert p.limit_s() == pytest.approx(0.6)  # nothing answered yet: wait at the lead
    p.ack("chunk", 2.0)
    assert p.limit_s() == pytest.approx(1.0)
    p.ack("plan", 2.0)
    assert p.limit_s() == pytest.approx(2.6)
    p.ack("chunk", 1.0)  # an older answer never moves the limit back
    assert p.limit_s() == pytest.approx(2.6)


def test_wait_returns_on_an_answer_from_another_thread():
    p = StackPacer(["chunk"], [0.5], timeout_s=30.0)
    threading.Timer(0.05, p.ack, args=("chunk", 1.0)).start()
    assert p.wait(0.7, running=lambda: True, poll_s=0.01)
    assert p.bypassed == ()


def test_silent_gate_is_bypassed_until_it_answers_again():
    p = StackPacer(["chunk", "plan"], [0.5, 1.0], timeout_s=0.5, clock=FakeClock())
    p.ack("chunk", 5.0)
    assert p.wait(2.0, running=lambda: True, poll_s=0.0)  # plan silent: bypassed after the timeout
    assert p.bypassed == ("plan",)
    assert p.limit_s() == pytest.approx(5.5)
    p.ack("plan", 5.0)
    assert p.bypassed == () and p.limit_s() == pytest.approx(5.5)


def test_stopping_ends_a_wait():
    p = StackPacer(["chunk"], [0.5], timeout_s=100.0)
    assert not p.wait(1.0, running=lambda: False, poll_s=0.0)


def test_bad_arguments():
    with pytest.raises(ValueError):
        StackPacer(["a"], [0.5, 1.0], 1.0)
    with pytest.raises(ValueError):
        StackPacer(["a"], [0.0], 1.0)
