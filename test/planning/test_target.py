"""Target adapter: explicit (multi-axis) positions, block forwards, rollback, loading."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.planning.errors import PlanningError
from plan_stack.planning.target import Prompt, spread_layers

TOL = 1e-4  # float32, tiny models: block vs step forwards differ by ~1e-7


def _image(seed=0, h=48, w=64):
    return (np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)


@pytest.mark.parametrize("which", ["text_target", "vl_target"])
def test_block_steps_rollback_and_fresh_prefill_agree(request, which):
    tg = request.getfixturevalue(which)
    images = [_image()] if tg.is_vl else []
    prompt = tg.encode_prompt("pick up the cube", images)
    out = tg.prefill(prompt)
    n = prompt.input_ids.numel()
    assert out.logits.shape == (n, tg.vocab.size)
    assert out.features.shape == (n, len(tg.feature_layers) * tg.hidden_size)
    assert (out.vision_ms > 0) == tg.is_vl
    seq = [11, 12, 13, 14, 15, 16]
    block = tg.forward(seq)
    assert tg.length == n + len(seq)
    tg.rollback(n)  # rejected draft
    steps = torch.cat([tg.forward([s]).logits for s in seq])
    assert torch.allclose(block.logits, steps, atol=TOL)
    tg.rollback(n + 3)
    after = tg.forward(seq[3:4]).logits[0]
    fresh = tg.prefill(Prompt(torch.cat([prompt.input_ids, torch.tensor(seq[:3])]), prompt.pixel_values,
                              prompt.image_grid_thw))
    assert torch.allclose(after, tg.forward(seq[3:4]).logits[0], atol=TOL)
    assert torch.allclose(fresh.logits[-1], steps[2], atol=TOL)
    with pytest.raises(PlanningError, match="rollback"):
        tg.rollback(tg.length + 1)


def test_vl_positions_match_the_models_own_full_forward(vl_target):
    """Our incremental multi-axis positions equal HF's from-scratch get_rope_index on the whole sequence."""
    tg = vl_target
    prompt = tg.encode_prompt("open the drawer", [_image(1, 64, 96)])
    tg.prefill(prompt)
    seq = [20, 21, 22, 23]
    inc = tg.forward(seq).logits
    ids = torch.cat([prompt.input_ids, torch.tensor(seq)]).view(1, -1)
    mm = (ids == tg.model.config.image_token_id).int()
    with torch.no_grad():
        ref = tg.model(input_ids=ids, pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw,
                       mm_token_type_ids=mm).logits[0, -len(seq):]
    assert torch.allclose(inc, ref.float(), atol=TOL)
    assert tg._rope_delta < 0  # an image grid compresses positions: the delta matters


@pytest.mark.parametrize("which", ["text_target", "vl_target"])
def test_teacher_forced_batch_equals_one_prefill_per_sequence(request, which):
    """One right-padded pass gives each sequence what its own prefill gives: features and last hidden states
    of its own rows, from its own image (different sizes, so a swapped image would not even fit)."""
    tg = request.getfixturevalue(which)
    texts = ["pick up the cube", "open the drawer and then close it again slowly", "lift"]
    sizes = [(48, 64), (64, 96), (32, 32)]
    prompts = [tg.encode_prompt(t, [_image(i, *sizes[i])] if tg.is_vl else []) for i, t in enumerate(texts)]
    prompts[1] = Prompt(torch.cat([prompts[1].input_ids, torch.tensor([11, 12, 13])]), prompts[1].pixel_values,
                        prompts[1].image_grid_thw)
    assert len({p.input_ids.numel() for p in prompts}) == 3
    batched = tg.teacher_forced(prompts)
    for p, got in zip(prompts, batched):
        ref = tg.prefill(p)
        assert got.features.shape == ref.features.shape and got.last_hidden.shape == ref.last_hidden.shape
        torch.testing.assert_close(got.features, ref.features, rtol=TOL, atol=TOL)
        torch.testing.assert_close(got.last_hidden, ref.last_hidden, rtol=TOL, atol=TOL)
    assert tg.teacher_forced([]) == []
    if tg.is_vl:  # a VL target given prompts without images: no image inputs at all
        plain = [tg.encode_prompt(t) for t in texts]
        for p, got in zip(plain, tg.teacher_forced(plain)):
            torch.testing.assert_close(got.features, tg.prefill(p).features, rtol=TOL, atol=TOL)


def test_teacher_forced_refuses_what_it_cannot_pad(vl_target):
    with pytest.raises(PlanningError, match="empty prompt"):
        vl_target.teacher_forced([Prompt(torch.zeros(0, dtype=torch.long))])
    with_image = vl_target.encode_prompt("x", [_image()])
    with pytest.raises(PlanningError, match="prompt 1: image placeholders"):
        vl_target.teacher_forced([with_image, Prompt(with_image.input_ids)])
    frame = vl_target.encode_frame(0, [_image()])
    with pytest.raises(PlanningError, match="plain prompts"):
        vl_target.teacher_forced([vl_target.streaming_prompt("x", [frame])])


