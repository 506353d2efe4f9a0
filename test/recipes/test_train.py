"""`plan-stack train` pieces: the episode-seed splits and the gate bound chosen on the validation split."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.data.episodes import ROBOTS, Keyframe
from plan_stack.recipes.train import (
    ONPOLICY_ROUNDS,
    PLANNER_EXTRA_SPLITS,
    RECIPES,
    SPLITS,
    gate_bound,
    true_steps,
)

#: eval-head's tuning seeds (docs/closed_loop.md): never trained on either
TUNING_SEEDS = set(range(300000, 300030))


@pytest.mark.parametrize("robot", sorted(SPLITS))
def test_splits_are_disjoint_seed_ranges_for_every_trainable_robot(robot):
    assert robot in ROBOTS and robot in RECIPES
    splits = SPLITS[robot]
    rounds = [split for split, _ in ONPOLICY_ROUNDS.get(robot, ())]
    assert set(splits) == {"train", "val", "heldout", *PLANNER_EXTRA_SPLITS.get(robot, {}), *rounds}
    seeds = {name: set(range(first, first + n)) for name, (first, n) in splits.items()}
    assert all(len(s) > 0 for s in seeds.values())
    names = sorted(seeds)
    for i, a in enumerate(names):
        assert not seeds[a] & TUNING_SEEDS
        for b in names[i + 1:]:
            assert not seeds[a] & seeds[b], (a, b)


def test_extra_planner_splits_record_with_options_record_demos_takes(tmp_path):
    from plan_stack.cli import main

    for robot, extra in PLANNER_EXTRA_SPLITS.items():
        for split, options in extra.items():
            assert split in SPLITS[robot]
            # the options parse for that robot (one tiny episode, nothing else)
            short = ["--duration", "1"] if robot == "drive" else []  # the last --duration given wins
            assert main(["record-demos", "--robot", robot, "--episodes", "1", "--width", "32", "--height", "32",
                         "--seed", str(SPLITS[robot][split][0]), "--out", str(tmp_path / split), *options,
                         *short]) == 0


def test_train_refuses_a_data_set_without_the_extra_planner_splits(tmp_path, capsys):
    from plan_stack.cli import main

    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    assert main(["train", "--robot", "aloha", "--data", str(tmp_path), "--work", str(tmp_path / "w"),
                 "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "recovery" in err and "--record" in err


def test_gate_stage_without_a_trained_model_is_a_clear_error(tmp_path, capsys):
    from plan_stack.cli import main

    assert main(["train", "--robot", "drive", "--data", str(tmp_path), "--work", str(tmp_path / "w"),
                 "--out", str(tmp_path / "none"), "--stages", "gate"]) == 2
    err = capsys.readouterr().err
    assert "gate" in err and "does not exist" in err and str(tmp_path / "none") in err


def _kf(tracks: list[list[list[float]]]) -> Keyframe:
    pts = [np.asarray(t, dtype=float) for t in tracks]
    return Keyframe("ep", 0, 0, 0.0, "do it", "reach", [], pts, [np.full((len(p), 2), np.nan) for p in pts], {},
                    (64, 64))


def test_gate_bound_is_the_factor_times_the_largest_true_step():
    a = _kf([[[0, 0, 0], [0.03, 0, 0], [0.03, 0.04, 0]], [[0, 0, 0], [0, 0, 0.01]]])  # steps 0.03, 0.04, 0.01
    b = _kf([[[1, 1, 1], [1, 1, 1.02]]])  # 0.02
    assert sorted(true_steps([a, b]).round(6).tolist()) == [0.01, 0.02, 0.03, 0.04]
    bound, info = gate_bound([a, b], 1.5)
    assert bound == pytest.approx(0.06)
    assert info["split"] == "val" and info["steps"] == 4 and info["true_step_m"]["max"] == pytest.approx(0.04)
    assert gate_bound([a, b], 2.0)[0] == pytest.approx(0.08)


def test_step_change_bound_is_the_factor_times_the_largest_true_second_difference():
    from plan_stack.recipes.train import Recipe, gate_manifest

    a = _kf([[[0, 0, 0], [0.03, 0, 0], [0.03, 0.04, 0]], [[0, 0, 0], [0, 0, 0.01]]])  # change |(-0.03, 0.04)|
    b = _kf([[[0, 0, 0], [0.01, 0, 0], [0.03, 0, 0], [0.06, 0, 0]]])  # changes 0.01, 0.01
    assert sorted(true_steps([a, b], order=2).round(6).tolist()) == [0.01, 0.01, 0.05]
    bound, info = gate_bound([a, b], 1.5, order=2)
    assert bound == pytest.approx(0.075) and info["true_step_change_m"]["max"] == pytest.approx(0.05)
    assert gate_manifest([a, b], Recipe())["gate_max_step_change_m"] == 0.0  # not asked for: none
    gate = gate_manifest([a, b], Recipe(gate_step_change_factor=2.0))
    assert gate["gate_max_step_change_m"] == pytest.approx(0.1) and gate["gate_max_step_m"] == pytest.approx(0.06)
    assert gate["gate_rule"]["step_change"]["rule"] == "2.0 x max true step change"
    with pytest.raises(ValueError, match="3 waypoints"):
        gate_bound([_kf([[[0, 0, 0], [1, 0, 0]]])], 1.5, order=2)


def test_the_text_block_is_the_smallest_within_tolerance_of_the_fewest_text_passes():
    """Counted passes, not timings: a response one token past two blocks of 16 needs a third pass."""
    from types import SimpleNamespace

    from plan_stack.recipes.train import choose_text_block

    passes = {16: 4.0, 17: 3.0, 18: 3.0, 20: 2.99, 24: 2.9}

    class Model:
        manifest = {"budget": 64}

        def encode(self, instruction, frames):
            return instruction

        def decoder(self, config):
            stats = SimpleNamespace(target_forwards_text=passes[config.text_block])
            return SimpleNamespace(generate=lambda prompt, **kw: SimpleNamespace(stats=stats))

    kfs = [_kf([[[0, 0, 0]]])] * 3
    best, info = choose_text_block(Model(), kfs)
    assert best == 24 and info["mean_text_passes"][17] == 3.0 and info["keyframes"] == 3  # 2.9 is > 2 % fewer
    assert choose_text_block(Model(), kfs, candidates=(16, 17, 18, 20))[0] == 17  # 2.99 is within 2 % of 3


def test_gate_bound_refuses_a_split_without_tracks():
    with pytest.raises(ValueError, match="validation"):
        gate_bound([_kf([[[0, 0, 0]]])], 1.5)


@pytest.mark.parametrize("robot", sorted(RECIPES))
def test_heads_train_only_on_splits_the_robot_records(robot):
    assert set(RECIPES[robot].head_extra_splits) <= set(PLANNER_EXTRA_SPLITS.get(robot, {}))


def test_selection_keeps_every_episode_start_besides_the_spaced_keyframes():
    from types import SimpleNamespace

    from plan_stack.recipes.train import selection_keyframes

    val = [SimpleNamespace(episode=e, index=i) for e in range(5) for i in range(10)]
    sel = selection_keyframes(val, 8)
    assert len(sel) == len({id(k) for k in sel})  # no keyframe twice
    assert {k.episode for k in sel if k.index == 0} == set(range(5))  # every start, spaced or not
    assert sel[:8] == val[::6][:8]  # the spaced ones first, as before


def test_located_centre_is_the_first_box_objects_centre_in_image_fractions():
    from types import SimpleNamespace

    from plan_stack.data.episodes import ROBOTS
    from plan_stack.recipes.train import located_centre

    kf = SimpleNamespace(boxes={"box": (100.0, 50.0, 110.0, 70.0)}, camera_size=(200, 100))
    assert located_centre(kf, ROBOTS["aloha"]) == (0.525, 0.6)
    assert located_centre(SimpleNamespace(boxes={}, camera_size=(200, 100)), ROBOTS["aloha"]) is None
    assert located_centre(kf, ROBOTS["drive"]) is None  # no located object for driving


def test_located_centre_largest_is_the_biggest_box_in_view():
    from types import SimpleNamespace

    import pytest

    from plan_stack.data.episodes import ROBOTS
    from plan_stack.recipes.train import RECIPES, located_centre

    kf = SimpleNamespace(boxes={"obstacle_0": (10.0, 40.0, 14.0, 44.0), "obstacle_3": (100.0, 40.0, 140.0, 80.0),
                                "obstacle_5": (150.0, 40.0, 151.0, 41.0)}, camera_size=(200, 100))
    assert located_centre(kf, ROBOTS["drive"], "largest") == (0.6, 0.6)  # the nearest (largest) obstacle
    assert located_centre(SimpleNamespace(boxes={}, camera_size=(200, 100)), ROBOTS["drive"], "largest") is None
    with pytest.raises(ValueError, match="unknown rule"):
        located_centre(kf, ROBOTS["drive"], "nearest")
    assert {r.locate for r in RECIPES.values()} <= {"first", "largest"}
    for robot, recipe in RECIPES.items():  # a "first" rule needs an object to be first
        assert recipe.target_locate_weight == 0 or recipe.locate == "largest" or ROBOTS[robot].box_objects


def test_every_split_is_recorded_with_the_robots_record_options(tmp_path, monkeypatch):
    import plan_stack.cli
    from plan_stack.recipes.train import ONPOLICY_ROUNDS, SPLITS, record_splits

    calls = []
    monkeypatch.setattr(plan_stack.cli, "main", lambda argv: calls.append(argv) or 0)
    (tmp_path / "val").mkdir()
    (tmp_path / "val" / "drive_200000.json").write_text("{}")  # a recorded split is kept
    record_splits("drive", str(tmp_path), lambda msg: None)
    # the on-policy rounds' splits are the on-policy stage's: each needs the model the stage before wrote
    rounds = {split for split, _ in ONPOLICY_ROUNDS["drive"]}
    assert rounds == {"onpolicy", "onpolicy2", "onpolicy3", "onpolicy4", "onpolicy6"}
    assert [c[c.index("--out") + 1] for c in calls] == [str(tmp_path / s) for s in SPLITS["drive"]
                                                        if s != "val" and s not in rounds]
    for argv in calls:  # driving keyframes every 0.5 s in every split, train and held-out alike
        assert argv[argv.index("--keyframe-period") + 1] == "0.5"


def test_a_split_is_read_once_per_process_while_its_fingerprint_holds(tmp_path, monkeypatch):
    """The on-policy stage trains every round in one process: a split read by an earlier round is not read
    again, unless its annotation files changed (another fingerprint) or another image size is asked for."""
    import plan_stack.data.episodes
    from plan_stack.recipes import train as TC

    reads = []

    def counting_load(path, spec, image_size, **kw):
        reads.append((path, image_size))
        return [f"{path}@{image_size}#{len(reads)}"]

    monkeypatch.setattr(plan_stack.data.episodes, "load_keyframes", counting_load)
    monkeypatch.setattr(TC, "_LOADED_SPLITS", {})
    split, spec = str(tmp_path / "train"), ROBOTS["drive"]
    first = TC._split_keyframes(split, spec, (80, 80), {"sha256": "a"})
    again = TC._split_keyframes(split, spec, (80, 80), {"sha256": "a"})
    assert again == first and len(reads) == 1
    again.append("a caller's own list")  # callers add to their lists: the cached one stays as read
    assert TC._split_keyframes(split, spec, (80, 80), {"sha256": "a"}) == first
    assert TC._split_keyframes(split, spec, (80, 80), {"sha256": "b"}) != first  # re-recorded: read again
    TC._split_keyframes(split, spec, (112, 112), {"sha256": "a"})
    assert len(reads) == 3


def test_init_from_refuses_another_robots_model(tmp_path, capsys):
    from plan_stack.cli import main

    assert main(["train", "--robot", "aloha", "--data", str(tmp_path), "--work", str(tmp_path / "w"),
                 "--out", str(tmp_path / "m"), "--init-from", "drive"]) == 2
    assert "a drive model" in capsys.readouterr().err


@pytest.mark.slow
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
    for split, (seed, _) in SPLITS["drive"].items():
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
    assert manifest["data"]["planner_trains_on"] == ["train", *PLANNER_EXTRA_SPLITS["drive"], "onpolicy"]
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


@pytest.mark.slow
def test_the_onpolicy_rounds_record_with_the_latest_model_and_fine_tune_it(tmp_path, monkeypatch):
    """Stages target,drafter,onpolicy (tiny steps, one short drive per split, two rounds): each round keeps
    the model before it, records its split driven by it, and writes the fine-tuned model in its place."""
    import dataclasses
    import json

    import plan_stack.recipes.train as TC
    from plan_stack.cli import main
    from plan_stack.embodiments.drive.recording import DriveRecordOptions, record_episode

    monkeypatch.setitem(TC.RECIPES, "drive", dataclasses.replace(
        TC.RECIPES["drive"], onpolicy_target_steps=2, onpolicy_drafter_steps=2, onpolicy_final_drafter_steps=3,
        val_keyframes=2))
    monkeypatch.setitem(TC.SPLITS["drive"], "onpolicy", (600000, 1))
    monkeypatch.setitem(TC.SPLITS["drive"], "onpolicy2", (610000, 1))
    monkeypatch.setitem(TC.ONPOLICY_ROUNDS, "drive", (
        ("onpolicy", ("--duration", "1")),
        ("onpolicy2", ("--duration", "1", "--policy-latency", "0.1", "--policy-latency-max", "0.5"))))
    opts = DriveRecordOptions(width=112, height=112, duration_s=1.0, camera_rate_hz=2.0, keyframe_period_s=0.5)
    for split in ("train", "val", *TC.PLANNER_EXTRA_SPLITS["drive"]):
        record_episode(SPLITS["drive"][split][0], tmp_path / "data" / split, opts)
    out, work = tmp_path / "model", tmp_path / "work"
    assert main(["train", "--robot", "drive", "--data", str(tmp_path / "data"), "--work", str(work),
                 "--out", str(out), "--target-steps", "2", "--drafter-steps", "2",
                 "--stages", "target,drafter,onpolicy"]) == 0
    first = json.loads((work / "before_onpolicy" / "manifest.json").read_text())
    assert first["data"]["planner_trains_on"] == ["train", "recovery", "displaced"]
    second = json.loads((work / "before_onpolicy2" / "manifest.json").read_text())
    assert second["data"]["planner_trains_on"] == ["train", "recovery", "displaced", "onpolicy"]
    assert second["initialised_from"]["model_dir"] == str(work / "before_onpolicy")
    recorded = json.loads((tmp_path / "data" / "onpolicy" / "drive_600000.json").read_text())
    assert recorded["expert_labels"] and recorded["driven_by"]["policy"] == str(work / "before_onpolicy")
    assert "latency_max_s" not in recorded["driven_by"]
    recorded2 = json.loads((tmp_path / "data" / "onpolicy2" / "drive_610000.json").read_text())
    assert recorded2["driven_by"]["policy"] == str(work / "before_onpolicy2")
    assert recorded2["driven_by"]["latency_max_s"] == 0.5
    tuned = json.loads((out / "manifest.json").read_text())
    assert tuned["data"]["planner_trains_on"] == ["train", "recovery", "displaced", "onpolicy", "onpolicy2"]
    last_round = json.loads((work / "before_drafter_fine_tune" / "manifest.json").read_text())
    assert last_round["initialised_from"]["model_dir"] == str(work / "before_onpolicy2")
    assert tuned["coordinate_ranges"] == first["coordinate_ranges"]
    rounds = tuned["data"]["onpolicy_rounds"]
    assert [r["split"] for r in rounds] == ["onpolicy", "onpolicy2"]
    assert "--policy-latency-max 0.5" in rounds[1]["recorded_with"]
    assert tuned["target_training"]["steps"] == 2
    # after the last round, the drafter alone trained 3 steps more from the round's drafter; the target is the
    # round's, unchanged
    assert tuned["initialised_from"]["model_dir"] == str(work / "before_drafter_fine_tune")
    assert tuned["drafter_fine_tune"]["steps"] == 3 and tuned["drafter_training"]["steps"] == 3
    assert last_round["drafter_training"]["steps"] == 2
    import torch

    from plan_stack.planning.model_dir import load_planner_model

    final, round_model = load_planner_model(out), load_planner_model(work / "before_drafter_fine_tune")
    round_target = dict(round_model.target.model.named_parameters())
    assert all(torch.equal(p, round_target[n]) for n, p in final.target.model.named_parameters())
    round_drafter = dict(round_model.drafter.named_parameters())
    assert any(not torch.equal(p, round_drafter[n]) for n, p in final.drafter.named_parameters())
    # resumed, both rounds are in the manifest: nothing is recorded or trained again
    stamp = (out / "manifest.json").stat().st_mtime_ns
    assert main(["train", "--robot", "drive", "--data", str(tmp_path / "data"), "--work", str(work),
                 "--out", str(out), "--stages", "onpolicy", "--resume"]) == 0
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
