"""Synthetic rig schedule: ground truth recoverable from stamps, seeded drops."""
from __future__ import annotations

import pytest

from plan_stack.ingest.synthetic import joint_positions, schedule, tick_of


def test_schedule_is_sorted_and_ticks_are_recoverable_from_stamps():
    t0 = 1_700_000_000.0
    ev = schedule(3, 30.0, 2.0, t0, jitter_s=0.005, drop=0.1, joint_rate_hz=200.0, bad=[(1, 5)], seed=4)
    assert [e.stamp_s for e in ev] == sorted(e.stamp_s for e in ev)
    frames = [e for e in ev if e.kind == "frame"]
    assert all(tick_of(e.stamp_s, 30.0) == tick_of(t0 + e.tick / 30.0, 30.0) for e in frames)
    assert 0.8 * 180 < len(frames) < 180 and sum(e.kind == "joints" for e in ev) == 400
    assert [(e.camera, e.tick) for e in frames if e.bad] == [(1, 5)]  # a requested bad frame is never dropped
    again = schedule(3, 30.0, 2.0, t0, jitter_s=0.005, drop=0.1, bad=[(1, 5)], seed=4)
    assert again == frames  # seeded: the same frames every run


def test_jitter_must_stay_below_half_a_period():
    with pytest.raises(ValueError, match="half a period"):
        schedule(1, 30.0, 1.0, 0.0, jitter_s=0.02)


def test_joint_signal():
    assert list(joint_positions(0.0, 2)) == pytest.approx([0.0, 0.8414709848])
