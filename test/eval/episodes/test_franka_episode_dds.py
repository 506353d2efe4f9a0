"""A short closed-loop Franka episode over DDS through config/franka.yaml: franka_sim -> ingest -> planner ->
chunker -> stitcher -> franka_bridge -> franka_sim, with the shipped models/franka (planner and action head),
each node in its own process and ROS domain (`eval.episodes.episode`).

Tiny budget: 2 s of sim time, paced to the stack, held-out seed. Checks that an observation becomes a plan,
plan features, a chunk and a trajectory that franka_bridge accepts and sends to the arm controller, that no
published trajectory breaks the bridge's limits (units and channels of the stitcher and the bridge agree),
and that the arm moved. Success is not asserted (a measurement, docs/results.md).
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_franka_stack_turns_observations_into_accepted_trajectories(tmp_path):
    from plan_stack.eval.episodes.episode import EpisodeOptions, run_episode

    row = run_episode(EpisodeOptions("franka", 100000, real_time_factor=0.25, time_limit_s=2.0,
                                     pace_chunk_lead_s=0.6, pace_plan_lead_s=1.0, wall_timeout_s=240.0,
                                     log_dir=str(tmp_path / "logs")))
    assert row["error"] is None, row
    assert row["sim_time_s"] >= 2.0
    assert row["plans"] >= 1 and row["plan_features"] >= 1 and row["chunks"] >= 1, row
    assert row["trajectories"] >= 1, row
    assert row["trajectory_limit_violations"] == 0, row["first_violation"]
    assert row["bridge_accepted"] >= 1, row
    assert row["bridge_commands"] >= 2, row  # the start-up hold, then at least one followed trajectory
    assert row["joint_travel_rad"] > 0.01, row
    assert row["e2e_latency_p50_ms"] is not None and row["e2e_latency_p50_ms"] > 0
