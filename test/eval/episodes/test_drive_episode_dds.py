"""A short closed-loop driving episode over DDS through config/drive.yaml: drive_sim -> ingest -> planner ->
drive_bridge -> drive_sim (its follower), with the shipped models/drive, each node in its own process and
ROS domain (`eval.episodes.episode`), paced to the stack exactly as `run-episodes` paces it.

Tiny budget: 3 s of sim time, held-out seed. Checks that the simulator's clock runs under pacing (the graph
has no chunker: a chunk gate would hold sim time at 0 for ever), that observations become plans and
plans become drive trajectories, timed end to end. Safe driving is not asserted (a measurement,
docs/results.md).
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_drive_stack_turns_observations_into_drive_trajectories(tmp_path):
    from plan_stack.eval.episodes.episode import EpisodeOptions, run_episode

    row = run_episode(EpisodeOptions("drive", 100000, real_time_factor=0.5, time_limit_s=3.0,
                                     pace_chunk_lead_s=0.6, pace_plan_lead_s=1.0, wall_timeout_s=240.0,
                                     log_dir=str(tmp_path / "logs")))
    assert row["error"] is None, row
    assert row["sim_time_s"] >= 3.0 or row["reason"].endswith("report(s)"), row
    assert row["plans"] >= 1 and row["trajectories"] >= 1, row
    assert row["chunks"] == 0
    assert row["bridge_latency_p50_ms"] is not None and row["e2e_latency_p50_ms"] is not None, row
    assert 0 < row["bridge_latency_p50_ms"] < row["e2e_latency_p50_ms"]
