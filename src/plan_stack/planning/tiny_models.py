"""Random planner model directories for tests and benchmarks (built on the fly, never shipped).

They have the format of a trained one (`model_dir`), so the runtime, the node
and the bench exercise the real loading path; an untrained target decodes
garbage text, so callers force one primitive with `PREFIX` (a tool call and
the start token, as in the VFlash latency runs).
"""
from __future__ import annotations

import numpy as np
import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.drafter import new_drafter
from plan_stack.planning.model_dir import save_planner_model
from plan_stack.planning.target_build import tiny_target
from plan_stack.planning.tool_call import tool_call_text

CAMERAS = ["cam_a", "cam_b"]
SIZE = (64, 48)  # width, height
#: robot 3D with P = 2 waypoints: B = 3P + 2
BLOCK = 8
PREFIX = tool_call_text(BLOCK) + V.ROBOT


def make_model_dir(path, *, history_frames=3, budget=32, drafter=True, seed=0, manifest=None, target=None):
    """A random Qwen3-VL-shaped target (+ untrained drafter) saved in the model-directory format."""
    target = target if target is not None else tiny_target("vl", layers=2, seed=seed)
    torch.manual_seed(seed)
    d = new_drafter(target, width=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64) if drafter \
        else None
    m = {"cameras": CAMERAS, "image_size": list(SIZE), "history_frames": history_frames, "instruction": "pick",
         "primitive_kinds": ["robot_3d", "dual_3d", "box"], "budget": budget, **(manifest or {})}
    return save_planner_model(path, target, d, m)


def images(seed=0, size=SIZE, n=None):
    n = len(CAMERAS) if n is None else n
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8) for _ in range(n)]
