"""Sync policy driven by synthetic stamp sequences (no ROS).

Ground truth is known by construction: frame k of every camera is taken at
tick k (item = (camera, tick)), so a set is correct when all its items share
one tick.
"""
from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_stack.ingest.config import SyncConfig
from plan_stack.ingest.sync import JOINTS, DropReason, Synchronizer, Update

CAMS = ("high", "left", "right")


def make(**kw) -> Synchronizer:
    base = dict(camera_names=CAMS, joint_mode="none", max_spread=0.015, max_age=0.25, queue_size=10)
    base.update(kw)
    return Synchronizer(SyncConfig(**base))


def frames(n_ticks, rates_hz=(30.0, 30.0, 30.0), jitter_s=0.005, drop=0.0, seed=0, t0=100.0):
    """(stamp, camera, tick) events, sorted by stamp (arrival order = stamp order)."""
    rng = random.Random(seed)
    ev = []
    for c, hz in enumerate(rates_hz):
        for k in range(int(n_ticks * hz / min(rates_hz))):
            if rng.random() < drop:
                continue
            ev.append((t0 + k / hz + rng.uniform(-jitter_s, jitter_s), c, k))
    ev.sort()
    return ev


def feed(sync: Synchronizer, events, now=None):
    sets, drops, resets = [], [], []
    for stamp, cam, tick in events:
        up = sync.add_frame(cam, stamp, (cam, tick), now_s=now)
        sets += up.sets
        drops += up.drops
        if up.reset:
            resets.append(up.reset)
    return sets, drops, resets


def ticks(s):
    return {f.item[1] for f in s.frames}


def check_invariants(sets, max_spread):
    """In order, never twice, one frame per camera, spread within bound."""
    used = set()
    prev = None
    for s in sets:
        stamps = [f.stamp_s for f in s.frames]
        assert [f.camera for f in s.frames] == list(range(len(s.frames)))
        assert max(stamps) - min(stamps) <= max_spread + 1e-12
        assert s.spread_s == pytest.approx(max(stamps) - min(stamps))
        for f in s.frames:
            assert (f.camera, f.stamp_s) not in used, "frame used twice"
            used.add((f.camera, f.stamp_s))
        if prev is not None:
            assert all(a.stamp_s < b.stamp_s for a, b in zip(prev.frames, s.frames)), "sets out of order"
            assert s.reference_s > prev.reference_s
        prev = s


def test_perfectly_aligned_stamps_give_one_set_per_tick_at_once():
    sync = make()
    events = frames(20, jitter_s=0.0)
    sets, drops, _ = feed(sync, events)
    assert [ticks(s) for s in sets] == [{k} for k in range(20)]  # the last one too: equal stamps prove it
    assert drops == []


def test_jitter_matches_ground_truth_and_respects_spread():
    sync = make()
    sets, drops, _ = feed(sync, frames(300, jitter_s=0.005, seed=1))
    check_invariants(sets, 0.015)
    assert all(len(ticks(s)) == 1 for s in sets)
    assert len(sets) == 299  # the last set waits for the next frame (no min_interval)
    assert drops == []


def test_drops_never_produce_a_mismatched_set():
    events = frames(400, jitter_s=0.005, drop=0.02, seed=2)
    complete = {k for k in range(400) if sum(1 for e in events if e[2] == k) == 3}
    sync = make()
    sets, drops, _ = feed(sync, events)
    check_invariants(sets, 0.015)
    assert all(len(ticks(s)) == 1 for s in sets)
    got = {next(iter(ticks(s))) for s in sets}
    assert got <= complete and len(complete - got) <= 1  # every complete tick except possibly the last
    # orphaned frames of incomplete ticks are reported, not silently lost
    orphans = sum(1 for e in events if e[2] not in complete and e[2] < max(complete))
    assert sum(d.reason is DropReason.UNMATCHED for d in drops) == orphans


def test_max_spread_is_never_exceeded_even_if_that_means_no_sets():
    sync = make(max_spread=0.002)
    sets, drops, _ = feed(sync, frames(50, jitter_s=0.005, seed=3))
    check_invariants(sets, 0.002)
    assert len(sets) < 50 and any(d.reason is DropReason.UNMATCHED for d in drops)


def test_burst_delivery_out_of_stamp_order_across_streams():
    # camera 1 is delivered in bursts of 5 frames (arrival order != stamp order).
    events = frames(200, jitter_s=0.004, seed=4)
    cam1 = [e for e in events if e[1] == 1]
    others = [e for e in events if e[1] != 1]
    arrival = []
    for b in range(0, len(cam1), 5):
        burst = cam1[b:b + 5]
        last = burst[-1][0]
        arrival += [e for e in others if e[0] <= last and e not in arrival] + burst
    arrival += [e for e in others if e not in arrival]
    sync = make(queue_size=12)
    sets, drops, _ = feed(sync, arrival)
    check_invariants(sets, 0.015)
    assert all(len(ticks(s)) == 1 for s in sets)
    assert len(sets) >= 195


