"""The state of one decode: the committed tokens, the two caches kept in step, the spans and the counters.

Loop invariant (every decoding): `tokens` is the committed output; the target KV cache holds the prompt
and every committed token except the last one, the *anchor*, which the next forward feeds. The drafter's
context cache mirrors the target cache (same length, features of the same positions). `commit` and
`sync` keep it: the step functions of `decoding` and `primitive_path` only run forwards and choose tokens.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import torch

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.decoders import DecoderConfig
from plan_stack.planning.gate import PlausibilityGate
from plan_stack.planning.grammar import TokenSets
from plan_stack.planning.speculation import SpeculationSchedule
from plan_stack.planning.target import Prompt, StepOut, TargetAdapter
from plan_stack.planning.tracker import Event, Tracker

__all__ = ["Path", "DecodeStats", "PrimitiveSpan", "DecodeState"]


class Path(enum.StrEnum):
    """Which part of the output a step decodes (what its forwards and milliseconds are counted under)."""

    TEXT = "text"
    PRIMITIVE = "primitive"


@dataclasses.dataclass
class DecodeStats:
    """Per-plan latency accounting (batch size 1)."""

    vision_ms: float = 0.0
    prefill_ms: float = 0.0
    decode_text_ms: float = 0.0
    decode_primitive_ms: float = 0.0
    target_forwards_text: int = 0  # includes the prefill pass when it emits the first token (no prefix)
    target_forwards_primitive: int = 0
    drafter_forwards_text: int = 0
    drafter_forwards_primitive: int = 0
    tokens_text: int = 0
    tokens_primitive: int = 0  # tokens after each primitive's start token
    gate_accepted: int = 0
    gate_fallback: int = 0
    gate_implausible: int = 0  # drafts that passed the schema but failed the geometric check (also in gate_fallback)
    gate_check_ms: float = 0.0  # time spent in the geometric check
    blocks_rejected: int = 0  # declared block size invalid, missing or over budget
    tokens_supplied: int = 0  # response_prefix tokens (not decoded; excluded from tau)
    positions_regenerated: int = 0
    spec_skipped: int = 0  # DFlash steps run as AR steps: speculation did not pay on their path (SpeculationSchedule)
    #: decode_primitive_ms by primitive kind (start token's kind, e.g. box / robot_2d3d_dual): a short block
    #: costs VFlash a whole draft and target pass but AR only a few steps, so the kinds' speed-ups differ
    primitive_ms_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def decode_ms(self) -> float:
        return self.decode_text_ms + self.decode_primitive_ms

    @property
    def target_forwards(self) -> int:
        return self.target_forwards_text + self.target_forwards_primitive

    @property
    def drafter_forwards(self) -> int:
        return self.drafter_forwards_text + self.drafter_forwards_primitive

    @property
    def tokens_out(self) -> int:
        return self.tokens_text + self.tokens_primitive

    @property
    def tau(self) -> float:
        """Tokens committed per target forward."""
        return self.tokens_out / max(self.target_forwards, 1)

    @property
    def tau_text(self) -> float:
        return self.tokens_text / max(self.target_forwards_text, 1)

    @property
    def tau_primitive(self) -> float:
        return self.tokens_primitive / max(self.target_forwards_primitive, 1)

    def count_target(self, path: Path) -> None:
        if path is Path.PRIMITIVE:
            self.target_forwards_primitive += 1
        else:
            self.target_forwards_text += 1

    def count_drafter(self, path: Path) -> None:
        if path is Path.PRIMITIVE:
            self.drafter_forwards_primitive += 1
        else:
            self.drafter_forwards_text += 1

    def as_dict(self) -> dict[str, float]:
        d = dataclasses.asdict(self)
        for k in ("decode_ms", "target_forwards", "drafter_forwards", "tokens_out", "tau", "tau_text",
                  "tau_primitive"):
            d[k] = getattr(self, k)
        return d


@dataclasses.dataclass
class PrimitiveSpan:
    start: int  # index of the start token in `tokens`
    end: int  # index of the last token (inclusive)
    layout: L.Layout | None  # None while an open-mode primitive is emitted (set when it closes)
    accepted_direct: bool = False
    fallback_from: int = -1


@dataclasses.dataclass
class DecodeState:
    """State of one `Decoder.generate` call (kept out of the Decoder so the decoder is reusable)."""

    target: TargetAdapter
    drafter: Any  # planning.drafter.Drafter (or a stand-in with reset / extend / draft); None without one
    config: DecoderConfig
    sets: TokenSets
    gate: PlausibilityGate
    schedule: SpeculationSchedule  # the Decoder's: where speculation pays, learnt across plans
    prompt: Prompt
    budget: int
    prefix: list[int]  # supplied output (`response_prefix`), committed inside the prefill
    text_block: int  # DFlash block: 1 anchor + proposals
    drafts: bool  # the decoding keeps the drafter's context in step with the target (dflash, vflash)
    hands_over: bool  # a primitive start token hands the primitive to `primitive_step` (vflash)
    on_text: Callable[[str], None] | None = None
    should_stop: Callable[[], bool] | None = None
    stats: DecodeStats = dataclasses.field(default_factory=DecodeStats)
    tokens: list[int] = dataclasses.field(default_factory=list)
    hidden: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)  # output index -> last hidden state
    spans: list[PrimitiveSpan] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    stop: str = ""  # why decoding stopped: "eos", "budget", "cancelled"; "" while it runs
    open_span: PrimitiveSpan | None = None  # the primitive being emitted
    attempted: bool = False  # the primitive path was already tried for the open primitive
    text_end: int = 0  # output tokens already reported to on_text (-1: the sub-task text is complete)

    def __post_init__(self) -> None:
        self.tracker = Tracker(self.vocab, self.sets, self.target.tokenizer, self.budget)
        self.eos = set(self.vocab.eos_ids)
        self.base_length = self.prompt.input_ids.numel()  # cache length before any output token

    @property
    def vocab(self) -> V.Vocab:
        return self.target.vocab

    @property
    def path(self) -> Path:
        return Path.PRIMITIVE if self.tracker.in_primitive else Path.TEXT

    @property
    def schedule_path(self) -> str:
        """The speculation schedule's path: text, or the kind of the primitive being emitted."""
        return self.tracker.start_kind if self.tracker.in_primitive else Path.TEXT

    @property
    def primitive_pending(self) -> bool:
        """A primitive of fixed layout is open and the primitive path has not been tried on it."""
        return self.tracker.fixed_layout is not None and not self.attempted

    def greedy(self, logits: torch.Tensor) -> int:
        """The target's greedy token from one logits row [V], restricted to what the grammar allows next."""
        return self.target.greedy(logits, self.tracker.allowed())

    # -- committing ---------------------------------------------------------------------
    def commit(self, tok: int, checked: bool = False) -> None:
        tr = self.tracker
        event = tr.advance(tok, checked)
        self.tokens.append(tok)
        idx = len(self.tokens) - 1
        if event.opens:
            # open-mode primitives get their layout when they close (P chosen by the model)
            self.open_span = PrimitiveSpan(idx, -1, tr.fixed_layout)
            self.attempted = False
            if event is Event.REJECTED:
                self.stats.blocks_rejected += 1
        elif event is Event.TRUNCATED:
            self.stats.blocks_rejected += 1
            self.errors.append(f"primitive at output {idx}: budget too small for any {tr.start_kind} layout")
            self.stop = "budget"
        elif event is Event.END and self.open_span is not None:
            span = self.open_span
            span.end = idx
            if span.layout is None:  # open mode: P chosen by the model
                g_kind = L.OPEN_KIND[tr.start_kind]
                n = span.end - span.start + 1
                p = next(p for p in range(1, L.MAX_WAYPOINTS + 1) if L.block_size_of(g_kind, p) >= n)
                span.layout = L.make_layout(g_kind, p)
            self.spans.append(span)
            self.open_span = None
        if tok in self.eos and not tr.in_primitive:
            self.stop = self.stop or "eos"
        if len(self.tokens) >= self.budget:
            self.stop = self.stop or "budget"

    def record(self, step: StepOut, first: int, n: int) -> None:
        """Bookkeeping after a forward whose first n positions (output index `first`...) stay cached.

        step.last_hidden [>= n, H] (plan features), step.features [>= n, F] (the drafter's context)."""
        for i in range(n):
            if first + i >= 0:
                self.hidden[first + i] = step.last_hidden[i]
        if self.drafter is not None and self.drafts and not self.stop:  # after a stop nothing is drafted
            self.drafter.extend(step.features[:n])

    def sync(self, step: StepOut, cache_before: int) -> None:
        """Roll the target back so it holds everything but the anchor; extend the drafter.

        After a stop nothing more is decoded, so every fed committed position
        is kept (its hidden state still serves as plan features).
        """
        keep = self.base_length + len(self.tokens) - (0 if self.stop else 1)
        keep = min(keep, self.target.length)
        self.target.rollback(keep)
        self.record(step, cache_before - self.base_length, keep - cache_before)
