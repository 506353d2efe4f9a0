"""AR / DFlash / VFlash decoders: identity with AR, gate, fallbacks, rejections, accounting."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from plan_stack.config import ConfigError
from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.decoding import Decoder, DecoderConfig, SpeculationSchedule
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.grammar import check_block
from plan_stack.planning.target import Prompt
from plan_stack.planning.tool_call import tool_call_text

IMAGE_SIZE = (64, 48)


def _image(seed):
    return (np.random.default_rng(seed).random((48, 64, 3)) * 255).astype(np.uint8)


def _random_prompts(target, n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = rng.integers(0, 440, size=int(rng.integers(3, 14))).tolist()  # plain BPE tokens
        text = target.tokenizer.decode(ids)
        out.append(target.encode_prompt(text, [_image(seed + i)] if target.is_vl else []))
    return out


class TargetAsDrafter:
    """Identical drafter: proposes the target's own greedy continuation (then restores its cache)."""

    def __init__(self, target):
        self.t = target

    def reset(self):
        pass

    def extend(self, features):
        pass

    def draft(self, anchor, block_size):
        start = self.t.length
        rows, tok = [], anchor
        for _ in range(block_size - 1):
            logits = self.t.forward([tok]).logits[0]
            tok = int(logits.argmax())
            row = torch.zeros_like(logits)
            row[tok] = 100.0
            rows.append(row)
        self.t.rollback(start)
        return torch.stack(rows)


class NoisyOracle(TargetAsDrafter):
    """The identical drafter with a fraction of its proposals replaced by random tokens."""

    def __init__(self, target, p_wrong, seed):
        super().__init__(target)
        self.p_wrong, self.rng = p_wrong, np.random.default_rng(seed)

    def draft(self, anchor, block_size):
        logits = super().draft(anchor, block_size)
        for i in range(logits.shape[0]):
            if self.rng.random() < self.p_wrong:
                logits[i, int(self.rng.integers(0, 440))] = 1000.0
        return logits


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


@pytest.mark.parametrize("which,n,seed", [("text_target", 4, 0), ("vl_target", 3, 100)])
def test_greedy_dflash_and_vflash_text_are_token_identical_to_ar(request, small_drafter, which, n, seed):
    tg = request.getfixturevalue(which)
    # always speculating (the paper's DFlash): every step a drafter and a target pass
    dec = Decoder(tg, small_drafter(tg, seed=seed), DecoderConfig(budget=32, speculation_probe_every=0))
    starts = tg.vocab.start_ids
    for prompt in _random_prompts(tg, n, seed):
        ar = dec.generate(prompt, decoder="ar")
        df = dec.generate(prompt, decoder="dflash")
        vf = dec.generate(prompt, decoder="vflash")
        assert df.tokens == ar.tokens
        cut = next((i for i, t in enumerate(ar.tokens) if t in starts), len(ar.tokens))
        assert vf.tokens[:cut + 1] == ar.tokens[:cut + 1]  # text path (up to the first primitive)
        assert ar.stats.target_forwards == len(ar.tokens) and ar.stats.tau == 1.0
        assert df.stats.drafter_forwards == df.stats.target_forwards - 1


def test_greedy_dflash_is_identical_to_ar_inside_primitives(text_target, vl_target, small_drafter):
    """With supplied tool calls the constrained verification still reproduces constrained AR."""
    for tg, start, b in [(text_target, V.ROBOT_2D, 24), (vl_target, V.BOX, 6), (vl_target, V.DRIVE_2D, 20)]:
        dec = Decoder(tg, small_drafter(tg), DecoderConfig(budget=60))
        prompt = tg.encode_prompt("plan", [_image(3)] if tg.is_vl else [])
        prefix = tool_call_text(b) + start
        ar = dec.generate(prompt, decoder="ar", response_prefix=prefix, image_size=IMAGE_SIZE)
        df = dec.generate(prompt, decoder="dflash", response_prefix=prefix, image_size=IMAGE_SIZE)
        assert df.tokens == ar.tokens
        assert len(ar.spans) >= 1 and ar.spans[0].layout.block_size == b
        assert ar.primitives and ar.primitives[0].block_size == b


