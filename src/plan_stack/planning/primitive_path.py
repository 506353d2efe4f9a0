"""VFlash's primitive path: one drafter pass fills a whole primitive, a gate accepts it or falls back.

Taken when the anchor is a primitive start token whose declared block size B gave a fixed layout (one try
per primitive). One drafter pass fills all B-1 positions under the grammar's masks (`select_block`); the
gate A_s checks the schema (`check_block`), then the geometry (`gate.PlausibilityGate`), and for boxes,
with `box_guard` on, the target's confidence in every drafted coordinate. On success one target pass over
the block updates the cache, emits the next token and yields the plan features. On failure the first r
positions are kept (r=0 for trajectories: keeping a drafted part that preceded the implausible one was
measured to give more infeasible driving plans; boxes keep the coordinates before the first uncertain
one), the target cache is rolled back and the rest is regenerated with constrained AR steps.
"""
from __future__ import annotations

import time

import torch

from plan_stack.planning import layouts as L
from plan_stack.planning.decode_state import DecodeState, Path
from plan_stack.planning.grammar import Grammar, TokenSets, check_block
from plan_stack.planning.selection import select_block
from plan_stack.planning.target import StepOut

__all__ = ["primitive_step", "box_guard"]


def primitive_step(s: DecodeState, path: Path = Path.PRIMITIVE) -> None:
    """One drafter pass + gate + (one target pass | rollback and constrained AR). `path` is always the
    primitive one (the signature of every step in `decoding.STEPS`).

    Shapes: draft logits [B-1, V] (block positions 1..B-1 after the anchor); the accepting target pass
    feeds [anchor] + draft, B positions, and reads logits [1, V] (the next token's; [B, V] for the box guard).
    """
    s.attempted = True
    span, layout = s.open_span, s.tracker.fixed_layout
    # taken only inside a primitive of fixed layout (`DecodeState.primitive_pending`), which `commit` opened
    assert layout is not None and span is not None
    anchor = s.tokens[-1]
    b = layout.block_size
    logits = s.drafter.draft(anchor, b)
    s.stats.count_drafter(Path.PRIMITIVE)
    if s.config.constrain_draft:
        draft = select_block(s.sets, layout, logits).tolist()
    else:
        draft = logits.argmax(-1).tolist()
    # Gate A_s: bad = 0 when the block is schema-valid, else 1 + the index of the first illegal position;
    # a schema-valid block that is not a plausible path counts as bad from its first position.
    bad = check_block(s.sets, layout, draft)
    if bad == 0:
        t0 = time.perf_counter()
        ok = s.gate.plausible(layout, [anchor] + draft)
        s.stats.gate_check_ms += (time.perf_counter() - t0) * 1e3
        if not ok:
            s.stats.gate_implausible += 1
            bad = 1  # regenerate the whole primitive with constrained AR
    before = s.target.length
    step: StepOut | None = None
    if bad == 0:
        guarded = layout.kind == "box" and s.config.box_guard > 0  # reads every position's logits
        step = s.target.forward([anchor] + draft, last_logits_only=not guarded)
        s.stats.count_target(Path.PRIMITIVE)
        r = box_guard(s.sets, layout, draft, step.logits, s.config.box_guard) if guarded else -1
        if r < 0:  # accepted: the whole block, then the target's own next token
            for tok in draft:
                s.commit(tok, checked=True)  # the gate's check_block has validated the block
            span.accepted_direct = True
            s.stats.gate_accepted += 1
            if not s.stop:
                s.commit(s.greedy(step.logits[-1]))
            s.sync(step, before)
            return
    else:
        r = bad - 1 if layout.kind == "box" else 0
    # gate failed: keep the first r drafted positions, regenerate the rest with constrained AR
    s.stats.gate_fallback += 1
    s.stats.positions_regenerated += b - 1 - r
    span.fallback_from = r + 1
    for tok in draft[:r]:
        s.commit(tok)
    if step is not None:
        s.sync(step, before)  # rolls the cache back to anchor + kept positions
    elif r > 0:  # kept positions were never fed: feed all but the new anchor
        fed = s.target.forward([anchor] + draft[:r - 1])
        s.stats.count_target(Path.PRIMITIVE)
        s.sync(fed, before)


def box_guard(sets: TokenSets, layout: L.Layout, draft: list[int], logits: torch.Tensor, min_ratio: float) -> int:
    """Index r of the first drafted coordinate the target finds uncertain (keep r positions), -1 if none.

    logits [B, V]: the target's over [anchor] + draft, row j predicting draft[j]. Uncertain: among the tokens
    legal there, p_target(draft) / max p_target < `min_ratio` (the `box_guard` option, > 0)."""
    g = Grammar(sets, layout)
    for j, tok in enumerate(draft):
        allowed = g.allowed()
        if allowed.numel() > 1:
            p = torch.softmax(logits[j][allowed], -1)
            ratio = float(p[(allowed == tok).nonzero()[0, 0]] / p.max())
            if ratio < min_ratio:
                return j
        g.advance(tok)
    return -1
