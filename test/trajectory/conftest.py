"""Shared builder for the stitcher's tests: a small config of three continuous joints and a gripper."""
from __future__ import annotations

import pytest

from plan_stack.trajectory.config import StitcherConfig


@pytest.fixture
def stitcher_config():
    """Factory: StitcherConfig of joints j0, j1, j2 (continuous) and grip (discrete), with overrides."""

    def make(**kw):
        base = dict(joint_names=("j0", "j1", "j2", "grip"), discrete_joints=("grip",), v_max=2.0, a_max=10.0,
                    j_max=100.0)
        return StitcherConfig(**{**base, **kw})

    return make
