"""Stage latencies from arrival times (ROS-free)."""
from __future__ import annotations

import pytest

from plan_stack.eval.episodes.latency import LatencyLog, percentiles


def test_stages_are_measured_per_stamp_and_chained():
    log = LatencyLog()
    s1, s2 = 1_000_000_000, 1_100_000_000
    log.camera(s1, 10.000)
    log.observation(s1, 10.050)          # ingest 50 ms
    log.plan(s1, 11.050)                 # planner 1000 ms
    log.chunk(s1, 10.150)                # chunker 100 ms (observation -> chunk)
    log.trajectory(10.170)               # stitcher 20 ms; end to end 170 ms
    log.trajectory(10.300)               # no chunk pending: not a sample
    log.camera(s2, 10.100)
    log.observation(s2, 10.140)
    log.chunk(s2, 10.240)
    log.trajectory(10.300)
    out = log.summary()
    assert out["ingest_latency_p50_ms"] == pytest.approx(45.0)
    assert out["planner_latency_p50_ms"] == pytest.approx(1000.0)
    assert out["chunker_latency_p50_ms"] == pytest.approx(100.0)
    assert len(log.samples["stitcher"]) == 2 and len(log.samples["end_to_end"]) == 2
    assert out["e2e_latency_p50_ms"] == pytest.approx(185.0)
    assert log.plan_age_s == pytest.approx([0.0, 0.1])  # the chunk of s2 used the plan of s1


def test_a_trajectory_stamped_with_its_plan_is_timed_from_the_plan():
    # driving: drive_bridge answers each plan with a DriveTrajectory carrying the plan's stamp
    log = LatencyLog()
    s1 = 2_000_000_000
    log.camera(s1, 20.000)
    log.observation(s1, 20.010)
    log.plan(s1, 20.210)
    log.stamped_trajectory(s1, 20.225)
    log.stamped_trajectory(s1 + 1, 20.5)  # no plan or camera of that stamp: no sample
    out = log.summary()
    assert out["bridge_latency_p50_ms"] == pytest.approx(15.0)
    assert out["e2e_latency_p50_ms"] == pytest.approx(225.0)
    assert out["stitcher_latency_p50_ms"] is None


def test_nothing_measured_is_none_not_zero():
    out = LatencyLog().summary()
    assert set(out.values()) == {None}
    assert percentiles([]) == [None, None]


def test_camera_without_observation_and_unknown_stamps_are_skipped():
    log = LatencyLog(keep=2)
    for i in range(5):
        log.camera(i, float(i))
    log.observation(0, 9.0)  # evicted camera stamp: no sample
    log.observation(4, 4.5)
    assert log.samples["ingest"] == [pytest.approx(500.0)]
