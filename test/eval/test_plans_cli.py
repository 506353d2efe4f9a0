"""`plan-stack eval-plans` on the shipped models (ALOHA, Franka, driving): they load, produce valid plans, and the
table has every column."""
from __future__ import annotations

import json

import numpy as np
import pytest

from plan_stack.cli import main as cli_main
from plan_stack.paths import find_data

COLUMNS = ("decoder", "n", "ade_3d_m", "fde_3d_m", "sr_5cm", "ade_3d_m_by_arm", "ade_3d_m_by_subtask", "ade_2d_px",
           "box_iou", "subtask_match", "decode_ms", "primitive_ms", "speedup_vs_ar", "gate_accept_rate", "outliers")


#: per robot: the tracks of its plans
ARMS = {"aloha": {"left", "right"}, "franka": {"single"}, "drive": {"ego"}}

#: Bound on one episode's 3D ADE against the model's held-out ADE (manifest `eval_plans_heldout`: 340-400
#: keyframes of 6-20 episodes). The test decodes one episode (17-61 keyframes), whose mean error varies from
#: episode to episode: over held-out seeds 100000-100009 recorded like the model's data (2026-12-08, CPU,
#: float32), the worst single episode measured 1.56x the held-out ADE for ALOHA, 1.47x for Franka and 1.86x
#: for driving (seed 100000 itself: 0.93x, 1.47x and 0.79x with AR; 0.97x, 1.37x and 0.84x with VFlash),
#: while the ten episodes' mean came within 1 % of the held-out ADE (ALOHA, Franka) and 7 % (driving). The
#: blind baseline's held-out ADE is 8.1x (ALOHA) and 4.7x (driving) the model's AR ADE, so it fails this
#: bound; Franka's 1.23x does not, which is what the comparison with the blind baseline is for.
HELDOUT_MARGIN = 2.5


def heldout_rows(manifest: dict) -> dict[str, dict]:
    """The manifest's held-out eval-plans rows by decoder."""
    return {r["decoder"]: r for r in manifest["eval_plans_heldout"]["rows"]}


def not_the_shipped_model(rows: dict[str, dict], manifest: dict) -> list[str]:
    """Why eval-plans rows of one held-out episode recorded like the model's data are not what the shipped
    model measured (empty: they are). Per decoder (ar, vflash): the 3D ADE at most HELDOUT_MARGIN x the
    manifest's held-out ADE, and strictly below the blind baseline's on the same keyframes in the sub-task
    where the blind baseline is worst (eval-plans' ADE focus, where the plan depends on the scene; driving
    has one sub-task, so its whole ADE). On held-out seeds 100000-100009 both decoders of every shipped model
    were below the blind baseline there in every episode (Franka's closest: 5.48 against 8.69 cm, seed
    100000), while over the whole episode Franka's model was not in 4 of 10 (held-out 4.38 against 5.38 cm:
    its placing and releasing barely depend on the scene)."""
    from plan_stack.eval.plans_cli import _focus_subtask

    held, blind = heldout_rows(manifest), rows["blind"]
    focus = _focus_subtask(list(rows.values()))
    problems = []
    for d in ("ar", "vflash"):
        ade, heldout = rows[d]["ade_3d_m"], held[d]["ade_3d_m"]
        if ade is None or not ade <= HELDOUT_MARGIN * heldout:  # None: no valid trajectory to measure
            problems.append(f"{d}: ADE {ade} m, not within {HELDOUT_MARGIN} x the held-out {heldout:.4f} m")
        mine, theirs = rows[d]["ade_3d_m_by_subtask"].get(focus), blind["ade_3d_m_by_subtask"][focus]
        if mine is None or not mine < theirs:
            problems.append(f"{d}: ADE in {focus!r} {mine} m, not below the blind baseline's {theirs:.4f} m")
    return problems


def _record(out, robot: str, seed: int = 100000) -> None:
    """One episode recorded exactly as the model's data (the manifest's `data.recorded_with`)."""
    import shlex

    manifest = json.loads((find_data("models", robot) / "manifest.json").read_text())
    argv = shlex.split(manifest["data"]["recorded_with"])[1:]
    assert argv[:3] == ["record-demos", "--robot", robot]
    assert cli_main([*argv, "--episodes", "1", "--seed", str(seed), "--out", str(out)]) == 0


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("heldout")
    _record(out, "aloha")
    return out


