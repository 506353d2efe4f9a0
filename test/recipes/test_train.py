"""`plan-stack train`: the chain refuses what it cannot train on, fine-tunes `--init-from`, and its labels."""
from __future__ import annotations

import pytest

from plan_stack.robots import PROFILES, profile


def test_train_refuses_a_data_set_without_the_extra_planner_splits(tmp_path, capsys):
    from plan_stack.cli import main

    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    assert main(["train", "--robot", "aloha", "--data", str(tmp_path), "--work", str(tmp_path / "w"),
                 "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "recovery" in err and "--record" in err


def test_located_centre_is_the_first_box_objects_centre_in_image_fractions():
    from types import SimpleNamespace

    from plan_stack.recipes.train import located_centre

    kf = SimpleNamespace(boxes={"box": (100.0, 50.0, 110.0, 70.0)}, camera_size=(200, 100))
    aloha, drive = profile("aloha").learning, profile("drive").learning
    assert located_centre(kf, aloha) == (0.525, 0.6)
    assert located_centre(SimpleNamespace(boxes={}, camera_size=(200, 100)), aloha) is None
    assert located_centre(kf, drive) is None  # no located object for driving


def test_located_centre_largest_is_the_biggest_box_in_view():
    from types import SimpleNamespace

    import pytest

    from plan_stack.recipes.train import located_centre

    kf = SimpleNamespace(boxes={"obstacle_0": (10.0, 40.0, 14.0, 44.0), "obstacle_3": (100.0, 40.0, 140.0, 80.0),
                                "obstacle_5": (150.0, 40.0, 151.0, 41.0)}, camera_size=(200, 100))
    drive = profile("drive").learning
    assert located_centre(kf, drive, "largest") == (0.6, 0.6)  # the nearest (largest) obstacle
    assert located_centre(SimpleNamespace(boxes={}, camera_size=(200, 100)), drive, "largest") is None
    with pytest.raises(ValueError, match="unknown rule"):
        located_centre(kf, drive, "nearest")
    assert {p.recipe.locate for p in PROFILES.values()} <= {"first", "largest"}
    for p in PROFILES.values():  # a "first" rule needs an object to be first
        assert p.recipe.target_locate_weight == 0 or p.recipe.locate == "largest" or p.learning.box_objects


def test_init_from_refuses_another_robots_model(tmp_path, capsys):
    from plan_stack.cli import main

    assert main(["train", "--robot", "aloha", "--data", str(tmp_path), "--work", str(tmp_path / "w"),
                 "--out", str(tmp_path / "m"), "--init-from", "drive"]) == 2
    assert "a drive model" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(900)  # trains and records on the CPU: about 20-140 s, longer on a loaded machine
def test_init_from_fine_tunes_the_shipped_model_keeping_its_ranges(tmp_path):
    """`--init-from`: the target and drafter start from the model directory, its coordinate ranges stay
    (labels beyond them are clipped and counted), and the manifest says where it came from."""
    import json

    from plan_stack.cli import main
    from plan_stack.embodiments.drive.policy import PlannerDriver
    from plan_stack.embodiments.drive.recording import DriveRecordOptions, record_episode
    from plan_stack.paths import find_data
    from plan_stack.planning.model_dir import load_planner_model

    opts = DriveRecordOptions(width=112, height=112, duration_s=2.0, camera_rate_hz=2.0, keyframe_period_s=0.5)
    policy = PlannerDriver("drive")
    for split, (seed, _) in profile("drive").splits.items():
        if split != "heldout":
            record_episode(seed, tmp_path / "data" / split, opts, policy=policy if split == "onpolicy" else None)
    shipped = find_data("models", "drive")
    out = tmp_path / "model"
    assert main(["train", "--robot", "drive", "--data", str(tmp_path / "data"), "--work", str(tmp_path / "work"),
                 "--out", str(out), "--init-from", "drive", "--target-steps", "2", "--drafter-steps", "2",
                 "--stages", "target,drafter", "--extra-split", "onpolicy", "--ranks", "2",
                 "--drafter-text-block", "20"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    before = json.loads((shipped / "manifest.json").read_text())
    assert manifest["coordinate_ranges"] == before["coordinate_ranges"]
    assert manifest["initialised_from"]["model_dir"] == str(shipped)
    assert manifest["data"]["planner_trains_on"] == ["train", *profile("drive").planner_extra_splits, "onpolicy"]
    assert manifest["recipe"]["target_locate_weight"] == 0.0 and manifest["target_training"]["steps"] == 2
    assert manifest["target_training"]["ranks"] == manifest["drafter_training"]["ranks"] == 2
    tuned, start = load_planner_model(out), load_planner_model(shipped)
    a = dict(tuned.target.model.named_parameters())
    start_params = dict(start.target.model.named_parameters())
    assert set(start_params) == set(a)
    moved = [float((start_params[n] - a[n]).abs().max()) for n in a]
    # trained (two AdamW steps) from the shipped weights, not from a fresh init
    assert max(moved) > 0 and max(moved) < 0.05, max(moved)
    assert tuned.drafter is not None
    # trained on 20-position text blocks (the shipped drafter's 16 overridden), and says so
    assert tuned.drafter.config.text_block == manifest["drafter_training"]["config"]["text_block"] == 20
