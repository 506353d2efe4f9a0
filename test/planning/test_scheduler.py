"""Which plan the planner makes next: the newest observation, the replan period, requests first (no DDS)."""
from __future__ import annotations

import re
import threading

import pytest

from plan_stack.planning.runtime import FrameInput
from plan_stack.planning.scheduler import Job, Offered, PlanScheduler


class Clock:
    """The node clock (s), stepped by the test."""

    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _frame(stamp_s: float) -> FrameInput:
    return FrameInput(stamp_s, [], [])


def _scheduler(clock: Clock, replan_period_s: float = 0.0, max_age_s: float = 1.0) -> PlanScheduler:
    return PlanScheduler(replan_period_s, max_age_s, clock)


def test_the_newest_observation_replaces_one_still_waiting():
    clock = Clock()
    s = _scheduler(clock)
    assert s.offer(_frame(99.9), "stamp a", "pick").outcome is Offered.QUEUED
    assert s.offer(_frame(100.0), "stamp b", "place").outcome is Offered.SUPERSEDED
    job = s.next_job()
    assert (job.frame.stamp_s, job.stamp, job.instruction, job.request) == (100.0, "stamp b", "place", False)
    assert s.offer(_frame(100.0), "stamp c", "").outcome is Offered.QUEUED  # nothing waits any more


@pytest.mark.parametrize("stamp_s, outcome, message", [
    (98.5, Offered.STALE, r"stale observation: 1.500 s old \(max_observation_age_s 1.0\)"),
    (101.5, Offered.FUTURE, r"observation stamped 1.500 s ahead of the node clock \(max_observation_age_s 1.0\)"),
])
def test_observations_too_old_or_from_the_future_are_never_planned_from(stamp_s, outcome, message):
    s = _scheduler(Clock())
    offer = s.offer(_frame(stamp_s), "stamp", "")
    assert offer.outcome is outcome
    assert re.fullmatch(message, offer.message)
    assert s.request("", ()) == "no observation received yet"  # not the newest either


def test_within_the_replan_period_the_plan_in_force_stands():
    clock = Clock()
    s = _scheduler(clock, replan_period_s=0.5)
    s.offer(_frame(100.0), "t0", "")
    assert s.begin(s.next_job()) == ""  # planned from 100.0
    clock.now_s = 100.4
    assert s.offer(_frame(100.4), "t1", "").outcome is Offered.RECENT
    clock.now_s = 100.5
    assert s.offer(_frame(100.5), "t2", "").outcome is Offered.QUEUED  # the period has passed
    assert s.next_job().stamp == "t2"


def test_an_observation_stamped_before_the_one_planned_last_is_a_reset_and_is_planned_from():
    clock = Clock()
    s = _scheduler(clock, replan_period_s=10.0)
    s.offer(_frame(100.0), "t0", "")
    s.begin(s.next_job())
    assert s.offer(_frame(99.5), "after a reset", "").outcome is Offered.QUEUED


def test_a_recent_observation_is_still_the_newest_for_requests():
    clock = Clock()
    s = _scheduler(clock, replan_period_s=1.0)
    s.offer(_frame(100.0), "t0", "pick the cube")
    s.begin(s.next_job())
    clock.now_s = 100.2
    assert s.offer(_frame(100.2), "t1", "place it").outcome is Offered.RECENT
    job = s.request("", ("robot_3d",))
    assert isinstance(job, Job) and (job.stamp, job.instruction, job.kinds, job.request) == (
        "t1", "place it", ("robot_3d",), True)


def test_a_request_is_taken_before_a_waiting_observation_and_one_at_a_time():
    clock = Clock()
    s = _scheduler(clock)
    s.offer(_frame(100.0), "obs", "pick")
    request = s.request("stack the cubes", ())
    assert isinstance(request, Job) and request.instruction == "stack the cubes" and s.busy
    assert s.request("again", ()) == "another request is being planned"
    assert s.next_job() is request
    assert s.busy  # while it is being planned
    s.finish(request)
    assert not s.busy and request.done.is_set()
    assert s.next_job().stamp == "obs"  # the observation still waited