def test_queues_are_bounded_and_bursts_beyond_them_are_reported():
    sync = make(queue_size=4, max_age=10.0, clock_jump_threshold=10.0)
    # camera 2 silent while 0 and 1 send 20 frames each
    sets, drops, _ = feed(sync, [e for e in frames(20, jitter_s=0.0) if e[1] != 2])
    assert sets == [] and max(sync.queued()) <= 4
    assert sum(d.reason is DropReason.QUEUE_FULL for d in drops) == 2 * (20 - 4)


def test_dead_camera_blocks_sets_then_recovery_never_mixes_stale_frames():
    sync = make(max_age=0.2, queue_size=30)
    events = frames(120, jitter_s=0.003, seed=5)
    dead = [e for e in events if not (e[1] == 2 and 30 <= e[2] < 90)]  # camera 2 dead for 2 s
    sets, drops, _ = feed(sync, dead)
    check_invariants(sets, 0.015)
    assert all(len(ticks(s)) == 1 for s in sets)
    got = sorted(next(iter(ticks(s))) for s in sets)
    assert not any(30 <= k < 90 for k in got)
    assert got[:29] == list(range(29)) and 90 in got and got[-1] >= 118
    # while it was dead the others' frames aged out of their bounded queues
    assert sum(d.reason is DropReason.EXPIRED for d in drops) > 0
    assert max(sync.queued()) <= 30


def test_a_lagging_camera_is_never_combined_with_fresh_frames():
    sync = make(max_age=0.1, max_spread=0.05)
    out = []
    for k in range(30):  # camera 2 delivers frames 0.3 s late (older than max_age)
        t = 100.0 + k / 30
        for cam, stamp in ((0, t), (1, t), (2, t - 0.3)):
            up = sync.add_frame(cam, stamp, (cam, k))
            out += up.sets
            assert all(d.reason is DropReason.EXPIRED for d in up.drops if d.stream == "right")
    assert out == []


def test_max_age_is_relative_to_the_newest_frame_not_to_joint_states():
    sync = make(joint_mode="interpolate", joint_names=("j",), max_age=0.1, min_interval=0.02)
    sync.add_frame(0, 1.0)
    sync.add_frame(1, 1.0)
    # joint states far ahead of the images (images lag in transport) do not expire them ...
    for k in range(60):
        assert sync.add_joint_state(0.9 + k * 0.005, ["j"], [0.0]).drops == []
    assert [len(s.frames) for s in sync.add_frame(2, 1.0).sets] == [3]
    # ... a newer frame does
    sync.add_frame(0, 1.05)
    up = sync.add_frame(1, 1.2)
    assert [(d.stream, d.reason) for d in up.drops] == [("high", DropReason.EXPIRED)]


def test_out_of_order_stamps_within_a_stream_are_put_in_place():
    events = frames(100, jitter_s=0.003, seed=6)
    # camera 0 delivers frame k+1 just before frame k, before the other cameras' frame k
    arrival = [e for e in events if e[1] != 0]
    for k in range(100):
        mine = [e for e in events if e[1] == 0 and e[2] == k]
        pos = next(i for i, e in enumerate(arrival) if e[2] == k)
        arrival[pos:pos] = mine
    for k in range(0, 98, 7):
        a = arrival.index(next(e for e in arrival if e[1] == 0 and e[2] == k))
        b = arrival.index(next(e for e in arrival if e[1] == 0 and e[2] == k + 1))
        arrival.insert(a, arrival.pop(b))
    assert arrival != sorted(arrival, key=lambda e: (e[1], e[0]))
    sync = make()
    sets, drops, _ = feed(sync, arrival)
    check_invariants(sets, 0.015)
    assert [ticks(s) for s in sets] == [{k} for k in range(99)]
    assert drops == []


def test_a_frame_overtaken_by_its_successor_costs_at_most_its_set():
    events = frames(100, jitter_s=0.003, seed=6)
    # swap every 7th pair of consecutive frames of camera 0 (frame k arrives a period late)
    idx = [i for i, e in enumerate(events) if e[1] == 0]
    swaps = list(zip(idx[::7], idx[1::7]))
    for a, b in swaps:
        events[a], events[b] = events[b], events[a]
    sync = make()
    sets, drops, _ = feed(sync, events)
    check_invariants(sets, 0.015)
    assert all(len(ticks(s)) == 1 for s in sets)
    assert len(sets) >= 99 - len(swaps)


