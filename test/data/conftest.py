"""A tiny Qwen3-VL planner model for the data tests (built once per session)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model():
    """An in-memory PlannerModel (random tiny VL target) with ALOHA-like coordinate ranges."""
    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.target import tiny_target

    target = tiny_target("vl", layers=2, seed=3)
    manifest = {"cameras": ["cam_high"], "image_size": [32, 32], "history_frames": 1, "instruction": "do it",
                "primitive_kinds": ["dual_3d"], "budget": 160,
                "coordinate_ranges": {"robot": {"x": [-0.5, 0.5], "y": [-0.2, 0.3], "z": [0.3, 0.9]}},
                "workspace": {}, "gate_max_step_m": 0.0}
    return PlannerModel("unsaved", target, None, manifest)
