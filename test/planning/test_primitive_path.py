"""VFlash's primitive path: one drafter and one target pass, the gate, the documented fallbacks, the box guard."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.decoders import DecoderConfig
from plan_stack.planning.decoding import Decoder
from plan_stack.planning.grammar import TokenSets, check_block
from plan_stack.planning.primitive_path import box_guard
from plan_stack.planning.tool_call import tool_call_text

IMAGE_SIZE = (64, 48)


def _image(seed):
    return (np.random.default_rng(seed).random((48, 64, 3)) * 255).astype(np.uint8)


class RiggedDrafter:
    """A real drafter whose primitive drafts are forced to chosen tokens (to build invalid blocks)."""

    def __init__(self, inner, block_size, forced):
        self.inner, self.block_size, self.forced = inner, block_size, forced  # forced: {block position: id}

    def reset(self):
        self.inner.reset()

    def extend(self, features):
        self.inner.extend(features)

    def draft(self, anchor, block_size):
        logits = self.inner.draft(anchor, block_size)
        if block_size == self.block_size:
            for pos, tok in self.forced.items():
                logits[pos - 1, tok] = 1e4
        return logits


def test_vflash_primitive_one_drafter_and_one_target_pass(vl_target, small_drafter):
    tg = vl_target
    dec = Decoder(tg, small_drafter(tg), DecoderConfig(budget=90))
    prompt = tg.encode_prompt("plan the gripper", [_image(5)])
    prefix = tool_call_text(54) + V.ROBOT_2D
    res = dec.generate(prompt, decoder="vflash", response_prefix=prefix)
    st = res.stats
    assert st.gate_accepted == 1 and st.gate_fallback == 0
    assert st.drafter_forwards_primitive == 1 and st.target_forwards_primitive == 1
    assert st.tokens_primitive == 53 and st.tau_primitive == 53
    (prim,) = res.primitives
    assert prim.kind == "robot_2d3d" and prim.block_size == 54 and prim.accepted_direct and prim.fallback_from == -1
    assert len(prim.points) == 10 and len(prim.uv) == 20 and prim.frame_id == "camera_optical_frame"
    assert res.features.shape == (54, tg.hidden_size)
    span = res.spans[0]
    assert check_block(dec.sets, span.layout, res.tokens[span.start + 1:span.end + 1]) == 0
    # the same target pass emitted the next token: text continues with DFlash afterwards
    assert len(res.tokens) == 90 and res.stop_reason == "budget"
    # a budget that ends with the primitive still yields features for the whole block
    n_prefix = len(tg.tokenizer.encode(prefix))
    res2 = dec.generate(prompt, decoder="vflash", response_prefix=prefix, budget=n_prefix + 53)
    assert res2.tokens == res.tokens[:n_prefix + 53] and res2.features.shape == (54, tg.hidden_size)
    assert torch.allclose(res2.features, res.features, atol=1e-5)
    d = res.stats.as_dict()
    assert d["decode_ms"] == pytest.approx(d["decode_text_ms"] + d["decode_primitive_ms"])
    assert d["vision_ms"] > 0 and d["prefill_ms"] > 0


def test_vflash_dual_arm_and_drive(text_target, small_drafter):
    dec = Decoder(text_target, small_drafter(text_target), DecoderConfig(budget=140))
    prompt = text_target.encode_prompt("fold the shorts")
    res = dec.generate(prompt, decoder="vflash", response_prefix=tool_call_text(108) + V.ROBOT_2D,
                       image_size=IMAGE_SIZE)
    assert [p.arm for p in res.primitives] == ["left", "right"] and res.stats.gate_accepted == 1
    res = dec.generate(prompt, decoder="vflash", response_prefix=tool_call_text(84) + V.DRIVE_2D,
                       image_size=IMAGE_SIZE)
    (prim,) = res.primitives
    assert prim.kind == "drive_2d3d" and len(prim.points) == 20 and prim.horizon_s == 4.0
    assert all(p[2] == 0.0 for p in prim.points) and prim.frame_id == "base_link"


@pytest.mark.parametrize("case", ["wrong_delimiter", "unpaired_oof", "unordered_box", "box_guard"])
def test_invalid_drafts_take_the_documented_fallback(text_target, small_drafter, case):
    tg = text_target
    vocab = tg.vocab
    c = lambda k: vocab[V.COORD_TOKENS[k]]  # noqa: E731
    prompt = tg.encode_prompt("pick the cup")
    cfg = DecoderConfig(budget=50, constrain_draft=False)
    if case == "wrong_delimiter":
        b, start, forced, keep = 14, V.ROBOT_2D, {5: vocab[V.DRIVE_END]}, 0
    elif case == "unpaired_oof":
        b, start, forced, keep = 14, V.ROBOT_2D, {1: vocab[V.OOF], 2: c(5)}, 0
    elif case == "unordered_box":
        b, start, forced, keep = 6, V.BOX, {1: c(100), 2: c(200), 3: c(50), 4: c(300), 5: vocab[V.BOX_END]}, 2
    else:
        b, start, forced, keep = 6, V.BOX, {}, None
        cfg = DecoderConfig(budget=50, box_guard=1.0)  # only the target's own argmax passes the guard
    drafter = RiggedDrafter(small_drafter(tg), b, forced)
    dec = Decoder(tg, drafter, cfg)
    prefix = tool_call_text(b) + start
    res = dec.generate(prompt, decoder="vflash", response_prefix=prefix, image_size=IMAGE_SIZE)
    assert res.stats.gate_fallback == 1 and res.stats.gate_accepted == 0
    prim = res.primitives[0]
    assert not prim.accepted_direct
    n_prefix = len(tg.tokenizer.encode(prefix))
    if keep is None:  # guard: kept coordinates are the target's argmax, so the result equals AR
        ar = dec.generate(prompt, decoder="ar", response_prefix=prefix, image_size=IMAGE_SIZE)
        assert prim.fallback_from >= 1
    else:
        assert prim.fallback_from == keep + 1
        kept = [forced[j] for j in range(1, keep + 1)]
        ar = dec.generate(prompt, decoder="ar", response_prefix=list(tg.tokenizer.encode(prefix)) + kept,
                          image_size=IMAGE_SIZE)
    # the regenerated primitive is exactly what constrained AR writes from the kept prefix
    span = res.spans[0]
    assert res.tokens[:span.end + 1] == ar.tokens[:span.end + 1]
    assert check_block(dec.sets, span.layout, res.tokens[span.start + 1:span.end + 1]) == 0
    assert span.start == n_prefix - 1


def test_plausibility_gate_falls_back_to_constrained_ar_and_counts(text_target, small_drafter):
    """An untrained drafter's 3D waypoints jump around: a tight step bound sends the primitive to
    constrained AR (same tokens as AR from there on), a loose one accepts it; both are counted."""
    tg = text_target
    prompt = tg.encode_prompt("plan the gripper")
    prefix = tool_call_text(34) + V.ROBOT  # robot_3d, P = 10
    ranges = {"robot": {"x": [-1.0, 1.0], "y": [-1.0, 1.0], "z": [0.0, 2.0]}}
    tight = Decoder(tg, small_drafter(tg), DecoderConfig(budget=60, gate_max_step_m=1e-4), ranges=ranges)
    ar = tight.generate(prompt, decoder="ar", response_prefix=prefix)
    res = tight.generate(prompt, decoder="vflash", response_prefix=prefix)
    assert res.stats.gate_implausible == 1 and res.stats.gate_fallback == 1 and res.stats.gate_accepted == 0
    assert res.stats.gate_check_ms > 0
    assert res.tokens[:len(ar.tokens)] == ar.tokens[:len(res.tokens)]
    assert res.primitives[0].fallback_from == 1 and not res.primitives[0].accepted_direct
    loose = Decoder(tg, small_drafter(tg), DecoderConfig(budget=60, gate_max_step_m=10.0), ranges=ranges)
    res = loose.generate(prompt, decoder="vflash", response_prefix=prefix)
    assert res.stats.gate_implausible == 0 and res.stats.gate_accepted == 1
    pts = np.array(res.primitives[0].points)
    assert (pts[:, :2] >= -1.0).all() and (pts[:, :2] <= 1.0).all()  # decoded with the model's ranges
    boxed = Decoder(tg, small_drafter(tg), DecoderConfig(budget=60), ranges=ranges,
                    workspace={"robot": {"x": [5.0, 6.0]}})  # no waypoint can lie there
    assert boxed.generate(prompt, decoder="vflash", response_prefix=prefix).stats.gate_implausible == 1


def test_the_box_guard_keeps_the_coordinates_before_the_first_one_the_target_doubts(vocab):
    """Row j of the target's logits predicts draft[j]; a coordinate whose probability is below `min_ratio` of
    the best legal one's is the first uncertain one (its index is how many drafted positions are kept)."""
    sets = TokenSets(vocab)
    layout = L.make_layout("box", 1)
    c = lambda k: vocab[V.COORD_TOKENS[k]]  # noqa: E731
    draft = [c(100), c(200), c(300), c(400), vocab[V.BOX_END]]
    logits = torch.zeros(len(draft) + 1, vocab.size)
    for j, tok in enumerate(draft):
        logits[j, tok] = 5.0  # the target agrees with every drafted token
    assert box_guard(sets, layout, draft, logits, 0.5) == -1
    logits[2, c(700)] = 10.0  # at v2 the target prefers another bin by far
    assert box_guard(sets, layout, draft, logits, 0.5) == 2
    assert box_guard(sets, layout, draft, logits, 1e-6) == -1  # a guard that tolerates it