def test_partial_acceptance_keeps_identity(text_target):
    """Drafts that are partly right exercise prefix acceptance; the output must still equal AR."""
    always = DecoderConfig(budget=40, speculation_probe_every=0)  # every step speculates, whatever the wall time
    dec = Decoder(text_target, NoisyOracle(text_target, 0.15, seed=3), always)
    taus = []
    for prompt in _random_prompts(text_target, 3, 11):
        ar = dec.generate(prompt, decoder="ar")
        df = dec.generate(prompt, decoder="dflash")
        vf = dec.generate(prompt, decoder="vflash")
        assert df.tokens == ar.tokens
        cut = next((i for i, t in enumerate(ar.tokens) if t in text_target.vocab.start_ids), len(ar.tokens))
        assert vf.tokens[:cut + 1] == ar.tokens[:cut + 1]
        taus.append(df.stats.tau)
    assert 1.5 < max(taus) < 16


def test_identical_drafter_accepts_everything(text_target):
    # the oracle drafts with target steps: slower than AR, so only the paper's schedule speculates everywhere
    dec = Decoder(text_target, TargetAsDrafter(text_target), DecoderConfig(budget=49, speculation_probe_every=0))
    checked = 0
    for prompt in _random_prompts(text_target, 5, 7):
        ar = dec.generate(prompt, decoder="ar")
        if any(t in text_target.vocab.start_ids or t in text_target.vocab.eos_ids for t in ar.tokens):
            continue
        df = dec.generate(prompt, decoder="dflash")
        assert df.tokens == ar.tokens
        # prefill emits token 1; each verify commits 15 accepted proposals + the target's own token
        assert df.stats.target_forwards == 1 + math.ceil((len(df.tokens) - 1) / 16)
        assert df.stats.tau == pytest.approx(len(df.tokens) / df.stats.target_forwards)
        checked += 1
    assert checked >= 2


def test_speculation_schedule_speculates_where_it_pays_and_probes_where_it_does_not():
    sch = SpeculationSchedule(probe_every=2)
    assert sch.speculate("text")  # nothing measured: speculate
    sch.record_speculative("text", 1, 3.0)
    assert not sch.speculate("text")  # measured only speculatively: one AR step to compare
    sch.record_ar(1.0)
    assert not sch.pays("text")  # 3 ms per token against 1
    decisions = [sch.speculate("text") for _ in range(14)]
    assert decisions == [False, True, False, False, False, True] + [False] * 7 + [True]  # after 2, 4, 8 AR steps
    sch.record_speculative("robot_2d3d", 12, 4.0)  # another path, measured on its own
    assert sch.pays("robot_2d3d") and sch.speculate("robot_2d3d")
    for _ in range(10):  # the text drafter got good: the average follows and speculation resumes
        sch.record_speculative("text", 10, 3.5)
    assert sch.pays("text") and all(sch.speculate("text") for _ in range(5))
    sch.record_speculative("text", 10, 1000.0)  # one stall counts as 4 x the average: still pays
    assert sch.pays("text")
    always = SpeculationSchedule(probe_every=0)
    always.record_speculative("text", 1, 100.0)
    always.record_ar(1.0)
    assert not always.pays("text") and always.speculate("text")


@pytest.mark.timing
def test_dflash_runs_ar_steps_where_its_drafter_does_not_pay_and_keeps_ars_tokens(text_target, small_drafter):
    """An untrained drafter has nearly every proposal rejected: a speculative step then costs a drafter pass and
    a block verification for about one token, more than an AR step. The schedule measures that and runs AR
    steps instead (probing now and then); the tokens stay AR's, and the paper's schedule (0) never skips."""
    prompts = _random_prompts(text_target, 3, 5)
    adaptive = Decoder(text_target, small_drafter(text_target, seed=5), DecoderConfig(budget=40))
    always = Decoder(text_target, small_drafter(text_target, seed=5),
                     DecoderConfig(budget=40, speculation_probe_every=0))
    skipped = drafts = drafts_always = 0
    for prompt in prompts:
        ar = adaptive.generate(prompt, decoder="ar")
        df = adaptive.generate(prompt, decoder="dflash")
        ref = always.generate(prompt, decoder="dflash")
        assert df.tokens == ar.tokens == ref.tokens
        assert ref.stats.spec_skipped == 0
        assert df.stats.target_forwards == df.stats.drafter_forwards + df.stats.spec_skipped + 1  # + the prefill
        skipped, drafts = skipped + df.stats.spec_skipped, drafts + df.stats.drafter_forwards
        drafts_always += ref.stats.drafter_forwards
    assert skipped > 0 and drafts < drafts_always / 2


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


