"""AR, DFlash and VFlash decoders behind one call (Algorithm 1 of *VFlash: Enabling System-1 VLMs for Physical AI*).

Read bottom-up: the steps (`ar_step`, `spec_step`, and `primitive_path.primitive_step`), the table that
says which step each decoding takes (`ALGORITHMS`), then the loop (`Decoder.generate`). Every step keeps
the invariant of `decode_state`: the target cache holds everything but the anchor, the drafter's context
mirrors it.

* `ar`: one target forward per token; greedy, restricted inside primitives
  to the legal tokens of the grammar (grammar.Grammar).
* `dflash`: block [anchor, MASK x 15] drafted in one drafter pass, verified
  by one target pass; keep the longest prefix equal to the target's (masked)
  greedy tokens plus the target's own next token. Inside primitives drafts
  and verification use the same grammar masks, so greedy output is
  token-identical to `ar`. Where its proposals are rejected so often that a
  speculative step costs more per committed token than AR steps (measured
  while decoding, per path: text and each primitive kind), that path runs AR
  steps and speculates again now and then (`SpeculationSchedule`); the
  tokens are the same either way.
* `vflash`: DFlash for text; when the anchor is a primitive start token with
  a valid declared block size B, the primitive path (`primitive_path`): one
  drafter pass fills all B-1 positions, a gate accepts the block (one target
  pass) or falls back to constrained AR. A text block whose accepted prefix
  contains a start token is cut after it so that the primitive path takes
  over (its proposals stop there). Once decoding has stopped (end of
  response, budget) the drafter's context is not extended.

A declared block size that matches no layout, is missing or exceeds the
remaining budget is rejected before drafting (`stats.blocks_rejected`) and
the primitive is decoded with constrained AR in *open* mode (the model picks
P; the grammar only lets a waypoint start if the primitive can still close
within the budget). If not even the shortest primitive fits, decoding stops
with `stop_reason == "budget"` and the unfinished primitive is reported in
`errors`, never returned as a primitive.
"""
from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.decode_state import DecodeState, DecodeStats, Path, PrimitiveSpan
from plan_stack.planning.decoders import DECODINGS, DEFAULT_TEXT_BLOCK, DecoderConfig, Decoding
from plan_stack.planning.errors import LayoutError, PlanningError
from plan_stack.planning.fields import PrimitiveFields, tokens_to_fields
from plan_stack.planning.gate import PlausibilityGate
from plan_stack.planning.grammar import TokenSets
from plan_stack.planning.primitive_path import primitive_step
from plan_stack.planning.quantisation import Ranges, merge_ranges
from plan_stack.planning.speculation import SpeculationSchedule
from plan_stack.planning.target import Prompt, TargetAdapter
from plan_stack.planning.tracker import Event

__all__ = ["Decoder", "DecodeResult", "ALGORITHMS", "Algorithm", "Step", "ar_step", "spec_step"]


@dataclasses.dataclass
class DecodeResult:
    tokens: list[int]
    text: str  # whole output, special tokens included
    subtask: str  # plain text before the first tool call / primitive
    primitives: list[PrimitiveFields]
    features: torch.Tensor  # [n, H] target last hidden states over the primitive positions that were fed
    stats: DecodeStats
    stop_reason: str  # "eos", "budget", "cancelled"
    decoder: str  # the Decoding's name
    errors: list[str]
    spans: list[PrimitiveSpan]


# -- steps ----------------------------------------------------------------------------------------------


def ar_step(s: DecodeState, path: Path) -> None:
    """One target forward over the anchor ([1] position, logits [1, V]); commits its masked greedy token."""
    before = s.target.length
    step = s.target.forward([s.tokens[-1]])
    s.stats.count_target(path)
    s.commit(s.greedy(step.logits[0]))
    s.sync(step, before)


