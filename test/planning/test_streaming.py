"""Streaming prefill (FlashDrive): reused frame KV equals a from-scratch prefill of the same window."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.planning.decoders import DecoderConfig
from plan_stack.planning.decoding import Decoder
from plan_stack.planning.errors import PlanningError

#: float32 tolerance of the streamed step against the fresh prefill (observed ~2e-7: re-rotated keys)
TOL = 1e-4


def _frames(target, n, cameras=2, seed=0):
    rng = np.random.default_rng(seed)
    return [target.encode_frame(k, [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(cameras)])
            for k in range(n)]


def _prefill(target, prompt, reuse):
    target.reuse_frames = reuse
    try:
        return target.prefill(prompt)
    finally:
        target.reuse_frames = True


def test_streamed_window_equals_fresh_prefill_of_the_same_window(vl_target):
    t = vl_target
    t.clear_frames()
    frames = _frames(t, 7)
    k = 4
    for step in range(len(frames) - k + 1):
        window = frames[step:step + k]
        prompt = t.streaming_prompt("fold the towel\n", window)
        streamed = t.prefill(prompt)
        counts = t.last_prefill
        text = prompt.input_ids.numel() - sum(f.input_ids.numel() for f in window)
        if step == 0:
            assert counts.frames_encoded == k and counts.saved_fraction == 0.0
        else:  # only the newest frame (and the text) ran through the target
            assert counts.frames_encoded == 1
            assert counts.prefilled_tokens == window[-1].input_ids.numel() + text
        fresh = _prefill(t, prompt, reuse=False)
        assert t.last_prefill.frames_encoded == k
        assert streamed.logits.shape == (text, t.vocab.size)
        torch.testing.assert_close(streamed.logits, fresh.logits, atol=TOL, rtol=0)
        torch.testing.assert_close(streamed.features, fresh.features, atol=TOL, rtol=0)
        torch.testing.assert_close(streamed.last_hidden, fresh.last_hidden, atol=TOL, rtol=0)
        # the cache after the prefill continues identically: one more token gives the same logits
        t.prefill(prompt)
        a = t.forward([5]).logits
        _prefill(t, prompt, reuse=False)
        b = t.forward([5]).logits
        torch.testing.assert_close(a, b, atol=TOL, rtol=0)
        t.prefill(prompt)  # restore the cache of frames for the next window


def test_streaming_prompt_has_the_plain_prompt_ids_and_one_frame_equals_it(vl_target):
    t = vl_target
    rng = np.random.default_rng(3)
    images = [[rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(2)] for _ in range(3)]
    frames = [t.encode_frame(i, im) for i, im in enumerate(images)]
    plain = t.encode_prompt("go\n", [im for f in images for im in f])
    streaming = t.streaming_prompt("go\n", frames)
    assert torch.equal(plain.input_ids, streaming.input_ids)
    # one frame: frame-local attention is the plain causal prompt
    one = t.streaming_prompt("go\n", frames[:1])
    t.clear_frames()
    a = t.prefill(one).logits
    b = t.prefill(t.encode_prompt("go\n", images[0])).logits[-a.shape[0]:]
    torch.testing.assert_close(a, b, atol=TOL, rtol=0)
    # several frames: frames no longer see each other, so the result differs from the causal prompt
    c = t.prefill(streaming).logits
    d = t.prefill(plain).logits[-c.shape[0]:]
    assert (c - d).abs().max() > 1e-3


def test_repeated_frame_in_a_window_and_decoding_on_a_streamed_prompt(vl_target, small_drafter):
    t = vl_target
    t.clear_frames()
    frames = _frames(t, 3, seed=5)
    dec = Decoder(t, small_drafter(t), DecoderConfig(decoder="vflash", budget=24))
    # start-up: the first frame fills the window; everything runs once
    dec.generate(t.streaming_prompt("stack the cups\n", [frames[0]] * 3 + [frames[1]]))
    assert t.last_prefill.frames_encoded == 4
    # next step: the repeated frame is reused at two slots (two different shifts), only frames[2] runs
    prompt = t.streaming_prompt("stack the cups\n", [frames[0]] * 2 + frames[1:])
    streamed = dec.generate(prompt)
    assert t.last_prefill.frames_encoded == 1
    t.reuse_frames = False
    try:
        fresh = dec.generate(prompt)
    finally:
        t.reuse_frames = True
    assert streamed.tokens == fresh.tokens
    torch.testing.assert_close(streamed.features, fresh.features, atol=TOL, rtol=0)


def test_streaming_needs_frames_and_text(vl_target, text_target):
    with pytest.raises(PlanningError, match="at least one frame"):
        vl_target.streaming_prompt("x", [])
    with pytest.raises(PlanningError, match="at least one image"):
        vl_target.encode_frame(0, [])
    frames = _frames(vl_target, 1)
    prompt = vl_target.streaming_prompt("", frames)
    with pytest.raises(PlanningError, match="text after the frames"):
        vl_target.prefill(prompt)