@pytest.mark.parametrize("declared,budget", [(55, 80), (54, 40), (6, 40)])
def test_bad_or_over_budget_block_sizes_are_rejected_before_drafting(text_target, small_drafter, declared, budget):
    tg = text_target
    start = V.BOX if declared == 6 else V.ROBOT_2D
    prefix = ("<tool_call>{broken json</tool_call>" if declared == 6 else tool_call_text(declared)) + start
    dec = Decoder(tg, small_drafter(tg), DecoderConfig(budget=budget))
    prompt = tg.encode_prompt("wipe the table")
    ar = dec.generate(prompt, decoder="ar", response_prefix=prefix, image_size=IMAGE_SIZE)
    vf = dec.generate(prompt, decoder="vflash", response_prefix=prefix, image_size=IMAGE_SIZE)
    assert vf.stats.blocks_rejected == 1 and ar.stats.blocks_rejected == 1
    assert vf.stats.drafter_forwards_primitive == 0 and vf.stats.gate_accepted == vf.stats.gate_fallback == 0
    assert vf.tokens[:vf.spans[0].end + 1] == ar.tokens[:ar.spans[0].end + 1]
    span = vf.spans[0]
    assert span.end < budget and check_block(dec.sets, span.layout, vf.tokens[span.start + 1:span.end + 1]) == 0
    assert vf.primitives and vf.primitives[0].block_size == span.layout.block_size


def test_budget_too_small_for_any_primitive_is_a_clean_stop(text_target, small_drafter):
    tg = text_target
    dec = Decoder(tg, small_drafter(tg), DecoderConfig(budget=30))
    prefix = tg.tokenizer.encode(tool_call_text(54) + V.ROBOT_2D)
    for mode in ("ar", "dflash", "vflash"):
        res = dec.generate(tg.encode_prompt("go"), decoder=mode, response_prefix=prefix, budget=len(prefix) + 3,
                           image_size=IMAGE_SIZE)
        assert res.stop_reason == "budget" and res.primitives == [] and len(res.tokens) == len(prefix)
        assert "budget too small" in res.errors[0]


def test_decoder_argument_errors(text_target, small_drafter):
    dec = Decoder(text_target, None)
    with pytest.raises(PlanningError, match="needs a drafter"):
        dec.generate("x", decoder="dflash")
    with pytest.raises(PlanningError, match="decoder must be"):
        dec.generate("x", decoder="beam")
    with pytest.raises(PlanningError, match="budget"):
        dec.generate("x", decoder="ar", budget=0)
    with pytest.raises(PlanningError, match="leaves no budget"):
        dec.generate("x", decoder="ar", budget=2, response_prefix=[1, 2, 3])
    with pytest.raises(ConfigError, match="^decoder"):
        DecoderConfig(decoder="greedy")
    with pytest.raises(ConfigError, match="^box_guard"):
        DecoderConfig(box_guard=2.0)
    res = Decoder(text_target, None, DecoderConfig(budget=5)).generate(Prompt(torch.tensor([3, 4])), decoder="ar")
    assert len(res.tokens) <= 5 and res.decoder == "ar"


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


def test_plausibility_gate_bounds_the_change_between_steps(text_target):
    """A waypoint thrown metres ahead and the next back on the path: every step is a plausible length,
    the change between two steps is not (the driving drafter's failure from standstill)."""
    from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens

    layout = L.make_layout("drive_2d3d", 8)
    ranges = {"drive": {"x": [0.0, 34.0], "y": [-3.0, 3.0]}}
    x = np.array([0.25, 1.0, 2.25, 4.0, 6.25, 9.0, 12.25, 16.0])  # from standstill at 2 m/s^2, 0.5 s apart

    def block(xs):
        pts = tuple((float(v), 0.0, 0.0) for v in xs)
        return fields_to_tokens(text_target.vocab, layout, [PrimitiveFields(L.KINDS["drive_2d3d"][2], arm="",
                                points=pts, uv=(0.0,) * 16)], (112, 112), ranges)

    thrown = x.copy()
    thrown[6] = 15.2  # steps 6.2 and 0.8 m against 3.25 and 3.75
    gate = Decoder(text_target, None, DecoderConfig(gate_max_step_m=6.5, gate_max_step_change_m=1.0), ranges=ranges)
    assert gate.plausible(layout, block(x))
    assert not gate.plausible(layout, block(thrown))
    steps_only = Decoder(text_target, None, DecoderConfig(gate_max_step_m=6.5), ranges=ranges)
    assert steps_only.plausible(layout, block(thrown))  # what the step bound alone let through
    with pytest.raises(ConfigError, match="^gate_max_step_change_m"):
        DecoderConfig(gate_max_step_change_m=-1.0)


