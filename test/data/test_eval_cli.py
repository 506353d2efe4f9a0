"""`plan-stack eval-plans` on the shipped ALOHA model: it loads, produces valid plans, and the table has
every column."""
from __future__ import annotations

import json

import pytest

from plan_stack.cli import main as cli_main
from plan_stack.paths import find_data

COLUMNS = ("decoder", "n", "ade_3d_m", "fde_3d_m", "sr_5cm", "ade_3d_m_by_arm", "ade_3d_m_by_subtask", "ade_2d_px",
           "box_iou", "subtask_match", "decode_ms", "primitive_ms", "speedup_vs_ar", "gate_accept_rate", "outliers")


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("heldout")
    assert cli_main(["record-demos", "--robot", "aloha", "--episodes", "1", "--seed", "100000", "--out", str(out),
                     "--width", "112", "--height", "112", "--camera-rate", "2", "--keyframe-period", "2.0"]) == 0
    return out


def test_help_of_the_model_commands(capsys):
    for cmd in ("train", "eval-plans"):
        with pytest.raises(SystemExit) as exc:
            cli_main([cmd, "--help"])
        assert exc.value.code == 0
        assert "--robot" in capsys.readouterr().out


def test_shipped_aloha_model_gives_valid_plans_and_every_column(demos, tmp_path, capsys):
    from plan_stack.planning.model_dir import load_planner_model

    model = load_planner_model(find_data("models", "aloha"))
    assert model.drafter is not None and model.cameras == ("cam_high",)
    path = tmp_path / "eval.json"
    assert cli_main(["eval-plans", "--robot", "aloha", "--demos", str(demos), "--decoders", "ar,vflash",
                     "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    rows = {r["decoder"]: r for r in doc["rows"]}
    assert list(rows) == ["blind", "ar", "vflash"]
    for r in rows.values():
        assert set(COLUMNS) <= set(r)
        assert r["n"] == doc["info"]["keyframes"] >= 4 and r["invalid"] == 0
        assert set(r["ade_3d_m_by_arm"]) == {"left", "right"}
    # a trained model, not noise: plans within the workspace, well under the outlier distance on average
    assert rows["ar"]["ade_3d_m"] < 0.1 and rows["vflash"]["ade_3d_m"] < 0.1
    assert rows["vflash"]["speedup_vs_ar"] > 1.0
    assert "| blind |" in capsys.readouterr().out


def test_bad_decoder_names_exit_2(demos, capsys):
    assert cli_main(["eval-plans", "--robot", "aloha", "--demos", str(demos), "--decoders", "beam"]) == 2
    assert "--decoders" in capsys.readouterr().err
