"""The chunker's config refuses what would misread the Observation's joint states."""
from __future__ import annotations

import pytest

from plan_stack.actions.config import ChunkerConfig
from plan_stack.config import ConfigError


def test_a_config_with_one_value_per_channel_is_taken():
    cfg = ChunkerConfig(checkpoint="aloha/action_head/rtc", joint_names=("a", "b"), state_joint_names=("x", "y"),
                        state_offset=(0.0, 0.01), state_scale=(1.0, 2.0))
    assert cfg.state_scale == (1.0, 2.0) and cfg.backend == "torch" and cfg.observation_qos == "reliable"


@pytest.mark.parametrize("kw, match", [
    (dict(joint_names=()), r"^joint_names: at least one joint is needed"),
    (dict(state_joint_names=("x",)), r"^state_joint_names: 1 values for 2 joint_names"),
    (dict(state_offset=(0.0,), state_scale=(1.0,)), r"^state_offset: 1 values for 2 joint_names"),
    (dict(state_offset=(0.0, 0.0)), r"^state_offset/state_scale: give both"),
    (dict(max_plan_age_s=-1.0), r"^max_plan_age_s: -1.0 is below the minimum"),
    (dict(observation_qos="best_effort"), r"^observation_qos: 'best_effort' is not one of"),
])
def test_bad_values_are_refused_naming_the_parameter(kw, match):
    with pytest.raises(ConfigError, match=match):
        ChunkerConfig(**{"checkpoint": "x", "joint_names": ("a", "b"), **kw})
