"""`plan-stack export`: a robot's models to ONNX files + engines.json that the runners accept."""
from __future__ import annotations

import json

import torch

from plan_stack.cli import main
from plan_stack.device import resolve_placement
from plan_stack.engines.runtime import EngineSet


def test_exports_the_robots_action_head_and_a_planner_model(tmp_path):
    from plan_stack.planning import layouts as L
    from plan_stack.planning.drafter import new_drafter
    from plan_stack.planning.model_dir import save_planner_model
    from plan_stack.planning.target_build import tiny_target

    target = tiny_target("vl", layers=3, seed=4)
    torch.manual_seed(0)
    drafter = new_drafter(target, width=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64)
    save_planner_model(tmp_path / "model", target, drafter,
                       {"cameras": ["cam_high"], "image_size": [64, 64], "primitive_kinds": ["dual_2d3d"],
                        "waypoints": 4})
    out = tmp_path / "eng"
    assert main(["export", "--robot", "aloha", "--out", str(out), "--model-dir", str(tmp_path / "model")]) == 0
    doc = json.loads((out / "engines.json").read_text())
    block = L.block_size_of("dual_2d3d", 4)
    assert {"flow_step", f"draft_B{block}", "draft_B16", "vision_64x64x1"} <= set(doc["models"])
    assert len(doc["sources"]["planner"]["sha256"]) == 64
    engines = EngineSet(out, "onnx", resolve_placement("cpu"))
    assert engines.drafter(drafter).block_sizes == sorted({block, 16})


def test_nothing_to_export_and_bad_robot_exit_2(tmp_path, capsys):
    assert main(["export", "--robot", "drive", "--out", str(tmp_path / "x"), "--model-dir", str(tmp_path / "no")]) == 2
    assert "plan-stack export" in capsys.readouterr().err
    assert main(["export", "--robot", "no_such_robot", "--out", str(tmp_path / "y")]) == 2