def test_help_of_the_model_commands(capsys):
    for cmd in ("train", "eval-plans"):
        with pytest.raises(SystemExit) as exc:
            cli_main([cmd, "--help"])
        assert exc.value.code == 0
        assert "--robot" in capsys.readouterr().out


@pytest.mark.timing
def test_shipped_aloha_model_gives_valid_plans_and_every_column(demos, tmp_path, capsys):
    from plan_stack.planning.model_dir import load_planner_model

    model = load_planner_model(find_data("models", "aloha"))
    assert model.drafter is not None and model.cameras == ("cam_high",)
    _check_eval(tmp_path, "aloha", demos)
    out = capsys.readouterr()
    assert "| blind |" in out.out
    assert "WARNING" not in out.err  # held-out seeds, recorded like the model's data: comparable figures


def test_demos_recorded_like_the_model_data_raise_no_mismatch():
    from types import SimpleNamespace

    from plan_stack.eval.plans_cli import recording_mismatch

    def kf(size, t_s=0.0):
        return SimpleNamespace(camera_size=size, episode="e", t_s=t_s)

    manifest = {"data": {"recorded_with": "plan-stack record-demos --robot aloha --width 224 --height 224"}}
    assert recording_mismatch(manifest, [kf((224, 224)), kf((224, 224), 0.5)]) is None
    assert "224x224, 320x240 px" in recording_mismatch(manifest, [kf((224, 224)), kf((320, 240), 0.5)])
    assert recording_mismatch({}, [kf((320, 240))]) is None  # nothing recorded to compare


def test_demos_annotated_at_another_keyframe_period_are_named():
    from types import SimpleNamespace

    from plan_stack.eval.plans_cli import recording_mismatch

    def kfs(period):
        return [SimpleNamespace(camera_size=(224, 224), episode=e, t_s=i * period) for e in "ab" for i in range(5)]

    manifest = {"data": {"recorded_with": "plan-stack record-demos --robot drive --width 224 --height 224 "
                                          "--camera-rate 2 --keyframe-period 0.5"}}
    assert recording_mismatch(manifest, kfs(0.5)) is None
    got = recording_mismatch(manifest, kfs(1.0))
    assert "annotated every 1 s, the model's data every 0.5 s" in got and "--keyframe-period 0.5" in got
    assert recording_mismatch({"data": {"recorded_with": "--width 224 --height 224"}}, kfs(1.0)) is None


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.parametrize("robot", ["franka", "drive"])
def test_shipped_franka_and_drive_models_give_valid_plans(robot, tmp_path):
    from plan_stack.planning.model_dir import load_planner_model
    from plan_stack.robots import profile

    model = load_planner_model(find_data("models", robot))
    spec = profile(robot).learning
    assert model.drafter is not None and model.cameras == spec.cameras
    assert model.manifest["primitive_kinds"][-1] == spec.kind and model.manifest["gate_max_step_m"] > 0
    demos = tmp_path / "heldout"
    _record(demos, robot)
    rows = _check_eval(tmp_path, robot, demos)
    if spec.box_objects:
        assert rows["ar"]["box_iou"] is not None and rows["ar"]["box_iou"] > 0.0


