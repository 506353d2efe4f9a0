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


def test_real_time_pace_sleeps_ahead_catches_up_a_little_and_never_bursts(stepped_clock):
    from plan_stack.embodiments.pacing import RealTimePace

    wall = stepped_clock
    pace = RealTimePace(1.0, max_catch_up_s=0.05, sim_s=0.0, clock=wall)
    wall.t += 0.001
    assert pace.after_step(0.002) == pytest.approx(0.001)  # a 2 ms step took 1 ms: sleep the rest
    wall.t += 0.031  # a 30 ms render: 28 ms behind, within the catch-up
    assert pace.after_step(0.004) == 0.0
    assert pace.after_step(0.030) == 0.0  # still catching up (no sleep) ...
    assert pace.after_step(0.034) == pytest.approx(0.002)  # ... and caught up on the original pace
    wall.t += 0.4  # a 0.4 s stall (loaded machine): behind by more than the catch-up
    assert pace.after_step(0.036) == 0.0
    # re-anchored at the stall: the next step is paced from here, no 0.4 s burst of sim time
    wall.t += 0.001
    assert pace.after_step(0.038) == pytest.approx(0.001)


def test_real_time_pace_at_half_speed_and_as_fast_as_possible(stepped_clock):
    from plan_stack.embodiments.pacing import RealTimePace

    wall = stepped_clock
    half = RealTimePace(0.5, max_catch_up_s=0.05, sim_s=1.0, clock=wall)
    assert half.after_step(1.002) == pytest.approx(0.004)  # 2 ms of sim time = 4 ms of wall time
    fast = RealTimePace(0.0, max_catch_up_s=0.05, sim_s=1.0, clock=wall)
    assert fast.after_step(5.0) == 0.0
    half.reanchor(3.0, real_time_factor=1.0)
    assert half.rtf == 1.0 and half.after_step(3.010) == pytest.approx(0.010)
    with pytest.raises(ValueError):
        RealTimePace(-1.0, 0.05, 0.0)