def spec_step(s: DecodeState, path: Path) -> None:
    """DFlash: one drafter pass proposes up to text_block-1 tokens, one target pass verifies them.

    Shapes: drafter logits [n_prop, V] for block [anchor, MASK x n_prop]; the target feeds [anchor] + props
    (k + 1 <= n_prop + 1 positions) and returns logits [k + 1, V], row i predicting the token after
    position i.
    """
    anchor = s.tokens[-1]
    n_prop = min(s.text_block - 1, s.budget - len(s.tokens))
    logits = s.drafter.draft(anchor, n_prop + 1)
    s.stats.count_drafter(path)
    # Proposals: the drafter's greedy tokens under the grammar, walked on a copy of the tracker.
    walk = s.tracker.copy()
    props: list[int] = []
    for i in range(n_prop):
        tok = s.target.greedy(logits[i], walk.allowed())
        props.append(tok)
        ev = walk.advance(tok)
        if ev is Event.TRUNCATED or (tok in s.eos and not walk.in_primitive):
            break
        if s.hands_over and ev.opens:
            break  # commit cuts after a start token: verifying proposals past it is wasted work
    before = s.target.length
    step = s.target.forward([anchor] + props)
    s.stats.count_target(path)
    # Acceptance (greedy verification): the longest prefix of proposals equal to the target's own masked
    # greedy tokens, then the target's token at the first mismatch (or after the last proposal). Every
    # committed token is the target's greedy choice, so the output is AR's, token for token.
    verify = s.tracker.copy()
    accepted: list[int] = []
    for i in range(len(props) + 1):
        g = s.target.greedy(step.logits[i], verify.allowed())
        accepted.append(g)
        if i == len(props) or props[i] != g:
            break
        verify.advance(g)
    start_ids = s.vocab.start_ids
    for j, tok in enumerate(accepted):
        s.commit(tok)
        if s.stop:
            break
        if s.hands_over and tok in start_ids and s.tracker.in_primitive and j < len(accepted) - 1:
            break  # the primitive path takes over from this start token
    s.sync(step, before)


# -- which step each decoding takes ------------------------------------------------------------------


class Step(enum.Enum):
    AR = "ar"  # one target forward (schedule: an AR step's time)
    SPEC = "spec"  # a speculative block (schedule: its time and committed tokens)
    SPEC_SKIPPED = "spec_skipped"  # an AR step where speculation does not pay (`stats.spec_skipped`)
    PRIMITIVE = "primitive"  # VFlash's primitive path (not timed for the schedule)


#: what each step runs
STEPS: dict[Step, Callable[[DecodeState, Path], None]] = {
    Step.AR: ar_step, Step.SPEC: spec_step, Step.SPEC_SKIPPED: ar_step, Step.PRIMITIVE: primitive_step}


def _ar_next(s: DecodeState) -> Step:
    return Step.AR


def _dflash_next(s: DecodeState) -> Step:
    return Step.SPEC if s.schedule.speculate(s.schedule_path) else Step.SPEC_SKIPPED


def _vflash_next(s: DecodeState) -> Step:
    if s.primitive_pending:
        return Step.PRIMITIVE
    if s.tracker.in_primitive:  # the primitive path was tried: constrained AR finishes the primitive
        return Step.AR
    return _dflash_next(s)


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """How a decoding decodes: its next step in a state, and what it asks of the drafter."""

    next_step: Callable[[DecodeState], Step]
    drafts: bool  # uses the drafter (a model directory without one cannot run it)
    hands_over: bool  # a primitive start token hands the primitive to the primitive path


#: The one table of decodings: adding a decoder adds a row here (and a `Decoding` member), not a branch.
ALGORITHMS: dict[Decoding, Algorithm] = {
    Decoding.AR: Algorithm(_ar_next, drafts=False, hands_over=False),
    Decoding.DFLASH: Algorithm(_dflash_next, drafts=True, hands_over=False),
    Decoding.VFLASH: Algorithm(_vflash_next, drafts=True, hands_over=True),
}


# -- the decoder ------------------------------------------------------------------------------------


