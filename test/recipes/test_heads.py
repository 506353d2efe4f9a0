"""Stage `heads` of `plan-stack train`: the heads train on splits the robot records."""
from __future__ import annotations

import pytest

from plan_stack.robots import PROFILES, profile


@pytest.mark.parametrize("robot", sorted(PROFILES))
def test_heads_train_only_on_splits_the_robot_records(robot):
    assert set(profile(robot).recipe.head_extra_splits) <= set(profile(robot).planner_extra_splits)
