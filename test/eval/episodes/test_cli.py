"""run-episodes argument parsing and the summary (ROS-free)."""
from __future__ import annotations

import argparse

import pytest

from plan_stack.eval.episodes.cli import parse_seeds, summarize


def test_seed_ranges_and_lists():
    assert parse_seeds("100000-100003") == [100000, 100001, 100002, 100003]
    assert parse_seeds("5") == [5]
    assert parse_seeds("1-2,7") == [1, 2, 7]
    for bad in ("3-1", "", "-1"):
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            parse_seeds(bad)


def test_summary_counts_errors_as_failures_and_sums_violations():
    rows = [dict(success=True, error=None, limit_violations=0, bridge_rejections=0, e2e_latency_p50_ms=100.0,
                 sim_time_s=6.0, bridge_stale=3),
            dict(success=False, error=None, limit_violations=2, bridge_rejections=1, e2e_latency_p50_ms=300.0,
                 sim_time_s=12.0, protective_stop="protective stop: right_wrist_angle measured 0.25 ..."),
            dict(success=False, error="RuntimeError: x", limit_violations=None)]
    s = summarize(rows)
    assert s["episodes"] == 3 and s["errors"] == 1 and s["successes"] == 1
    assert s["success_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert s["limit_violations"] == 2 and s["bridge_rejections"] == 1 and s["protective_stops"] == 1
    assert s["bridge_stale"] == 3  # a row without the field (an arm robot's None) counts 0
    assert s["median_e2e_latency_p50_ms"] == 200.0 and s["median_sim_time_s"] == 9.0
