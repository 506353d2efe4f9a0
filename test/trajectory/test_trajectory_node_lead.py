"""Stitcher output stamping with a lead, and the joint_states -> stack units mapping (no DDS)."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.trajectory.node import StitcherNodeConfig, trajectory_to_msg
from plan_stack.trajectory.stitching import Trajectory


def _abs_times(msg) -> np.ndarray:
    stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
    return np.array([stamp + p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points])


def test_lead_keeps_absolute_times_and_moves_the_first_point_off_zero():
    q = np.linspace(0, 1, 5)[:, None] * np.ones((1, 2))
    traj = Trajectory(3.0, 0.02, ("a", "b"), q, np.zeros_like(q), np.zeros_like(q))
    plain, led = trajectory_to_msg(traj), trajectory_to_msg(traj, lead_s=0.1)
    np.testing.assert_allclose(_abs_times(plain), _abs_times(led), atol=1e-9)
    assert plain.points[0].time_from_start.nanosec == 0
    assert led.points[0].time_from_start.nanosec == 100_000_000
    assert led.header.stamp.sec == 2 and led.header.stamp.nanosec == 900_000_000


def test_state_mapping_needs_both_lists_of_equal_length():
    assert StitcherNodeConfig(state_offset=(0.0, 0.01), state_scale=(1.0, 25.0)).state_scale == (1.0, 25.0)
    with pytest.raises(ConfigError, match="state_offset"):
        StitcherNodeConfig(state_offset=(0.0,), state_scale=())