def _check_eval(tmp_path, robot: str, demos) -> dict:
    """eval-plans with ar + vflash on `demos`: every column, no invalid plan, the errors the shipped model
    measured on its held-out split."""
    path = tmp_path / "eval.json"
    assert cli_main(["eval-plans", "--robot", robot, "--demos", str(demos), "--decoders", "ar,vflash",
                     "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    rows = {r["decoder"]: r for r in doc["rows"]}
    assert list(rows) == ["blind", "ar", "vflash"]
    info = doc["info"]
    assert info["recording_mismatch"] is None and info["seed_overlap_by_split"] == {}
    for r in rows.values():
        assert set(COLUMNS) <= set(r)
        assert r["n"] == info["keyframes"] >= 4 and r["invalid"] == 0
        assert set(r["ade_3d_m_by_arm"]) == ARMS[robot]
        assert np.isfinite(r["ade_3d_m"])
    manifest = json.loads((find_data("models", robot) / "manifest.json").read_text())
    assert not_the_shipped_model(rows, manifest) == []
    # the same check refuses the image-blind baseline's plans of these keyframes as a model's
    assert not_the_shipped_model({**rows, "ar": rows["blind"], "vflash": rows["blind"]}, manifest)
    assert rows["vflash"]["speedup_vs_ar"] > 1.0
    # primitive time by kind adds up to the primitive time; every kind is timed for both decoders
    kinds = set(doc["info"].get("primitive_kinds", [])) or set(rows["ar"]["primitive_ms_by_kind"])
    for d in ("ar", "vflash"):
        by_kind = rows[d]["primitive_ms_by_kind"]
        assert set(by_kind) == kinds and sum(by_kind.values()) == pytest.approx(rows[d]["primitive_ms"])
    assert set(rows["vflash"]["primitive_speedup_vs_ar_by_kind"]) == kinds
    return rows


def test_bad_decoder_names_exit_2(demos, capsys):
    assert cli_main(["eval-plans", "--robot", "aloha", "--demos", str(demos), "--decoders", "beam"]) == 2
    assert "--decoders" in capsys.readouterr().err


@pytest.mark.slow
def test_the_accuracy_check_refuses_a_randomly_initialised_target(demos, tmp_path):
    """The shipped ALOHA model directory with its target's weights freshly initialised (same architecture,
    tokenizer, drafter and manifest): eval-plans still runs, and the check of the shipped model's accuracy
    fails it."""
    import shutil

    import torch

    from plan_stack.planning.target_build import load_target

    model_dir = tmp_path / "random_target"
    shutil.copytree(find_data("models", "aloha"), model_dir)
    trained = load_target(model_dir / "target").model
    torch.manual_seed(0)
    type(trained)(trained.config).save_pretrained(model_dir / "target")  # fresh initialisation
    path = tmp_path / "eval.json"
    assert cli_main(["eval-plans", "--robot", "aloha", "--demos", str(demos), "--model", str(model_dir),
                     "--decoders", "ar,vflash", "--json", str(path)]) == 0
    rows = {r["decoder"]: r for r in json.loads(path.read_text())["rows"]}
    manifest = json.loads((model_dir / "manifest.json").read_text())
    problems = not_the_shipped_model(rows, manifest)
    assert any("held-out" in p for p in problems) and any("blind baseline" in p for p in problems), problems


@pytest.mark.parametrize("robot, seeds, expected", [
    ("aloha", [100000, 100001], {}),  # held-out
    ("aloha", [0, 400003, 100000], {"train": 1, "recovery": 1}),
    ("aloha", [200001], {"val": 1}),
    ("franka", [500000, 500999, 501000], {"pick": 2}),
    ("drive", [5, 400000, 600059, 610000, 630119, 650000, 700000, 640000], {
        "train": 1, "recovery": 1, "onpolicy": 1, "onpolicy2": 1, "onpolicy4": 1, "onpolicy6": 1, "displaced": 1}),
])
def test_seeds_of_every_split_the_model_trained_on_are_found(robot, seeds, expected):
    """Not only `train`: the extra planner splits (recovery, pick, displaced) and the on-policy rounds are
    training data too (`data.planner_trains_on`); the validation split chose the checkpoint. 640000 is the
    dropped round `onpolicy5`, which the shipped driving model never saw."""
    from plan_stack.eval.plans_cli import seed_overlap

    manifest = json.loads((find_data("models", robot) / "manifest.json").read_text())
    assert seed_overlap(manifest, robot, seeds) == expected


def test_a_manifest_without_its_data_falls_back_to_the_robot_profile():
    from plan_stack.eval.plans_cli import seed_overlap, training_splits

    assert training_splits({}, "drive")[:3] == ["train", "recovery", "displaced"]
    assert seed_overlap({}, "aloha", [400119, 400120, 3]) == {"train": 1, "recovery": 1}


def test_eval_plans_warns_about_seeds_of_any_training_split(demos, tmp_path, capsys):
    """The held-out episode relabelled as a seed of the `recovery` split, which the planner trains on."""
    import shutil

    relabelled = tmp_path / "demos"
    shutil.copytree(demos, relabelled)
    (annotation,) = relabelled.glob("*.json")
    doc = json.loads(annotation.read_text())
    doc["seed"] = 400003
    annotation.write_text(json.dumps(doc))
    path = tmp_path / "eval.json"
    assert cli_main(["eval-plans", "--robot", "aloha", "--demos", str(relabelled), "--decoders", "ar",
                     "--json", str(path)]) == 0
    err = capsys.readouterr().err
    assert "WARNING: 1 of 1 episode seeds are seeds of splits the model was trained on (recovery: 1)" in err
    info = json.loads(path.read_text())["info"]
    assert info["train_seed_overlap"] == 1 and info["seed_overlap_by_split"] == {"recovery": 1}
