"""The chunker's plan features: only the newest usable ones, and only for observations near their stamp."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest

from plan_stack.actions.plan_slot import NoPlan, PlanSlot

W = 4


def _features(tokens: int = 3) -> np.ndarray:
    return np.arange(tokens * W, dtype=float)


def test_usable_features_are_kept_in_their_shape_for_observations_near_their_stamp():
    slot = PlanSlot(W, max_plan_age_s=2.0)
    assert slot.problem == "no plan features received yet"
    # none yet (the planner still loading): a wait, no fault
    assert slot.take(10.0) == NoPlan("no plan features received yet", waiting=True)
    assert slot.offer([3, W], _features(), 10.0, now_s=10.5) == ""
    assert slot.problem == ""
    features = slot.take(11.5)
    assert features.shape == (3, W) and features.dtype == np.float32
    np.testing.assert_array_equal(features.reshape(-1), _features())
    stamp_s, held = slot.plan
    assert stamp_s == 10.0 and held is features


@pytest.mark.parametrize("t_query_s, reason, age_s", [
    (12.5, "plan features are 2.500 s old at the observation (max_plan_age_s 2.0)", 2.5),
    (7.5, "plan features are stamped 2.500 s after the observation (max_plan_age_s 2.0)", -2.5),
])
def test_features_too_far_from_the_observation_are_not_used_for_it(t_query_s, reason, age_s):
    slot = PlanSlot(W, max_plan_age_s=2.0)
    slot.offer([3, W], _features(), 10.0, now_s=10.0)
    refusal = slot.take(t_query_s)
    assert isinstance(refusal, NoPlan) and refusal.reason == reason and refusal.age_s == pytest.approx(age_s)
    assert slot.plan is not None  # still the newest: a later observation may use them


@pytest.mark.parametrize("shape, data, stamp_s, match", [
    ([3, W + 1], np.zeros(3 * (W + 1)), 10.0, r"plan features of shape \[3, 5\] with 15 values; expected "
                                               r"\[tokens >= 1, 4\]"),
    ([0, W], np.zeros(0), 10.0, r"shape \[0, 4\]"),
    ([3, W], np.zeros(5), 10.0, r"shape \[3, 4\] with 5 values"),
    ([3 * W], np.zeros(3 * W), 10.0, r"shape \[12\]"),
    ([3, W], np.where(np.arange(3 * W) == 5, np.nan, 0.0), 10.0, "non-finite values"),
    ([3, W], np.zeros(3 * W), 13.0, r"stamped 3.000 s ahead of the node clock \(max_plan_age_s 2.0\)"),
])
def test_unusable_features_are_refused_and_empty_the_slot(shape, data, stamp_s, match):
    slot = PlanSlot(W, max_plan_age_s=2.0)
    slot.offer([3, W], _features(), 9.0, now_s=10.0)
    reason = slot.offer(shape, data, stamp_s, now_s=10.0)
    assert reason and re.search(match, reason)
    assert slot.plan is None and slot.problem == reason
    assert slot.take(10.0) == NoPlan(reason)  # no chunk from the older features meanwhile, and a fault (no wait)


def test_a_drop_says_why_the_slot_is_empty():
    slot = PlanSlot(W, max_plan_age_s=2.0)
    slot.offer([3, W], _features(), 10.0, now_s=10.0)
    slot.drop("clock jumped back: plan features from before the reset dropped", waiting=True)
    assert slot.take(10.0) == NoPlan("clock jumped back: plan features from before the reset dropped", waiting=True)
    slot.offer([3, W], _features(), 10.0, now_s=10.0)
    slot.drop("refused")
    assert slot.take(10.0) == NoPlan("refused")


def test_offers_and_takes_from_two_threads_always_see_whole_features():
    slot = PlanSlot(W, max_plan_age_s=2.0)
    done = threading.Event()

    def planner() -> None:
        for k in range(500):
            slot.offer([2, W], np.full(2 * W, float(k)), 10.0, now_s=10.0)
        done.set()

    thread = threading.Thread(target=planner)
    thread.start()
    while not done.is_set():
        features = slot.take(10.0)
        if not isinstance(features, NoPlan):
            assert features.shape == (2, W) and np.all(features == features[0, 0])
    thread.join()
