"""Stage `onpolicy` of `plan-stack train`: DAgger rounds on the model just written, then the drafter fine-tune."""
from __future__ import annotations

import pytest

from plan_stack.robots import PROFILES, profile


@pytest.mark.slow
@pytest.mark.timeout(900)  # records two drives and fine-tunes twice on the CPU: about 65 s alone, minutes when loaded
def test_the_onpolicy_rounds_record_with_the_latest_model_and_fine_tune_it(tmp_path, monkeypatch):
    """Stages target,drafter,onpolicy (tiny steps, one short drive per split, two rounds): each round keeps
    the model before it, records its split driven by it, and writes the fine-tuned model in its place."""
    import dataclasses
    import json

    from plan_stack.cli import main
    from plan_stack.embodiments.drive.recording import DriveRecordOptions, record_episode

    drive = profile("drive")
    monkeypatch.setitem(PROFILES, "drive", dataclasses.replace(
        drive, recipe=dataclasses.replace(drive.recipe, onpolicy_target_steps=2, onpolicy_drafter_steps=2,
                                          onpolicy_final_drafter_steps=3, val_keyframes=2),
        splits={**drive.splits, "onpolicy": (600000, 1), "onpolicy2": (610000, 1)},
        onpolicy_rounds=(("onpolicy", ("--duration", "1")),
                         ("onpolicy2", ("--duration", "1", "--policy-latency", "0.1", "--policy-latency-max", "0.5")))))
    opts = DriveRecordOptions(width=112, height=112, duration_s=1.0, camera_rate_hz=2.0, keyframe_period_s=0.5)
    for split in ("train", "val", *drive.planner_extra_splits):
        record_episode(drive.splits[split][0], tmp_path / "data" / split, opts)
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
