"""PlannerRuntime: observation checks, streaming window, plan checks (no ROS)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.config import ConfigError
from plan_stack.planning.model_dir import load_planner_model
from plan_stack.planning.runtime import FrameInput, MalformedObservation, PlannerRuntime, RuntimeConfig
from plan_stack.planning.tiny_models import BLOCK, CAMERAS, PREFIX, images, make_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_planner_model(make_model_dir(tmp_path_factory.mktemp("planner") / "m"))


def _obs(t, seed=0, **kw):
    return FrameInput(t, kw.pop("names", CAMERAS), kw.pop("images", images(seed)), **kw)


def test_plan_streams_frames_and_yields_checked_primitives_and_features(model):
    rt = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX))
    assert rt.history_frames == 3 and rt.streaming
    outs = [rt.plan(_obs(1.0 + 0.1 * i, seed=i)) for i in range(5)]
    first, last = outs[0], outs[-1]
    assert first.valid and first.primitives and first.primitives[0].kind == "robot_3d"
    assert first.primitives[0].accepted_direct  # constrained draft passes the schema gate
    assert first.features.shape == (BLOCK, model.target.hidden_size) and np.all(np.isfinite(first.features))
    assert first.frames == 3 and first.frames_encoded == 3  # start-up: the first frame repeated, all run once
    frame = model.target.encode_frame(-1, images(0)).input_ids.numel()
    for out in outs[1:]:  # afterwards only the new frame (and the text) runs through the target
        assert out.frames_encoded == 1 and out.prefilled_tokens == out.prompt_tokens - 2 * frame
    # the streamed plan equals a plan from a fresh prefill of the same window
    model.target.reuse_frames = False
    try:
        rt2 = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX))
        fresh = [rt2.plan(_obs(1.0 + 0.1 * i, seed=i)) for i in range(5)][-1]
    finally:
        model.target.reuse_frames = True
    assert fresh.frames_encoded == 3 and fresh.saved_prefill_fraction == 0.0
    assert fresh.primitives == last.primitives
    np.testing.assert_allclose(fresh.features, last.features, atol=1e-4)


def test_manifest_frame_id_names_the_frame_of_the_points(tmp_path):
    model = load_planner_model(make_model_dir(tmp_path / "m", manifest={"frame_id": "cam_high_optical_frame"}))
    out = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX)).plan(_obs(1.0))
    assert out.primitives[0].frame_id == "cam_high_optical_frame"


def test_non_streaming_plan_uses_the_plain_prompt(model):
    rt = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX, streaming=False, decoder="ar"))
    a = rt.plan(_obs(1.0))
    assert a.valid and a.frames_encoded == 3 and a.prefilled_tokens == a.prompt_tokens
    assert a.primitives and a.decoder == "ar"


def test_stamp_going_back_restarts_the_window(model):
    rt = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX, budget=30))
    rt.plan(_obs(2.0, 1))
    rt.plan(_obs(2.1, 2))
    assert len(rt._window) == 2
    rt.plan(_obs(1.0, 3))
    assert len(rt._window) == 1


@pytest.mark.parametrize("kw, field", [
    (dict(names=["cam_a"]), "camera_names"),
    (dict(names=["cam_a", "cam_c"]), "camera_names"),
    (dict(images=[np.zeros((48, 64, 3), np.uint8), np.zeros((48, 64), np.uint8)]), r"images\[1\] \(cam_b\)"),
    (dict(images=images(size=(32, 32))), r"images\[0\] \(cam_a\): size 32x32"),
    (dict(joint_names=["j0", "j1"], joint_positions=[0.0, float("nan")]), r"joint_state.position\[1\]: j1"),
])
def test_malformed_observations_name_the_field(model, kw, field):
    rt = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX))
    with pytest.raises(MalformedObservation, match=field):
        rt.plan(_obs(1.0, **kw))
    assert len(rt._window) == 0  # nothing was planned or kept


def test_invalid_model_output_is_not_a_valid_plan(tmp_path):
    model = load_planner_model(make_model_dir(tmp_path / "m"))
    with torch.no_grad():  # a broken target: non-finite hidden states everywhere
        model.target.model.model.language_model.norm.weight.fill_(float("inf"))
    out = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX)).plan(_obs(1.0))
    assert not out.valid and "non-finite" in out.reason


def test_cancel_and_text_progress(model):
    rt = PlannerRuntime(model, RuntimeConfig(budget=30))
    seen = []
    out = rt.plan(_obs(1.0), on_text=seen.append, should_stop=lambda: len(seen) >= 2)
    assert out.stop_reason == "cancelled" and not out.valid and out.reason == "cancelled"
    assert len(seen) == 2 and all(isinstance(s, str) for s in seen)


def test_configuration_errors(model, tmp_path):
    with pytest.raises(ConfigError, match="cameras: .* takes 2 camera"):
        PlannerRuntime(model, RuntimeConfig(cameras=("cam_a",)))
    with pytest.raises(ConfigError, match="primitive_kinds: \\['drive_3d'\\] not emitted"):
        PlannerRuntime(model, RuntimeConfig(primitive_kinds=("drive_3d",)))
    with pytest.raises(ConfigError, match="primitive_kinds"):
        RuntimeConfig(primitive_kinds=("banana",))
    with pytest.raises(ConfigError, match="response_prefix: .* no room"):
        PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX, budget=3))
    no_drafter = load_planner_model(make_model_dir(tmp_path / "nd", drafter=False))
    with pytest.raises(ConfigError, match="decoder: 'vflash' needs a drafter"):
        PlannerRuntime(no_drafter)
    assert PlannerRuntime(no_drafter, RuntimeConfig(decoder="ar")).decoder.config.decoder == "ar"
