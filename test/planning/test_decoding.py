"""AR / DFlash / VFlash decoders: identity with AR, gate, fallbacks, rejections, accounting."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.decoders import DecoderConfig, Decoding
from plan_stack.planning.decoding import ALGORITHMS, Decoder
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
    res = Decoder(text_target, None, DecoderConfig(budget=5)).generate(Prompt(torch.tensor([3, 4])), decoder="ar")
    assert len(res.tokens) <= 5 and res.decoder == "ar"


def test_every_decoding_has_one_row_in_the_table_and_only_ar_runs_without_a_drafter():
    assert set(ALGORITHMS) == set(Decoding)
    assert [d for d, a in ALGORITHMS.items() if not a.drafts] == [Decoding.AR]
    assert [d for d, a in ALGORITHMS.items() if a.hands_over] == [Decoding.VFLASH]


def test_the_loop_takes_each_decodings_steps_from_its_row(text_target, small_drafter, monkeypatch):
    """A row is all a decoding is: give `dflash` the AR row and the loop decodes AR with it (no drafter
    pass), the while-loop untouched."""
    dec = Decoder(text_target, small_drafter(text_target), DecoderConfig(budget=24))
    prompt = _random_prompts(text_target, 1, 3)[0]
    ar = dec.generate(prompt, decoder="ar")
    monkeypatch.setitem(ALGORITHMS, Decoding.DFLASH, ALGORITHMS[Decoding.AR])
    as_ar = dec.generate(prompt, decoder="dflash")
    assert as_ar.tokens == ar.tokens and as_ar.decoder == "dflash"
    assert as_ar.stats.drafter_forwards == 0 and as_ar.stats.target_forwards == ar.stats.target_forwards