def _plausible_by_waypoint(dec, layout, block):
    """The gate's geometry walked waypoint by waypoint (the reference for the vectorised `plausible`)."""
    cfg = dec.config
    for pi, part in enumerate(layout.parts):
        if part.space == "image":
            continue
        rng = dec.ranges[part.space]
        slots = [j for j, s in enumerate(layout.slots) if s.part == pi and s.token is None]
        pts = []
        for w in range(len(slots) // len(part.axes)):
            p = []
            for ai, axis in enumerate(part.axes):
                k = dec.vocab.coord_value(int(block[slots[w * len(part.axes) + ai]]))
                if k is None:
                    return False
                p.append(rng[axis][0] + (rng[axis][1] - rng[axis][0]) / V.N_BINS * k)
                lo_hi = dec.workspace.get(part.space, {}).get(axis)
                if lo_hi is not None and not lo_hi[0] <= p[-1] <= lo_hi[1]:
                    return False
            pts.append(np.array(p))
        steps = [b - a for a, b in zip(pts, pts[1:])]
        if cfg.gate_max_step_m > 0 and any(np.linalg.norm(s) > cfg.gate_max_step_m for s in steps):
            return False
        if cfg.gate_max_step_change_m > 0 and any(np.linalg.norm(b - a) > cfg.gate_max_step_change_m
                                                  for a, b in zip(steps, steps[1:])):
            return False
    return True


@settings(max_examples=60, deadline=None)
@example(seed=0, spread=1, step=0.0, change=0.0, kind="robot_2d3d", spoil=True)  # every bound off
@given(seed=st.integers(0, 2**31 - 1), spread=st.integers(1, 400), step=st.floats(0.0, 0.4),
       change=st.floats(0.0, 0.4), kind=st.sampled_from(["robot_2d3d", "robot_3d", "drive_2d3d"]),
       spoil=st.booleans())
def test_vectorised_plausibility_agrees_with_a_waypoint_walk(text_target, seed, spread, step, change, kind, spoil):
    """Random schema-valid blocks (bins around a random path), random bounds and workspace boxes; `spoil`
    puts a delimiter where a 3D coordinate belongs (not plausible)."""
    rng = np.random.default_rng(seed)
    layout = L.make_layout(kind, 6)
    ranges = {"robot": {"x": [-1.0, 1.0], "y": [-1.0, 1.0], "z": [0.0, 2.0]},
              "drive": {"x": [0.0, 34.0], "y": [-3.0, 3.0]}}
    workspace = {"robot": {"x": [-0.5, 0.6], "z": [0.2, 1.5]}, "drive": {"y": [-2.0, 2.0]}}
    dec = Decoder(text_target, None, DecoderConfig(gate_max_step_m=step, gate_max_step_change_m=change),
                  ranges=ranges, workspace=workspace if rng.random() < 0.5 else None)
    coords = text_target.vocab.coord_ids()
    block = [text_target.vocab[layout.slots[0].token]]
    centre = int(rng.integers(0, V.N_BINS + 1))
    for s in layout.slots[1:]:
        if s.token is not None:
            block.append(text_target.vocab[s.token])
        else:
            block.append(coords[int(np.clip(centre + rng.integers(-spread, spread + 1), 0, V.N_BINS))])
    assert check_block(dec.sets, layout, block[1:]) == 0
    if spoil:
        j = next(j for j, s in enumerate(layout.slots) if s.token is None and s.space != "image")
        block[j] = text_target.vocab[layout.slots[-1].token]
    assert dec.plausible(layout, block) == _plausible_by_waypoint(dec, layout, block)
    if spoil:
        assert not dec.plausible(layout, block)
