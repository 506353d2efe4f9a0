"""The stitcher node's joint_states -> stack units mapping (no DDS)."""
from __future__ import annotations

import pytest

from plan_stack.config import ConfigError
from plan_stack.trajectory.stitcher_node import StitcherNodeConfig


def test_state_mapping_needs_both_lists_of_equal_length():
    assert StitcherNodeConfig(state_offset=(0.0, 0.01), state_scale=(1.0, 25.0)).state_scale == (1.0, 25.0)
    with pytest.raises(ConfigError, match="state_offset"):
        StitcherNodeConfig(state_offset=(0.0,), state_scale=())
