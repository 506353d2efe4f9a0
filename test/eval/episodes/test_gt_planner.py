"""The ground-truth-plan ablation's source: the scripted expert's annotated keyframes of the episode's seed."""
from __future__ import annotations

import numpy as np
import pytest


def test_franka_ground_truth_keyframes_come_from_its_own_expert():
    from plan_stack.eval.episodes.gt_planner import expert_keyframes

    kfs = expert_keyframes("franka", "pick_place", 100000, (112, 112))
    assert len(kfs) >= 10
    assert [kf.t_s for kf in kfs] == sorted(kf.t_s for kf in kfs)
    assert all(np.isfinite(np.asarray(p)).all() for kf in kfs for p in kf.points)
    assert len({kf.subtask for kf in kfs}) >= 2  # the plan changes with the task's phase


def test_a_stack_without_an_action_head_is_refused_with_the_reason():
    from plan_stack.eval.episodes.gt_planner import expert_keyframes

    with pytest.raises(ValueError, match="no action head"):
        expert_keyframes("drive", "drive", 100000, (112, 112))
