"""The shipped models and heads the docs describe are the ones in models/, as they are.

docs/planning.md's table of planner models and docs/actions.md's table of action heads are checked row by
row against the model directories (manifest, target and drafter configs, head checkpoints) and the robot
configs that run them, and every shipped model and head has its row: a model retrained, replaced or
dropped fails here until its docs say so.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from plan_stack.paths import find_data
from plan_stack.robot_config import load_robot_config

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _table(page: str, first_header: str) -> list[list[str]]:
    """The rows (cells, stripped) of the markdown table in docs/`page` whose header starts with `first_header`."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _shipped_models() -> set[str]:
    return {p.parent.name for p in find_data("models").glob("*/manifest.json")}


def _shipped_heads() -> set[str]:
    return {f"{p.parent.parent.parent.name}/action_head/{p.parent.name}"
            for p in find_data("models").glob("*/action_head/*/config.json")}


def test_the_planning_page_describes_each_shipped_model_as_it_is():
    rows = {r[0].strip("`"): r for r in _table("planning.md", "model")}
    assert set(rows) == _shipped_models()
    for name, (_, target, image, drafter, cameras, primitives, text_block, budget) in rows.items():
        model = find_data("models", name)
        manifest = _json(model / "manifest.json")
        text = _json(model / "target" / "config.json")["text_config"]
        draft = _json(model / "drafter" / "config.json")
        assert target == f"{text['hidden_size']} × {text['num_hidden_layers']}", name
        assert image == " × ".join(map(str, manifest["image_size"])), name
        assert drafter == f"{draft['width']} × {draft['layers']}", name
        assert re.findall(r"`(\w+)`", cameras) == manifest["cameras"], name
        assert re.findall(r"`(\w+)`", primitives) == manifest["primitive_kinds"], name
        assert re.findall(r"P = (\d+)", primitives) == [str(p) for p in manifest["waypoints"]], name
        assert (int(text_block), int(budget)) == (manifest["text_block"], manifest["budget"]), name
        vision = _json(model / "target" / "config.json")["vision_config"]
        assert (vision["hidden_size"], vision["depth"], vision["patch_size"]) == (96, 2, 8), name  # the page's text


def test_the_actions_page_describes_each_shipped_head_and_who_runs_it():
    rows = {r[0].strip("`"): r for r in _table("actions.md", "head")}
    assert set(rows) == _shipped_heads()
    runners = {}
    for robot in _shipped_models():
        for spec in load_robot_config(robot).nodes:
            if spec.executable == "chunker":
                runners[spec.parameters["checkpoint"]] = (robot, spec.parameters)
    for name, (_, actions, run_by) in rows.items():
        doc = _json(find_data("models", name) / "config.json")
        head, meta = doc["head"], doc["meta"]
        model = name.split("/")[0]
        target_width = _json(find_data("models", model) / "target" / "config.json")["text_config"]["hidden_size"]
        # the paragraph above the table
        assert (head["width"], head["layers"], head["heads"], head["horizon"], head["num_steps"]) == (64, 2, 4, 50, 10)
        assert head["dt_s"] == pytest.approx(0.02) and head["cond_width"] == target_width == 192, name
        assert meta["data"]["source"] == "planner plan features" and meta["train"]["steps"] == 3000, name
        assert meta["rtc_max_delay"] == (10 if name.endswith("/rtc") else 0), name
        assert int(actions.split()[0]) == head["action_dim"], name
        if name in runners:
            robot, params = runners[name]
            assert run_by.startswith(f"`config/{robot}.yaml`") and f"`method: {params['method']}`" in run_by, name
        else:
            assert run_by == "no config", name