def test_a_request_needs_a_fresh_observation():
    clock = Clock()
    s = _scheduler(clock)
    s.offer(_frame(100.0), "obs", "")
    clock.now_s = 101.25
    assert s.request("", ()) == "newest observation is 1.250 s old (max_observation_age_s 1.0)"


def test_an_observation_that_aged_while_it_waited_is_skipped_but_a_request_is_not():
    clock = Clock()
    s = _scheduler(clock, replan_period_s=5.0)
    s.offer(_frame(100.0), "obs", "")
    job = s.next_job()
    clock.now_s = 101.5
    assert s.begin(job) == ("stale observation: 1.500 s old when the planner was free (max_observation_age_s "
                            "1.0)")
    s.finish(job)
    clock.now_s = 100.9
    s.offer(_frame(100.5), "fresh", "")
    request = s.request("", ())
    assert s.next_job() is request
    clock.now_s = 102.0
    assert s.begin(request) == ""  # a request plans on what it was given
    # the stale observation was never planned from: the period counts from the request's frame
    clock.now_s = 101.0
    assert s.offer(_frame(101.0), "next", "").outcome is Offered.RECENT


def test_the_worker_waits_for_an_observation_from_another_thread():
    s = _scheduler(Clock())
    taken: list[Job | None] = []
    worker = threading.Thread(target=lambda: taken.append(s.next_job(poll_s=0.01)))
    worker.start()
    s.offer(_frame(100.0), "obs", "")
    worker.join(timeout=5.0)
    assert not worker.is_alive() and taken[0] is not None and taken[0].stamp == "obs"


def test_closing_wakes_the_worker_and_cancels_the_jobs_waiting():
    s = _scheduler(Clock())
    taken: list[Job | None] = []
    worker = threading.Thread(target=lambda: taken.append(s.next_job()))
    worker.start()
    s.close()
    worker.join(timeout=5.0)
    assert not worker.is_alive() and taken == [None] and s.stopping
    s = _scheduler(Clock())
    s.offer(_frame(100.0), "obs", "")
    request = s.request("", ())
    s.close()
    s.close()  # idempotent
    assert request.cancel.is_set() and s.next_job() is None


def test_a_request_waits_for_its_plan_and_hands_on_each_new_text_in_order():
    job = Job(_frame(100.0), "obs", "", request=True)
    said: list[str] = []

    def worker() -> None:
        for text in ("pick", "pick", "pick up", "pick up the cube"):
            job.add_text(text)
        job.done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    job.wait(lambda: False, said.append, poll_s=0.005)
    thread.join()
    assert said == ["pick", "pick up", "pick up the cube"] and not job.cancel.is_set()


def test_a_request_whose_waiter_gives_up_is_cancelled():
    job = Job(_frame(100.0), "obs", "", request=True)

    def worker() -> None:  # plans until cancelled, as PlannerRuntime.plan's should_stop does
        assert job.cancel.wait(5.0)
        job.done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    polls = iter(range(1000))
    job.wait(lambda: next(polls) >= 3, lambda text: None, poll_s=0.005)
    thread.join()
    assert job.cancel.is_set()


def test_a_clock_reset_drops_the_observations_held_and_cancels_the_plan_from_one():
    """A simulator reset: the plan being made from an observation of the old world is cancelled, the one waiting
    and the newest are dropped (a request has none to plan from); a plan_request goal in progress runs on."""
    clock = Clock()
    s = _scheduler(clock, replan_period_s=0.5)
    s.offer(_frame(100.0), "a", "")
    running = s.next_job()
    assert s.begin(running) == ""
    s.offer(_frame(100.1), "b", "")  # waiting behind the plan in progress
    s.clock_reset()
    assert running.cancel.is_set()
    s.finish(running)
    assert s.request("", ()) == "no observation received yet"
    clock.now_s = 1.0
    assert s.offer(_frame(1.0), "c", "").outcome is Offered.QUEUED  # the new world's first observation
    job = s.next_job()
    assert job.stamp == "c"  # "b" was dropped
    s.begin(job)
    s.finish(job)
    request = s.request("pick", ())
    assert isinstance(request, Job)
    taken = s.next_job()
    assert taken is request
    s.clock_reset()
    assert not request.cancel.is_set()  # a goal's caller asked for this plan