@pytest.mark.parametrize(("which", "streaming"), [("text_target", False), ("vl_target", False), ("vl_target", True)])
def test_direct_decode_steps_equal_the_models_own_forward(request, which, streaming):
    """The prefill and `forward` run the text layers directly; the model's forward (`direct_steps = False`)
    gives the same bits for the prompt (images and deepstack features included), for one token and for
    blocks, after a rollback, after a streaming prefill, and leaves the same cache (the steps after it agree
    too)."""
    tg = request.getfixturevalue(which)
    assert tg.direct_steps
    if streaming:
        prompt = tg.streaming_prompt("pick up the cube", [tg.encode_frame(k, [_image(k)]) for k in (1, 2)])
    else:
        prompt = tg.encode_prompt("pick up the cube", [_image()] if tg.is_vl else [])
    outs = {}
    for direct in (False, True):
        tg.direct_steps = direct
        tg.clear_frames()
        run = [tg.prefill(prompt)]
        n = tg.length
        run += [tg.forward([11]), tg.forward([12, 13, 14, 15, 16]), tg.forward([17], last_logits_only=True)]
        tg.rollback(n + 2)
        run += [tg.forward([20, 21, 22]), tg.forward([23])]
        outs[direct] = run
    tg.direct_steps = True
    for ref, got in zip(outs[False], outs[True]):
        for name in ("logits", "features", "last_hidden"):
            a, b = getattr(ref, name), getattr(got, name)
            assert a.shape == b.shape and torch.equal(a, b), name
    tg.clear_frames()
    last_only = tg.prefill(prompt, last_logits_only=True)  # what a decoder asks for: the first token's logits
    # one row through the LM head is blocked differently from many: equal to rounding
    torch.testing.assert_close(last_only.logits, outs[True][0].logits[-1:], rtol=1e-6, atol=1e-6)
    assert torch.equal(last_only.features, outs[True][0].features)
    if tg.is_vl:
        with pytest.raises(PlanningError, match="image placeholders after the prompt"):
            tg.forward([tg.model.config.image_token_id])


def test_errors(text_target, vl_target):
    with pytest.raises(PlanningError, match="text-only"):
        text_target.encode_prompt("x", [_image()])
    with pytest.raises(PlanningError, match="HxWx3"):
        vl_target.encode_prompt("x", [np.zeros((4, 4))])
    with pytest.raises(PlanningError, match="empty prompt"):
        text_target.prefill(Prompt(torch.zeros(0, dtype=torch.long)))
    assert spread_layers(36) == (1, 9, 17, 25, 33)  # DFlash's choice for a 36-layer target
    assert spread_layers(3) == (0, 0, 0, 1, 1)


def test_adapter_misuse_errors(tokenizer, text_target, vl_target):
    from plan_stack.planning.target import TargetAdapter
    from plan_stack.planning.target_build import tiny_target

    fresh = TargetAdapter(text_target.model, tokenizer)
    with pytest.raises(PlanningError, match="forward before prefill"):
        fresh.forward([1])
    fresh.prefill(Prompt(torch.tensor([3, 4])))
    with pytest.raises(PlanningError, match="empty block"):
        fresh.forward([])
    with pytest.raises(PlanningError, match="feature_layers"):
        TargetAdapter(text_target.model, tokenizer, feature_layers=(0, 9))
    with pytest.raises(PlanningError, match="kind must be"):
        tiny_target("audio", tokenizer=tokenizer)
    no_proc = TargetAdapter(vl_target.model, tokenizer, image_processor=None)
    with pytest.raises(PlanningError, match="needs an image processor"):
        no_proc.encode_prompt("x", [_image()])
    ids = vl_target.encode_prompt("x", [_image()]).input_ids
    with pytest.raises(PlanningError, match="placeholders but no images"):
        vl_target.prefill(Prompt(ids))
    # a text-only prompt on the VL target works (positions are plain sequence indices)
    out = vl_target.prefill(vl_target.encode_prompt("just text"))
    assert out.vision_ms == 0.0 and vl_target._rope_delta == 0


def test_a_model_forward_that_ignores_the_cache_is_refused_by_name(text_target, monkeypatch):
    """A transformers whose forward names the KV cache otherwise (5.17 did) would decode every step without
    context; the adapter stops at the first forward with the reason instead."""
    forward = text_target.base.forward

    def ignoring_the_cache(*args, cache=None, **kwargs):
        return forward(*args, **kwargs)  # the model runs, our cache stays empty

    monkeypatch.setattr(text_target.base, "forward", ignoring_the_cache)
    monkeypatch.setattr(text_target, "direct_steps", False)  # the model's forward runs the prompt
    ids = torch.tensor(text_target.tokenizer.encode("pick up the cup", add_special_tokens=False))
    with pytest.raises(PlanningError, match="did not fill the KV cache.*transformers>=5.24"):
        text_target.prefill(Prompt(ids))
