"""Exported models give PyTorch's outputs through onnxruntime (stated tolerances), and refuse misuse."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from plan_stack.actions.head import FlowHead, HeadConfig, save_checkpoint
from plan_stack.actions.policy import ChunkPolicy
from plan_stack.device import EngineError, resolve_placement
from plan_stack.engines import export as E
from plan_stack.engines.runtime import EngineSet, FlowStepEngine, tensorrt_status

#: float32 parity bounds (max abs difference): the graphs are the same ops in another order
FLOW_TOL = 1e-4
LOGIT_TOL = 1e-3
VISION_TOL = 1e-4

CPU = resolve_placement("cpu")


@pytest.fixture(scope="module")
def head():
    torch.manual_seed(0)
    return FlowHead(HeadConfig(action_dim=3, state_dim=3, horizon=8, cond_width=6, width=16, layers=2, heads=2,
                               num_steps=4)).eval()


@pytest.fixture(scope="module")
def vl():
    from plan_stack.planning.drafter import new_drafter
    from plan_stack.planning.target_build import tiny_target

    target = tiny_target("vl", layers=3, seed=3)
    torch.manual_seed(1)
    drafter = new_drafter(target, width=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64)
    return target, drafter


def test_flow_step_parity_for_any_number_of_conditioning_tokens(tmp_path, head):
    entry = E.export_flow_step(head, tmp_path)
    E.write_manifest(tmp_path, {"flow_step": entry}, {})
    step = EngineSet(tmp_path, "onnx", CPU).flow_step()
    assert entry["inputs"]["k0"]["shape"][2] == "cond_tokens"
    for tokens in (1, 5, 17):
        with torch.no_grad():
            ctx = head.encode(torch.randn(1, 3), torch.randn(1, tokens, 6))
            x, t = torch.randn(1, 8, 3), torch.rand(1, 8)
            ref = head.velocity(x, t, ctx)
        got = step(x, t, ctx.state_token, *[a for pair in ctx.kv for a in pair])
        assert got.shape == ref.shape and float((got - ref).abs().max()) < FLOW_TOL


def test_chunk_policy_on_onnx_matches_eager_chunks(tmp_path, head):
    save_checkpoint(str(tmp_path / "ckpt"), head)
    engine = FlowStepEngine(head, tmp_path / "ckpt", "onnx", CPU)
    try:
        eager = ChunkPolicy(head, "naive")
        onnx = ChunkPolicy(head, "naive", engine=engine)
        state, cond = np.array([0.1, -0.2, 0.3]), np.random.default_rng(0).normal(size=(4, 6))
        a = eager.sample(state, cond, generator=torch.Generator().manual_seed(5)).positions
        b = onnx.sample(state, cond, generator=torch.Generator().manual_seed(5)).positions
        assert np.abs(a - b).max() < 10 * FLOW_TOL
    finally:
        engine.close()


def test_an_export_of_other_weights_is_refused(tmp_path, head):
    save_checkpoint(str(tmp_path / "a"), head)
    other = FlowHead(head.cfg)
    save_checkpoint(str(tmp_path / "b"), other)
    E.write_manifest(tmp_path / "eng", {"flow_step": E.export_flow_step(other, tmp_path / "eng")},
                     {"flow_step": {"path": "b", "sha256": E.directory_hash(tmp_path / "b")}})
    with pytest.raises(EngineError, match="made from other weights"):
        FlowStepEngine(head, tmp_path / "a", "onnx", CPU, engine_dir=str(tmp_path / "eng"))


def test_drafter_pass_parity_per_block_size_and_torch_fallback_counted(tmp_path, vl):
    target, drafter = vl
    entries = E.export_drafter(drafter, [6, 16], tmp_path)
    E.write_manifest(tmp_path, entries, {})
    engine = EngineSet(tmp_path, "onnx", CPU).drafter(drafter)
    assert engine.block_sizes == [6, 16]
    feats = torch.randn(23, len(target.feature_layers) * target.hidden_size)
    drafter.reset()
    drafter.extend(feats)
    for b in (6, 16):
        ref = drafter.draft(7, b)
        got = engine.draft(7, b)
        assert got.shape == ref.shape and float((got - ref).abs().max()) < LOGIT_TOL
        assert torch.equal(got.argmax(-1), ref.argmax(-1))
    assert engine.torch_fallbacks == 0
    engine.draft(7, 9)
    assert engine.torch_fallbacks == 1
    assert engine.length == drafter.length  # the cache stays the PyTorch drafter's


def test_vflash_decode_through_the_onnx_drafter_gives_the_same_plan(tmp_path, vl):
    from plan_stack.planning import layouts as L
    from plan_stack.planning.decoders import DecoderConfig
    from plan_stack.planning.decoding import Decoder
    from plan_stack.planning.tool_call import tool_call_text

    target, drafter = vl
    block = L.block_size_of("robot_2d3d", 4)
    E.write_manifest(tmp_path, E.export_drafter(drafter, [block, drafter.config.text_block], tmp_path), {})
    engine = EngineSet(tmp_path, "onnx", CPU).drafter(drafter)
    image = [np.random.default_rng(2).integers(0, 255, (64, 64, 3), dtype=np.uint8)]
    prefix = tool_call_text(block) + "<robot_single_2d>"
    cfg = DecoderConfig(decoder="vflash", budget=block + 40)
    ref = Decoder(target, drafter, cfg).generate("plan", image, response_prefix=prefix)
    got = Decoder(target, engine, cfg).generate("plan", image, response_prefix=prefix)
    assert got.tokens == ref.tokens
    assert engine.engine_calls >= 1  # the primitive block and full text blocks ran on onnxruntime
    assert not set(engine.fallback_sizes) & {block, drafter.config.text_block}


def test_vision_encoder_parity_and_grid_check(tmp_path, vl):
    target, _ = vl
    entries = E.export_vision(target, (64, 64), 2, tmp_path)
    E.write_manifest(tmp_path, entries, {})
    encode = EngineSet(tmp_path, "onnx", CPU).vision((64, 64), 2)
    rng = np.random.default_rng(0)
    prompt = target.encode_prompt("x", [rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(2)])
    with torch.no_grad():
        ref = target.base.get_image_features(prompt.pixel_values, prompt.image_grid_thw, return_dict=True)
    got = encode(prompt.pixel_values, prompt.image_grid_thw)
    assert len(got.pooler_output) == len(ref.pooler_output)
    for a, b in zip(got.pooler_output, ref.pooler_output):
        assert a.shape == b.shape and float((a - b).abs().max()) < VISION_TOL
    for la, lb in zip(got.deepstack_features, ref.deepstack_features):
        assert float((torch.cat(list(la)) - torch.cat(list(lb))).abs().max()) < VISION_TOL
    one = target.encode_prompt("x", [np.zeros((64, 64, 3), np.uint8)])
    with pytest.raises(EngineError, match="exported for image grid"):
        encode(one.pixel_values, one.image_grid_thw)


def test_manifest_problems_are_named(tmp_path):
    with pytest.raises(EngineError, match="run `plan-stack export` first"):
        EngineSet(tmp_path)
    (tmp_path / E.MANIFEST).write_text(json.dumps({"models": {"flow_step": {"file": "gone.onnx"}}}))
    with pytest.raises(EngineError, match="missing file"):
        EngineSet(tmp_path)
    (tmp_path / E.MANIFEST).write_text(json.dumps({"models": {}}))
    with pytest.raises(EngineError, match="no exported model 'flow_step'"):
        EngineSet(tmp_path).flow_step()


def test_tensorrt_is_refused_with_a_reason_where_it_cannot_run(tmp_path, head):
    ok, reason = tensorrt_status()
    if ok:
        pytest.skip("TensorRT is usable here: covered by the GPU script")
    assert reason
    E.write_manifest(tmp_path, {"flow_step": E.export_flow_step(head, tmp_path)}, {})
    with pytest.raises(EngineError, match="tensorrt"):
        EngineSet(tmp_path, "tensorrt", CPU).flow_step()
