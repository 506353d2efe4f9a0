"""Planner model directories: round trip, manifest validation, prompt order."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from plan_stack.planning.errors import PlanningError
from plan_stack.planning.model_dir import (
    load_planner_model,
    prompt_text,
    read_manifest,
    save_planner_model,
)


def test_round_trip_keeps_weights_drafter_and_manifest(tmp_path, vl_target, small_drafter):
    drafter = small_drafter(vl_target)
    manifest = {"cameras": ["cam_high"], "image_size": [64, 64], "instruction": "pick", "robot": "aloha"}
    save_planner_model(tmp_path / "m", vl_target, drafter, manifest)
    model = load_planner_model(tmp_path / "m")
    assert model.cameras == ("cam_high",)
    assert model.image_size == (64, 64)
    assert model.manifest["robot"] == "aloha" and model.manifest["history_frames"] == 1
    for (name, a), (_, b) in zip(vl_target.model.state_dict().items(), model.target.model.state_dict().items()):
        assert torch.equal(a, b), name
    for (name, a), (_, b) in zip(drafter.state_dict().items(), model.drafter.state_dict().items()):
        assert torch.equal(a, b), name


def test_without_drafter_loads_target_only(tmp_path, vl_target):
    save_planner_model(tmp_path / "m", vl_target, None, {"cameras": ["cam_high"]})
    assert load_planner_model(tmp_path / "m").drafter is None


def test_prompt_holds_frames_in_time_order_then_text(tmp_path, vl_target):
    save_planner_model(tmp_path / "m", vl_target, None, {"cameras": ["a", "b"]})
    model = load_planner_model(tmp_path / "m")
    frames = [[np.full((32, 32, 3), 10 * (2 * k + c), np.uint8) for c in range(2)] for k in range(2)]
    prompt = model.encode("go", frames)
    direct = vl_target.encode_prompt(prompt_text("go"), [im for f in frames for im in f])
    assert torch.equal(prompt.input_ids, direct.input_ids)
    assert torch.equal(prompt.pixel_values, direct.pixel_values)
    assert prompt.image_grid_thw.shape[0] == 4


@pytest.mark.parametrize("content, match", [
    (None, "no manifest.json"),
    ("{", "invalid JSON"),
    ("[]", "JSON object"),
    (json.dumps({"image_size": [64]}), "image_size"),
    (json.dumps({"history_frames": 0}), "history_frames"),
])
def test_bad_manifests_are_refused_with_the_reason(tmp_path, content, match):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(PlanningError, match=match):
        read_manifest(tmp_path)


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(PlanningError, match="does not exist"):
        load_planner_model(tmp_path / "nope")


def test_decoder_uses_the_manifest_ranges_and_gate(tmp_path, vl_target):
    manifest = {"cameras": ["cam_high"], "coordinate_ranges": {"robot": {"x": [-0.5, 0.5]}},
                "workspace": {"robot": {"z": [0.3, 0.9]}}, "gate_max_step_m": 0.06, "gate_max_step_change_m": 0.02,
                "budget": 99}
    save_planner_model(tmp_path / "m", vl_target, None, manifest)
    model = load_planner_model(tmp_path / "m")
    dec = model.decoder()
    assert dec.ranges["robot"]["x"] == (-0.5, 0.5) and dec.workspace == {"robot": {"z": (0.3, 0.9)}}
    assert dec.config.gate_max_step_m == 0.06 and dec.config.budget == 99
    assert dec.config.gate_max_step_change_m == 0.02
    assert model.ranges == dec.ranges


def test_the_text_block_is_the_configs_else_the_manifests_else_the_drafters(tmp_path, vl_target):
    from plan_stack.config import ConfigError
    from plan_stack.planning.decoders import DEFAULT_TEXT_BLOCK, DecoderConfig

    save_planner_model(tmp_path / "m", vl_target, None, {"text_block": 17})
    model = load_planner_model(tmp_path / "m")
    assert model.decoder().text_block == 17
    assert model.decoder(DecoderConfig(decoder="ar", text_block=20)).text_block == 20
    save_planner_model(tmp_path / "n", vl_target, None, {})
    assert load_planner_model(tmp_path / "n").decoder().text_block == DEFAULT_TEXT_BLOCK  # no drafter to ask
    with pytest.raises(ConfigError, match="text_block"):
        DecoderConfig(text_block=1)


def test_a_decoding_that_needs_a_drafter_is_refused_when_the_directory_has_none(tmp_path, vl_target):
    from plan_stack.config import ConfigError
    from plan_stack.planning.decoders import DecoderConfig

    save_planner_model(tmp_path / "m", vl_target, None, {})
    model = load_planner_model(tmp_path / "m")
    assert model.decoder().config.decoder == "ar"  # the default: the best decoding the directory has
    with pytest.raises(ConfigError, match="^decoder: 'vflash' needs a drafter, and the model directory has none"):
        model.decoder(DecoderConfig())
    with pytest.raises(ConfigError, match="^decoder: 'dflash' needs a drafter"):
        model.decoder(DecoderConfig(decoder="ar"), decodings=["ar", "dflash"])  # those generate will be asked for
    assert model.decoder(DecoderConfig(), decodings=["ar"]).config.decoder == "vflash"


def test_bad_coordinate_ranges_are_refused(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"coordinate_ranges": {"robot": {"x": [1, 0]}}}))
    with pytest.raises(PlanningError, match="coordinate_ranges"):
        read_manifest(tmp_path)