def test_frames_older_than_the_last_used_one_are_late():
    sync = make()
    feed(sync, frames(5, jitter_s=0.0))
    up = sync.add_frame(0, 100.0 + 1 / 30)  # tick 1 of camera 0 again, after its set went out
    assert [d.reason for d in up.drops] == [DropReason.DUPLICATE]
    up = sync.add_frame(0, 100.0 + 1.5 / 30)  # never seen, but older than what camera 0 last used
    assert [d.reason for d in up.drops] == [DropReason.LATE]


def test_duplicate_stamps_are_dropped_and_no_set_is_emitted_twice():
    events = frames(60, jitter_s=0.004, seed=7)
    doubled = list(itertools.chain.from_iterable((e, e) if i % 3 == 0 else (e,) for i, e in enumerate(events)))
    sync = make()
    sets, drops, _ = feed(sync, doubled)
    check_invariants(sets, 0.015)
    assert sum(d.reason is DropReason.DUPLICATE for d in drops) == len(doubled) - len(events)
    assert len(sets) == 59


def test_clock_jump_backwards_resets_and_never_mixes_time_lines():
    sync = make()
    before = frames(30, jitter_s=0.002, seed=8, t0=500.0)
    after = frames(30, jitter_s=0.002, seed=9, t0=0.5)  # simulator reset: stamps restart near 0
    sets, drops, resets = feed(sync, before + after)
    assert len(resets) == 1 and "jumped back" in resets[0] and sync.resets == 1
    check_invariants([s for s in sets if s.reference_s > 400], 0.015)
    check_invariants([s for s in sets if s.reference_s < 400], 0.015)
    for s in sets:
        stamps = [f.stamp_s for f in s.frames]
        assert max(stamps) < 400 or min(stamps) > 400
        assert len(ticks(s)) == 1
    assert sum(s.reference_s < 400 for s in sets) >= 28
    assert any(d.reason is DropReason.RESET for d in drops)


def test_clock_going_back_resets_and_stamps_far_from_the_clock_are_dropped():
    sync = make()
    assert sync.add_frame(0, 100.0, now_s=100.01).drops == []
    up = sync.add_frame(1, 103.0, now_s=100.02)
    assert [d.reason for d in up.drops] == [DropReason.STAMP_FUTURE]
    up = sync.add_frame(1, 97.0, now_s=100.02)
    assert [d.reason for d in up.drops] == [DropReason.STAMP_PAST]
    up = sync.add_frame(0, 0.2, now_s=0.21)  # the clock itself went back: simulator reset
    assert up.reset is not None and "clock jumped back" in up.reset
    assert sync.resets == 1  # one reset, not a second one for camera 0's own stamp jump
    assert sync.queued() == [1, 0, 0]
    # a clock that has not started (sim time before /clock) checks nothing
    assert sync.add_frame(2, 0.2, now_s=0.0).drops == []


def test_cameras_with_different_rates_are_matched_by_nearest_stamps():
    rates = (30.0, 15.0, 7.5)
    sync = make(max_spread=0.02)
    events = frames(30, rates_hz=rates, jitter_s=0.002, seed=10)
    sets, drops, _ = feed(sync, events)
    check_invariants(sets, 0.02)
    # the slowest camera paces the sets; every 7.5 Hz frame finds its 30/15 Hz partners
    assert len(sets) >= 28
    for s in sets:
        t = [f.stamp_s for f in s.frames]
        # the best partner of the slow frame: nothing in the input is closer
        for cam in (0, 1):
            nearest = min((e[0] for e in events if e[1] == cam), key=lambda x: abs(x - t[2]))
            assert t[cam] == nearest
    # every surplus frame of the faster cameras is accounted for (all but the newest few still queued)
    surplus = sum(1 for e in events if e[1] != 2) - 2 * len(sets)
    assert surplus - sum(sync.queued()[:2]) <= len(drops) <= surplus
    assert {d.reason for d in drops} <= {DropReason.UNMATCHED, DropReason.SKIPPED}


def test_min_interval_publishes_when_complete_instead_of_on_the_next_frame():
    events = frames(10, jitter_s=0.005, seed=11)
    first_set_at = {}
    for mi in (0.0, 0.02):
        sync = make(min_interval=mi)
        for i, (stamp, cam, tick) in enumerate(events):
            if sync.add_frame(cam, stamp, (cam, tick)).sets:
                first_set_at[mi] = i
                break
    assert first_set_at[0.02] == 2  # the 3rd frame completes tick 0 and is provably the best set
    assert first_set_at[0.0] > 2  # without the bound it waits for the next frame of the oldest stream
    sets, _, _ = feed(make(min_interval=(0.02, 0.02, 0.02)), frames(200, jitter_s=0.005, seed=12))
    assert len(sets) == 200 and all(len(ticks(s)) == 1 for s in sets)


