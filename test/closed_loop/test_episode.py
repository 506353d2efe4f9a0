"""Episode configuration and message stamps (no DDS)."""
from __future__ import annotations

import pytest

from plan_stack.closed_loop.episode import EpisodeOptions, episode_config, header_stamp_ns


def test_episode_config_sets_seed_time_and_planner():
    raw = episode_config(EpisodeOptions("aloha", 100007, real_time_factor=0.5, decoder="ar",
                                        pace_chunk_lead_s=0.6, sets=(("chunker", "max_plan_age_s", 1.5),)))
    nodes = raw["nodes"]
    sim = nodes["aloha_sim"]["parameters"]
    assert (sim["seed"], sim["real_time_factor"], sim["pace_chunk_lead_s"]) == (100007, 0.5, 0.6)
    assert nodes["planner"]["parameters"]["decoder"] == "ar"
    assert nodes["chunker"]["parameters"]["max_plan_age_s"] == 1.5
    assert "viz" not in nodes


def test_gt_plans_drop_the_planner_and_bad_overrides_are_named():
    assert "planner" not in episode_config(EpisodeOptions("aloha", 1, gt_plans=True))["nodes"]
    with pytest.raises(ValueError, match="nosuch"):
        episode_config(EpisodeOptions("aloha", 1, sets=(("nosuch", "x", 1),)))


def test_header_stamp_from_serialised_messages():
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    msg = Image()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 345
    assert header_stamp_ns(serialize_message(msg)) == 12_000_000_345
    with pytest.raises(ValueError):
        header_stamp_ns(b"\x00\x01")