class Decoder:
    """One call for all decoders: `generate(prompt, images, budget, decoder)`."""

    def __init__(self, target: TargetAdapter, drafter: Any = None, config: DecoderConfig | None = None,
                 ranges: Ranges | None = None, workspace: Ranges | None = None):
        """`ranges`: the model's coordinate ranges (`quantisation.merge_ranges`; default `quantisation.RANGES`);
        `workspace`: per space and axis the box a plausible drafted 3D waypoint lies in (None: no check)."""
        self.target = target
        self.drafter = drafter
        self.config = config or DecoderConfig()
        self.vocab = target.vocab
        self.sets = TokenSets(self.vocab)
        self.ranges = merge_ranges(ranges)
        self.workspace = {s: {a: (float(v[0]), float(v[1])) for a, v in ax.items()}
                          for s, ax in (workspace or {}).items()}
        self.gate = PlausibilityGate(self.vocab, self.ranges, self.workspace, self.config.gate_max_step_m,
                                     self.config.gate_max_step_change_m)
        self.schedule = SpeculationSchedule(self.config.speculation_probe_every)

    @property
    def text_block(self) -> int:
        """The DFlash text block in use: the config's, else the drafter's trained one."""
        trained = getattr(getattr(self.drafter, "config", None), "text_block", 0)
        return int(self.config.text_block or trained or DEFAULT_TEXT_BLOCK)

    def generate(self, prompt: Prompt | str, images: Sequence[np.ndarray] = (), budget: int | None = None,
                 decoder: str | None = None, image_size: tuple[int, int] | None = None,
                 response_prefix: str | Sequence[int] = (), on_text: Callable[[str], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> DecodeResult:
        """Decode one response.

        `decoder` (a `Decoding` name) overrides the config's for this call. `image_size` (W, H) converts 2D
        coordinates to pixels (default: the first image). `response_prefix` is supplied output (e.g. the
        tool call and the primitive start token, as in the paper's latency runs): it is committed as if
        generated, runs inside the prefill, counts towards the budget and is reported as
        `stats.tokens_supplied`, not as decoded. `on_text(subtask_so_far)` is called after each step that
        extends the sub-task text; `should_stop()` is polled after each step and ends decoding with
        `stop_reason == "cancelled"`.
        """
        try:
            mode = Decoding(decoder or self.config.decoder)
        except ValueError:
            raise PlanningError(f"decoder must be one of {DECODINGS}, got {decoder!r}") from None
        algorithm = ALGORITHMS[mode]
        if algorithm.drafts and self.drafter is None:
            raise PlanningError(f"decoder {mode.value!r} needs a drafter")
        budget = self.config.budget if budget is None else int(budget)
        if budget < 1:
            raise PlanningError(f"budget must be >= 1, got {budget}")
        if isinstance(prompt, str):
            prompt = self.target.encode_prompt(prompt, images)
        if isinstance(response_prefix, str):
            response_prefix = self.target.tokenizer.encode(response_prefix, add_special_tokens=False)
        prefix = [int(t) for t in response_prefix]
        if len(prefix) >= budget:
            raise PlanningError(f"response_prefix ({len(prefix)} tokens) leaves no budget ({budget})")
        s = DecodeState(self.target, self.drafter, self.config, self.sets, self.gate, self.schedule, prompt,
                        budget, prefix, self.text_block, algorithm.drafts, algorithm.hands_over, on_text,
                        should_stop)
        _prefill(s)
        while not s.stop:
            t = time.perf_counter()
            path, kind, schedule_path, n_before = s.path, s.tracker.start_kind, s.schedule_path, len(s.tokens)
            step = algorithm.next_step(s)
            STEPS[step](s, path)
            if step is Step.SPEC_SKIPPED:
                s.stats.spec_skipped += 1
            dt = (time.perf_counter() - t) * 1e3
            if step is Step.SPEC:
                self.schedule.record_speculative(schedule_path, len(s.tokens) - n_before, dt)
            elif step is not Step.PRIMITIVE:
                self.schedule.record_ar(dt)
            if path is Path.PRIMITIVE:
                s.stats.decode_primitive_ms += dt
                s.stats.primitive_ms_by_kind[kind] = s.stats.primitive_ms_by_kind.get(kind, 0.0) + dt
            else:
                s.stats.decode_text_ms += dt
            _progress(s)
        if s.open_span is not None:
            s.errors.append(f"primitive at output {s.open_span.start} unfinished at stop ({s.stop})")
        return _result(s, mode, self.ranges, image_size or prompt.image_size)


def _prefill(s: DecodeState) -> None:
    """The prompt (and any supplied output) in one target pass; the first output token when none is supplied.

    The pass's features [T, F] start the drafter's context; its last hidden states [T, H] over the supplied
    tokens are plan features."""
    st = s.stats
    t0 = time.perf_counter()
    prompt = s.prompt
    if s.prefix:  # supplied output runs inside the prefill
        prompt = dataclasses.replace(prompt, input_ids=torch.cat(
            [prompt.input_ids.view(-1), torch.tensor(s.prefix[:-1], dtype=torch.long)]))
    step = s.target.prefill(prompt, last_logits_only=True)  # the first output token's
    st.vision_ms = step.vision_ms
    if s.drafter is not None and s.drafts:
        s.drafter.reset()
        s.drafter.extend(step.features)
    if s.prefix:
        for tok in s.prefix:
            s.commit(tok)
        st.tokens_supplied = len(s.prefix)
        n = len(s.prefix) - 1
        for i in range(n):
            s.hidden[i] = step.last_hidden[s.base_length + i]
    else:  # the prefill pass emits the first token: it counts as a (text) target forward
        st.target_forwards_text += 1
        s.commit(s.greedy(step.logits[-1]))
    st.prefill_ms = (time.perf_counter() - t0) * 1e3 - st.vision_ms


def _first_special(s: DecodeState) -> int:
    """Output index of the first tool call or primitive start token, -1 if none."""
    specials = {s.vocab[V.TOOL_CALL_START]} | set(s.vocab.start_ids)
    return next((i for i, t in enumerate(s.tokens) if t in specials), -1)


def _progress(s: DecodeState) -> None:
    """Sub-task text so far to `on_text` (until the first tool call / primitive); cancel check."""
    if s.on_text is not None and s.text_end >= 0 and len(s.tokens) > s.text_end:
        end = _first_special(s)
        text = s.target.tokenizer.decode(s.tokens[:end if end >= 0 else len(s.tokens)],
                                         skip_special_tokens=True).strip()
        s.text_end = -1 if end >= 0 else len(s.tokens)
        s.on_text(text)
    if not s.stop and s.should_stop is not None and s.should_stop():
        s.stop = "cancelled"


def _result(s: DecodeState, mode: Decoding, ranges: Ranges, image_size: tuple[int, int] | None) -> DecodeResult:
    """The committed output as text, sub-task, primitives (fields) and their features [n, H]."""
    tok = s.target.tokenizer
    cfg = s.config
    prims: list[PrimitiveFields] = []
    feats: list[torch.Tensor] = []
    n_prim = 0
    for span in s.spans:
        n_prim += span.end - span.start
        block = s.tokens[span.start:span.end + 1]
        layout = span.layout
        assert layout is not None  # set when the span closed
        needs_image = any(p.space == "image" for p in layout.parts)
        if needs_image and image_size is None:
            s.errors.append(f"primitive at output {span.start}: no image size to convert 2D coordinates")
            continue
        drive = layout.kind.startswith("drive")
        try:
            fields = tokens_to_fields(
                s.vocab, layout, block, image_size or (1, 1), sets=s.sets, ranges=ranges,
                frame_id=cfg.drive_frame_id if drive else cfg.robot_frame_id, horizon_s=cfg.drive_horizon_s)
        except LayoutError as exc:  # pragma: no cover - grammar makes this unreachable
            s.errors.append(str(exc))
            continue
        for f in fields:
            prims.append(dataclasses.replace(f, accepted_direct=span.accepted_direct,
                                             fallback_from=span.fallback_from))
        feats += [s.hidden[i] for i in range(span.start, span.end + 1) if i in s.hidden]
    s.stats.tokens_primitive = n_prim
    s.stats.tokens_text = len(s.tokens) - n_prim - s.stats.tokens_supplied
    first = _first_special(s)
    subtask = tok.decode(s.tokens[:first if first >= 0 else len(s.tokens)], skip_special_tokens=True).strip()
    features = torch.stack(feats) if feats else torch.zeros(0, s.target.hidden_size)
    return DecodeResult(tokens=list(s.tokens), text=tok.decode(s.tokens), subtask=subtask, primitives=prims,
                        features=features, stats=s.stats, stop_reason=s.stop, decoder=mode.value, errors=s.errors,
                        spans=s.spans)