def test_approximate_policy_picks_the_smallest_spread_for_the_pivot():
    sync = make(camera_names=("a", "b"), max_spread=0.1)
    # a: 0.00, 0.05 ; b: 0.04 -> (a@0.05, b@0.04) is tighter than (a@0.00, b@0.04)
    out = Update()
    for cam, t in ((0, 0.0), (1, 0.04), (0, 0.05), (0, 0.20), (1, 0.21)):
        up = sync.add_frame(cam, t)
        out.sets += up.sets
        out.drops += up.drops
    assert [tuple(f.stamp_s for f in s.frames) for s in out.sets][0] == (0.05, 0.04)
    assert (out.drops[0].stream, out.drops[0].stamp_s, out.drops[0].reason) == ("a", 0.0, DropReason.SKIPPED)


def test_a_single_camera_passes_every_frame_through():
    sync = make(camera_names=("only",))
    sets, drops, _ = feed(sync, [(t, 0, k) for k, t in enumerate((1.0, 1.1, 1.2))])
    assert [s.frames[0].stamp_s for s in sets] == [1.0, 1.1, 1.2] and drops == []


def test_latest_policy_is_the_naive_baseline():
    sync = make(policy="latest")
    events = frames(200, jitter_s=0.005, drop=0.02, seed=13)
    sets, _, _ = feed(sync, events)
    mismatched = sum(len(ticks(s)) > 1 for s in sets)
    assert mismatched > 0  # a dropped frame pairs the others with the next tick
    good, _, _ = feed(make(), events)
    assert all(len(ticks(s)) == 1 for s in good)


@pytest.mark.parametrize("reference, expect", [("newest", max), ("oldest", min),
                                                ("mean", lambda s: sum(s) / len(s))])
def test_reference_stamp(reference, expect):
    sync = make(reference=reference, max_spread=0.1)
    for cam, t in ((0, 1.00), (1, 1.03), (2, 1.05)):
        up = sync.add_frame(cam, t)
    sets = up.sets + sync.add_frame(0, 1.1).sets
    assert sets[0].reference_s == pytest.approx(expect([1.00, 1.03, 1.05]))


def test_camera_index_is_checked():
    with pytest.raises(IndexError, match="camera index 3"):
        make().add_frame(3, 1.0)
    with pytest.raises(ValueError, match="non-finite stamp"):
        make().add_frame(0, math.nan)


# --- joint states ----------------------------------------------------------------


def joint_sync(**kw):
    return make(joint_mode=kw.pop("joint_mode", "interpolate"), joint_names=("j1", "j2"), **kw)


def test_joint_state_is_interpolated_at_the_reference_stamp():
    sync = joint_sync(reference="mean")
    for k in range(12):  # 200 Hz, positions linear in time
        t = 1.0 + k * 0.005
        sync.add_joint_state(t, ["j2", "j1", "extra"], [2 * t, t, 9.0])
    sets = []
    for cam, t in ((0, 1.011), (1, 1.013), (2, 1.018)):
        sets += sync.add_frame(cam, t).sets
    sets += sync.add_frame(0, 1.05).sets
    (s,) = sets
    assert s.joint.stamp_s == pytest.approx(s.reference_s)
    assert list(s.joint.position) == pytest.approx([s.reference_s, 2 * s.reference_s])


def test_sets_wait_for_a_joint_sample_after_their_reference_then_go_out_in_order():
    sync = joint_sync(reference="newest", min_interval=0.02, joint_tolerance=0.05)
    sync.add_joint_state(0.995, ["j1", "j2"], [0.0, 0.0])
    up = Update()
    for cam in range(3):
        up = sync.add_frame(cam, 1.0)
    assert up.sets == [] and sync.pending == 1
    for cam in range(3):
        sync.add_frame(cam, 1.033)
    assert sync.pending == 2
    up = sync.add_joint_state(1.04, ["j1", "j2"], [1.0, 1.0])
    assert [s.reference_s for s in up.sets] == [1.0, 1.033] and sync.pending == 0
    assert up.sets[0].joint.position[0] == pytest.approx(0.005 / 0.045)


def test_nearest_mode_and_tolerance():
    sync = joint_sync(joint_mode="nearest", joint_tolerance=0.004, min_interval=0.02)
    sync.add_joint_state(0.990, ["j1", "j2"], [1.0, 1.0])
    sync.add_joint_state(1.003, ["j1", "j2"], [2.0, 2.0])
    sets = []
    for cam in range(3):
        sets += sync.add_frame(cam, 1.0).sets
    assert list(sets[0].joint.position) == [2.0, 2.0]
    # a joint gap around the next set's reference: the set is dropped, with the reason
    sync.add_joint_state(1.1, ["j1", "j2"], [3.0, 3.0])
    drops = []
    for cam in range(3):
        up = sync.add_frame(cam, 1.05)
        drops += up.drops
        assert up.sets == []
    assert {d.reason for d in drops} == {DropReason.NO_JOINT_STATE} and "ms away" in drops[0].detail


def test_interpolation_gap_beyond_tolerance_drops_the_set():
    sync = joint_sync(min_interval=0.02, joint_tolerance=0.01)
    sync.add_joint_state(0.95, ["j1", "j2"], [0.0, 0.0])
    sync.add_joint_state(1.05, ["j1", "j2"], [1.0, 1.0])
    drops = []
    for cam in range(3):
        drops += sync.add_frame(cam, 1.0).drops
    assert len(drops) == 3 and all(d.reason is DropReason.NO_JOINT_STATE for d in drops)


def test_sets_stuck_waiting_for_joints_expire():
    sync = joint_sync(min_interval=0.02, max_age=0.1)
    sync.add_joint_state(0.99, ["j1", "j2"], [0.0, 0.0])
    for k in range(10):  # joint states stop; frames keep coming
        for cam in range(3):
            sync.add_frame(cam, 1.0 + k / 30)
    assert sync.pending <= 4  # only the sets within max_age of the newest frame wait


@pytest.mark.parametrize("names, pos, vel, match", [
    (["j1"], [0.0], [], r"missing joints \['j2'\]"),
    (["j1", "j2"], [0.0, math.nan], [], r"non-finite position for \['j2'\]"),
    (["j1", "j2"], [0.0, math.inf], [], r"non-finite position"),
    (["j1", "j2"], [0.0, 0.0], [0.0, math.nan], r"non-finite velocity"),
    (["j1", "j2"], [0.0], [], r"2 names but 1 positions"),
    (["j1", "j2"], [0.0, 0.0], [0.0], r"2 names but 1 velocities"),
])
def test_bad_joint_states_raise_and_change_nothing(names, pos, vel, match):
    from plan_stack.ingest.errors import JointStateError
    sync = joint_sync()
    with pytest.raises(JointStateError, match=match):
        sync.add_joint_state(1.0, names, pos, vel)
    assert len(sync.joints) == 0


def test_joint_stream_clock_checks():
    sync = joint_sync()
    up = sync.add_joint_state(50.0, ["j1", "j2"], [0, 0], now_s=10.0)
    assert [(d.stream, d.reason) for d in up.drops] == [(JOINTS, DropReason.STAMP_FUTURE)]
    sync.add_joint_state(10.0, ["j1", "j2"], [0, 0])
    assert sync.add_joint_state(10.0, ["j1", "j2"], [0, 0]).drops[0].reason is DropReason.DUPLICATE
    up = sync.add_joint_state(2.0, ["j1", "j2"], [0, 0])
    assert up.reset is not None and "joint_states stamp jumped back" in up.reset


# --- properties ------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    jitter=st.floats(0.0, 0.012),
    drop=st.floats(0.0, 0.2),
    shuffle=st.integers(0, 3),
    queue_size=st.integers(2, 12),
    min_interval=st.sampled_from([0.0, 0.015]),
)
def test_invariants_hold_for_arbitrary_arrival_orders(seed, jitter, drop, shuffle, queue_size, min_interval):
    rng = random.Random(seed)
    events = frames(40, rates_hz=(30.0, rng.choice([30.0, 15.0]), 10.0), jitter_s=jitter, drop=drop, seed=seed)
    for i in range(len(events) - 1):  # local reordering of arrivals
        if rng.random() < 0.1 * shuffle:
            events[i], events[i + 1] = events[i + 1], events[i]
    sync = make(queue_size=queue_size, max_spread=0.02, max_age=0.15, min_interval=min_interval)
    newest = -math.inf
    sets = []
    for stamp, cam, tick in events:
        newest = max(newest, stamp)
        up = sync.add_frame(cam, stamp, (cam, tick))
        for s in up.sets:  # never a frame older than max_age relative to the newest frame
            assert min(f.stamp_s for f in s.frames) >= newest - 0.15
        sets += up.sets
        assert max(sync.queued()) <= queue_size
    check_invariants(sets, 0.02)
