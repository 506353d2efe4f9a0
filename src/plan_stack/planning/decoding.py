"""AR, DFlash and VFlash decoders behind one call (Algorithm 1 of *VFlash: Enabling System-1 VLMs for Physical AI*).

Loop invariant (all decoders): `tokens` is the committed output; the target
KV cache holds the prompt and every committed token except the last one, the
*anchor*, which the next forward feeds. The drafter's context cache mirrors
the target cache (same length, features of the same positions).

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
  a valid declared block size B, one drafter pass fills all B-1 positions
  under the masks (`select_block`), the gate A_s checks the schema (boxes:
  plus a confidence guard on the target's probabilities), and on success one
  target pass over the block updates the cache, emits the next token and
  yields the plan features. On failure the first r positions are kept (r=0
  for trajectories: keeping a drafted part that preceded the implausible
  one was measured to give more infeasible driving plans; boxes keep the
  coordinates before the first uncertain one), the target cache is rolled
  back and the rest is regenerated with constrained AR. A text block whose
  accepted prefix contains a start token is cut after it so that the
  primitive path takes over (its proposals stop there). Once decoding has
  stopped (end of response, budget) the drafter's context is not extended.

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
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from plan_stack.config import ConfigError, param, validate
from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError, PlanningError, ToolCallError
from plan_stack.planning.fields import PrimitiveFields, tokens_to_fields
from plan_stack.planning.grammar import Grammar, TokenSets, check_block
from plan_stack.planning.quantisation import Ranges, merge_ranges
from plan_stack.planning.selection import select_block
from plan_stack.planning.target import Prompt, StepOut, TargetAdapter
from plan_stack.planning.tool_call import parse_tool_call

DECODERS = ("ar", "dflash", "vflash")
DEFAULT_TEXT_BLOCK = 16  #: text block of a drafter that does not say what it was trained with


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Decoding options shared by the planner node, the CLI and the benchmark."""

    decoder: str = param("decoding algorithm", "vflash", choices=DECODERS)
    budget: int = param("maximum number of output tokens per plan", 256, min=1, max=65536)
    text_block: int = param("DFlash text block size (1 anchor + proposals); 0: the model's (manifest text_block, "
                            "else the drafter's trained block)", 0, min=0, max=256)
    constrain_draft: bool = param("restrict drafted primitive positions to legal tokens", True)
    box_guard: float = param(
        "box confidence guard: min p_target(draft)/max p_target per coordinate; 0 disables", 0.0, min=0.0, max=1.0)
    robot_frame_id: str = param("frame of robot primitives (camera optical frame)", "camera_optical_frame")
    drive_frame_id: str = param("frame of driving primitives (ego frame)", "base_link")
    drive_horizon_s: float = param("time spanned by driving waypoints (s)", 4.0, min=0.0)
    gate_max_step_m: float = param(
        "plausibility gate: max distance between consecutive 3D waypoints of a drafted primitive (m); 0 disables",
        0.0, min=0.0)
    speculation_probe_every: int = param(
        "DFlash steps of a path (text, a primitive kind) whose speculative steps cost more per committed token than "
        "AR steps run as AR steps, speculating again after this many (doubling while it still does not pay); "
        "0: always speculate, as the DFlash paper", 8, min=0)
    gate_max_step_change_m: float = param(
        "plausibility gate: max change between consecutive steps (|second difference|) of a drafted primitive's "
        "3D waypoints (m); 0 disables", 0.0, min=0.0)

    def __post_init__(self) -> None:
        validate(self)
        if self.text_block == 1:
            raise ConfigError("text_block must be 0 (the model's) or >= 2 (an anchor and a proposal), got 1")


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
class DecodeResult:
    tokens: list[int]
    text: str  # whole output, special tokens included
    subtask: str  # plain text before the first tool call / primitive
    primitives: list[PrimitiveFields]
    features: torch.Tensor  # [n, H] target last hidden states over the primitive positions that were fed
    stats: DecodeStats
    stop_reason: str  # "eos", "budget", "cancelled"
    decoder: str
    errors: list[str]
    spans: list[PrimitiveSpan]


class Tracker:
    """Follows committed tokens: text mode, tool calls, and the grammar inside a primitive."""

    def __init__(self, vocab: V.Vocab, sets: TokenSets, tokenizer: Any, budget: int):
        self.vocab, self.sets, self.tokenizer, self.budget = vocab, sets, tokenizer, budget
        self.count = 0
        self.grammar: Grammar | None = None
        self.start_kind = ""
        self._tool: list[int] | None = None
        self.declared: int | None = None
        self.declare_error = ""
        self.events: list[str] = []  # per advance: "", "start", "end", "truncated", "rejected"
        self._start_ids = vocab.start_ids
        self._id_to_token = {vocab[t]: t for t in V.START_TOKENS}

    def copy(self) -> Tracker:
        t = object.__new__(Tracker)
        t.__dict__.update(self.__dict__)
        t.grammar = self.grammar.copy() if self.grammar is not None else None
        t._tool = list(self._tool) if self._tool is not None else None
        t.events = []
        return t

    @property
    def in_primitive(self) -> bool:
        return self.grammar is not None

    def allowed(self) -> torch.Tensor | None:
        return None if self.grammar is None else self.grammar.allowed()

    def advance(self, tok: int, checked: bool = False) -> str:
        """Consume one committed token; returns the event it caused ("" if none). `checked`: see
        `Grammar.advance`."""
        self.count += 1
        v = self.vocab
        if self.grammar is not None:
            self.grammar.advance(tok, checked)
            if self.grammar.done:
                self.grammar = None
                return "end"
            return ""
        if tok == v[V.TOOL_CALL_START]:
            self._tool = []
        elif tok == v[V.TOOL_CALL_END] and self._tool is not None:
            body = self.tokenizer.decode(self._tool)
            self._tool = None
            try:
                self.declared, self.declare_error = parse_tool_call(body), ""
            except ToolCallError as exc:
                self.declared, self.declare_error = None, str(exc)
        elif self._tool is not None:
            self._tool.append(tok)
        elif tok in self._start_ids:
            start = self._id_to_token[tok]
            left = self.budget - self.count
            layout = L.layout_for(start, self.declared) if self.declared is not None else None
            event = "start"
            if layout is not None and layout.block_size - 1 <= left:
                self.grammar = Grammar(self.sets, layout)
            else:
                event = "rejected"
                self.grammar = Grammar(self.sets, kind=L.OPEN_KIND[start], budget_left=left)
                if self.grammar.min_length() > left:
                    self.grammar = None
                    event = "truncated"
            self.start_kind = start
            self.declared, self.declare_error = None, ""
            return event
        return ""


class SpeculationSchedule:
    """Where DFlash speculation pays, learned while decoding and kept across plans by its `Decoder`.

    A speculative step costs a drafter pass and a block verification; it saves time only where enough of the
    drafter's proposals are accepted that its milliseconds per committed token beat an AR step's. On a CPU a
    16-token verification costs about 1.5 single steps and the drafter pass another, so a path whose
    proposals are almost all rejected (a drafter that never learnt the Franka trajectories: 1.04 tokens per
    step) decodes slower than AR. Per path (text, each primitive kind) this keeps moving averages of the
    committed tokens and the milliseconds of its speculative steps, and one of an AR step's milliseconds;
    a path whose speculative tokens cost more runs AR steps, and speculates again after `probe_every` of
    them (the interval doubling, up to 32 x, while it still does not pay), so that a drafter that becomes
    useful on another scene is noticed. The committed tokens are the target's greedy ones either way.
    """

    def __init__(self, probe_every: int, smoothing: float = 0.3):
        self.probe_every = probe_every  # 0: always speculate
        self.smoothing = smoothing
        self.spec_tokens: dict[str, float] = {}  # path -> moving average of tokens committed per speculative step
        self.spec_ms: dict[str, float] = {}  # path -> moving average of a speculative step's milliseconds
        self.ar_ms: float | None = None  # moving average of an AR step's milliseconds
        self._interval: dict[str, int] = {}
        self._waited: dict[str, int] = {}

    def pays(self, path: str) -> bool:
        """Whether a speculative step of `path` is expected to commit tokens faster than AR steps (True while
        either side is unmeasured)."""
        if path not in self.spec_ms or self.ar_ms is None:
            return True
        return self.spec_ms[path] / max(self.spec_tokens[path], 1e-9) <= self.ar_ms

    def speculate(self, path: str) -> bool:
        """Whether the next step of `path` speculates. A path measured only speculatively gets one AR step
        (the comparison needs both); one that does not pay speculates once per interval."""
        if self.probe_every == 0 or path not in self.spec_ms:
            return True
        if self.ar_ms is None:
            return False
        if self.pays(path):
            self._interval.pop(path, None)
            self._waited[path] = 0
            return True
        waited = self._waited.get(path, 0) + 1
        interval = self._interval.setdefault(path, self.probe_every)
        if waited < interval:
            self._waited[path] = waited
            return False
        self._waited[path] = 0
        self._interval[path] = min(2 * interval, 32 * self.probe_every)
        return True

    def record_speculative(self, path: str, tokens: int, ms: float) -> None:
        self.spec_tokens[path] = self._average(self.spec_tokens.get(path), float(tokens))
        self.spec_ms[path] = self._average(self.spec_ms.get(path), ms, clip=True)

    def record_ar(self, ms: float) -> None:
        self.ar_ms = self._average(self.ar_ms, ms, clip=True)

    def _average(self, old: float | None, new: float, clip: bool = False) -> float:
        """Moving average; `clip`: a time counts at most 4 x the average, so one stall of the machine (a
        collection, another process) does not switch a path for the next plans, while a lasting change still
        moves it within a few steps."""
        if old is None:
            return new
        if clip:
            new = min(new, 4.0 * old)
        return old + self.smoothing * (new - old)


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
        self._geometry_cache: dict[tuple[str, int], list] = {}  # `_geometry` per layout
        self.schedule = SpeculationSchedule(self.config.speculation_probe_every)

    @property
    def text_block(self) -> int:
        """The DFlash text block in use: the config's, else the drafter's trained one."""
        trained = getattr(getattr(self.drafter, "config", None), "text_block", 0)
        return int(self.config.text_block or trained or DEFAULT_TEXT_BLOCK)

    def plausible(self, layout: L.Layout, block: Sequence[int]) -> bool:
        """Geometric part of the VFlash gate: every 3D waypoint of a (schema-valid) block inside the
        workspace box, consecutive waypoints at most `gate_max_step_m` apart, and consecutive steps
        differing by at most `gate_max_step_change_m` (a waypoint thrown metres ahead and the next one
        back on the path: each step alone can be a plausible length). A coordinate slot holding another token
        is never plausible, even with every bound off."""
        max_step, max_change = self.config.gate_max_step_m, self.config.gate_max_step_change_m
        tokens = np.asarray(block, dtype=np.int64)
        for positions, lo, step, box in self._geometry(layout):
            bins = self.vocab.coord_bins(tokens[positions])
            if bins is None:
                return False  # not schema-valid: a coordinate slot holds another token
            vals = lo + step * bins.reshape(-1, len(lo))  # [waypoints, axes]
            for ai, (b_lo, b_hi) in box:
                if not bool(((vals[:, ai] >= b_lo) & (vals[:, ai] <= b_hi)).all()):
                    return False
            d1 = np.diff(vals, axis=0)
            if max_step > 0 and len(d1) and float(np.linalg.norm(d1, axis=1).max()) > max_step:
                return False
            if max_change > 0 and len(d1) > 1 and float(np.linalg.norm(np.diff(d1, axis=0), axis=1).max()) > max_change:
                return False
        return True

    def _geometry(self, layout: L.Layout) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, list]]:
        """Per 3D part of a layout (cached): block positions of its coordinates, per axis the range's low
        end and bin width, and the workspace bounds as (axis index, (low, high))."""
        key = (layout.kind, layout.waypoints)
        cached = self._geometry_cache.get(key)
        if cached is not None:
            return cached
        out = []
        for pi, part in enumerate(layout.parts):
            if part.space == "image":
                continue
            rng = self.ranges[part.space]
            positions = np.array([j for j, s in enumerate(layout.slots) if s.part == pi and s.token is None],
                                 dtype=np.int64)
            lo = np.array([rng[a][0] for a in part.axes])
            step = np.array([(rng[a][1] - rng[a][0]) / V.N_BINS for a in part.axes])
            space_box = self.workspace.get(part.space, {})
            box = [(ai, space_box[a]) for ai, a in enumerate(part.axes) if a in space_box]
            out.append((positions, lo, step, box))
        self._geometry_cache[key] = out
        return out

    # -- helpers --------------------------------------------------------------------
    def _greedy(self, logits: torch.Tensor, tracker: Tracker) -> int:
        return self.target.greedy(logits, tracker.allowed())

    def generate(self, prompt: Prompt | str, images: Sequence[np.ndarray] = (), budget: int | None = None,
                 decoder: str | None = None, image_size: tuple[int, int] | None = None,
                 response_prefix: str | Sequence[int] = (), on_text: Callable[[str], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> DecodeResult:
        """Decode one response.

        `image_size` (W, H) converts 2D coordinates to pixels (default: the
        first image). `response_prefix` is supplied output (e.g. the tool call
        and the primitive start token, as in the paper's latency runs): it is
        committed as if generated, runs inside the prefill, counts towards the
        budget and is reported as `stats.tokens_supplied`, not as decoded.
        `on_text(subtask_so_far)` is called after each step that extends the
        sub-task text; `should_stop()` is polled after each step and ends
        decoding with `stop_reason == "cancelled"`.
        """
        mode = decoder or self.config.decoder
        if mode not in DECODERS:
            raise PlanningError(f"decoder must be one of {DECODERS}, got {mode!r}")
        if mode != "ar" and self.drafter is None:
            raise PlanningError(f"decoder {mode!r} needs a drafter")
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
        run = _Run(self, prompt, budget, mode, prefix)
        run.on_text, run.should_stop = on_text, should_stop
        return run.execute(image_size or prompt.image_size)


class _Run:
    """State of one generate() call (kept out of Decoder so the decoder is reusable)."""

    def __init__(self, dec: Decoder, prompt: Prompt, budget: int, mode: str, prefix: list[int]):
        self.prefix = prefix
        self.dec, self.cfg, self.prompt, self.budget, self.mode = dec, dec.config, prompt, budget, mode
        self.target, self.drafter, self.vocab, self.sets = dec.target, dec.drafter, dec.vocab, dec.sets
        self.stats = DecodeStats()
        self.tracker = Tracker(self.vocab, self.sets, self.target.tokenizer, budget)
        self.tokens: list[int] = []
        self.hidden: dict[int, torch.Tensor] = {}  # output index -> last hidden state when fed
        self.spans: list[PrimitiveSpan] = []
        self.errors: list[str] = []
        self.stop = ""
        self._open: PrimitiveSpan | None = None
        self._attempted = False  # VFlash primitive path already tried for the open primitive
        self._eos = set(self.vocab.eos_ids)
        self.base_length = prompt.input_ids.numel()  # cache length before any output token
        self.on_text: Callable[[str], None] | None = None
        self.should_stop: Callable[[], bool] | None = None
        self._text_end = 0  # output tokens already reported to on_text

    # -- committing ---------------------------------------------------------------------
    def commit(self, tok: int, checked: bool = False) -> None:
        tr = self.tracker
        event = tr.advance(tok, checked)
        self.tokens.append(tok)
        idx = len(self.tokens) - 1
        if event in ("start", "rejected"):
            # open-mode primitives get their layout when they close (P chosen by the model)
            self._open = PrimitiveSpan(idx, -1, tr.grammar.layout if tr.grammar is not None else None)
            self._attempted = False
            if event == "rejected":
                self.stats.blocks_rejected += 1
        elif event == "truncated":
            self.stats.blocks_rejected += 1
            self.errors.append(f"primitive at output {idx}: budget too small for any {tr.start_kind} layout")
            self.stop = "budget"
        elif event == "end" and self._open is not None:
            span = self._open
            span.end = idx
            if span.layout is None:  # open mode: P chosen by the model
                g_kind = L.OPEN_KIND[tr.start_kind]
                n = span.end - span.start + 1
                p = next(p for p in range(1, L.MAX_WAYPOINTS + 1) if L.block_size_of(g_kind, p) >= n)
                span.layout = L.make_layout(g_kind, p)
            self.spans.append(span)
            self._open = None
        if tok in self._eos and not tr.in_primitive:
            self.stop = self.stop or "eos"
        if len(self.tokens) >= self.budget:
            self.stop = self.stop or "budget"

    def _record(self, step: StepOut, first: int, n: int) -> None:
        """Bookkeeping after a forward whose first n positions (output index `first`...) stay cached."""
        for i in range(n):
            if first + i >= 0:
                self.hidden[first + i] = step.last_hidden[i]
        if self.drafter is not None and self.mode != "ar" and not self.stop:  # after a stop nothing is drafted
            self.drafter.extend(step.features[:n])

    def _sync(self, step: StepOut, cache_before: int) -> None:
        """Roll the target back so it holds everything but the anchor; extend the drafter.

        After a stop nothing more is decoded, so every fed committed position
        is kept (its hidden state still serves as plan features).
        """
        keep = self.base_length + len(self.tokens) - (0 if self.stop else 1)
        keep = min(keep, self.target.length)
        self.target.rollback(keep)
        self._record(step, cache_before - self.base_length, keep - cache_before)

    # -- steps -------------------------------------------------------------------------------
    def ar_step(self, path: str) -> None:
        before = self.target.length
        step = self.target.forward([self.tokens[-1]])
        self._count_target(path)
        self.commit(self.dec._greedy(step.logits[0], self.tracker))
        self._sync(step, before)

    def spec_step(self, path: str) -> None:
        anchor = self.tokens[-1]
        n_prop = min(self.dec.text_block - 1, self.budget - len(self.tokens))
        logits = self.drafter.draft(anchor, n_prop + 1)
        self._count_drafter(path)
        walk = self.tracker.copy()
        props: list[int] = []
        for i in range(n_prop):
            tok = self.dec.target.greedy(logits[i], walk.allowed())
            props.append(tok)
            ev = walk.advance(tok)
            if ev in ("truncated",) or (tok in self._eos and not walk.in_primitive):
                break
            if self.mode == "vflash" and ev in ("start", "rejected"):
                break  # commit cuts after a start token: verifying proposals past it is wasted work
        before = self.target.length
        step = self.target.forward([anchor] + props)
        self._count_target(path)
        verify = self.tracker.copy()
        accepted: list[int] = []
        for i in range(len(props) + 1):
            g = self.dec.target.greedy(step.logits[i], verify.allowed())
            accepted.append(g)
            if i == len(props) or props[i] != g:
                break
            verify.advance(g)
        start_ids = self.vocab.start_ids
        for j, tok in enumerate(accepted):
            self.commit(tok)
            if self.stop:
                break
            if self.mode == "vflash" and tok in start_ids and self.tracker.in_primitive and j < len(accepted) - 1:
                break  # the primitive path takes over from this start token
        self._sync(step, before)

    def primitive_step(self) -> None:
        """VFlash: one drafter pass + gate + (one target pass | rollback and constrained AR)."""
        self._attempted = True
        grammar, span = self.tracker.grammar, self._open
        # called only inside a primitive of fixed layout (see `run`), which `commit` opened
        assert grammar is not None and grammar.layout is not None and span is not None
        layout = grammar.layout
        anchor = self.tokens[-1]
        b = layout.block_size
        logits = self.drafter.draft(anchor, b)
        self._count_drafter("primitive")
        if self.cfg.constrain_draft:
            draft = select_block(self.sets, layout, logits).tolist()
        else:
            draft = logits.argmax(-1).tolist()
        bad = check_block(self.sets, layout, draft)
        if bad == 0:
            t0 = time.perf_counter()
            ok = self.dec.plausible(layout, [anchor] + draft)
            self.stats.gate_check_ms += (time.perf_counter() - t0) * 1e3
            if not ok:
                self.stats.gate_implausible += 1
                bad = 1  # regenerate the whole primitive with constrained AR
        before = self.target.length
        if bad == 0:
            guarded = layout.kind == "box" and self.cfg.box_guard > 0  # reads every position's logits
            step = self.target.forward([anchor] + draft, last_logits_only=not guarded)
            self._count_target("primitive")
            r = self._box_guard(layout, draft, step) if guarded else -1
            if r < 0:
                for tok in draft:
                    self.commit(tok, checked=True)  # the gate's check_block has validated the block
                span.accepted_direct = True
                self.stats.gate_accepted += 1
                if not self.stop:
                    self.commit(self.dec._greedy(step.logits[-1], self.tracker))
                self._sync(step, before)
                return
        else:
            r = bad - 1 if layout.kind == "box" else 0
            step = None
        # gate failed: keep the first r drafted positions, regenerate the rest with constrained AR
        self.stats.gate_fallback += 1
        self.stats.positions_regenerated += b - 1 - r
        span.fallback_from = r + 1
        for tok in draft[:r]:
            self.commit(tok)
        if step is not None:
            self._sync(step, before)  # rolls the cache back to anchor + kept positions
        elif r > 0:  # kept positions were never fed: feed all but the new anchor
            fed = self.target.forward([anchor] + draft[:r - 1])
            self._count_target("primitive")
            self._sync(fed, before)

    def _box_guard(self, layout: L.Layout, draft: list[int], step: StepOut) -> int:
        """Index r of the first coordinate the target finds uncertain (keep r positions), -1 if none
        (called only with the guard on: `box_guard` > 0)."""
        g = Grammar(self.sets, layout)
        for j, tok in enumerate(draft):
            allowed = g.allowed()
            if allowed.numel() > 1:
                p = torch.softmax(step.logits[j][allowed], -1)
                ratio = float(p[(allowed == tok).nonzero()[0, 0]] / p.max())
                if ratio < self.cfg.box_guard:
                    return j
            g.advance(tok)
        return -1

    def _count_target(self, path: str) -> None:
        if path == "primitive":
            self.stats.target_forwards_primitive += 1
        else:
            self.stats.target_forwards_text += 1

    def _count_drafter(self, path: str) -> None:
        if path == "primitive":
            self.stats.drafter_forwards_primitive += 1
        else:
            self.stats.drafter_forwards_text += 1

    # -- main loop ----------------------------------------------------------------------------
    def execute(self, image_size: tuple[int, int] | None) -> DecodeResult:
        st = self.stats
        t0 = time.perf_counter()
        prompt = self.prompt
        if self.prefix:  # supplied output runs inside the prefill
            prompt = dataclasses.replace(prompt, input_ids=torch.cat(
                [prompt.input_ids.view(-1), torch.tensor(self.prefix[:-1], dtype=torch.long)]))
        step = self.target.prefill(prompt, last_logits_only=True)  # the first output token's
        st.vision_ms = step.vision_ms
        if self.drafter is not None and self.mode != "ar":
            self.drafter.reset()
            self.drafter.extend(step.features)
        if self.prefix:
            for tok in self.prefix:
                self.commit(tok)
            st.tokens_supplied = len(self.prefix)
            n = len(self.prefix) - 1
            for i in range(n):
                self.hidden[i] = step.last_hidden[self.base_length + i]
        else:  # the prefill pass emits the first token: it counts as a (text) target forward
            st.target_forwards_text += 1
            self.commit(self.dec._greedy(step.logits[-1], self.tracker))
        st.prefill_ms = (time.perf_counter() - t0) * 1e3 - st.vision_ms
        while not self.stop:
            t = time.perf_counter()
            tr = self.tracker
            path = "primitive" if tr.in_primitive else "text"
            kind = tr.start_kind
            schedule, step_kind, n_before = self.dec.schedule, "", len(self.tokens)
            spec_path = kind if tr.in_primitive else "text"  # the schedule's path: text or the primitive's kind
            if (self.mode == "vflash" and tr.grammar is not None and tr.grammar.layout is not None
                    and not self._attempted):
                self.primitive_step()
            elif self.mode == "ar" or (self.mode == "vflash" and tr.in_primitive):
                self.ar_step(path)
                step_kind = "ar"
            elif schedule.speculate(spec_path):
                self.spec_step(path)
                step_kind = "spec"
            else:
                self.ar_step(path)
                st.spec_skipped += 1
                step_kind = "ar"
            dt = (time.perf_counter() - t) * 1e3
            if step_kind == "spec":
                schedule.record_speculative(spec_path, len(self.tokens) - n_before, dt)
            elif step_kind == "ar":
                schedule.record_ar(dt)
            if path == "primitive":
                st.decode_primitive_ms += dt
                st.primitive_ms_by_kind[kind] = st.primitive_ms_by_kind.get(kind, 0.0) + dt
            else:
                st.decode_text_ms += dt
            self._progress()
        if self._open is not None:
            self.errors.append(f"primitive at output {self._open.start} unfinished at stop ({self.stop})")
        return self._result(image_size)

    def _progress(self) -> None:
        """Sub-task text so far to `on_text` (until the first tool call / primitive); cancel check."""
        if self.on_text is not None and self._text_end >= 0 and len(self.tokens) > self._text_end:
            specials = {self.vocab[V.TOOL_CALL_START]} | set(self.vocab.start_ids)
            end = next((i for i, t in enumerate(self.tokens) if t in specials), -1)
            text = self.target.tokenizer.decode(self.tokens[:end if end >= 0 else len(self.tokens)],
                                                skip_special_tokens=True).strip()
            self._text_end = -1 if end >= 0 else len(self.tokens)
            self.on_text(text)
        if not self.stop and self.should_stop is not None and self.should_stop():
            self.stop = "cancelled"

    def _result(self, image_size: tuple[int, int] | None) -> DecodeResult:
        tok = self.target.tokenizer
        prims: list[PrimitiveFields] = []
        feats: list[torch.Tensor] = []
        n_prim = 0
        for span in self.spans:
            n_prim += span.end - span.start
            block = self.tokens[span.start:span.end + 1]
            layout = span.layout
            assert layout is not None  # set when the span closed
            needs_image = any(p.space == "image" for p in layout.parts)
            if needs_image and image_size is None:
                self.errors.append(f"primitive at output {span.start}: no image size to convert 2D coordinates")
                continue
            drive = layout.kind.startswith("drive")
            try:
                fields = tokens_to_fields(
                    self.vocab, layout, block, image_size or (1, 1), sets=self.sets, ranges=self.dec.ranges,
                    frame_id=self.cfg.drive_frame_id if drive else self.cfg.robot_frame_id,
                    horizon_s=self.cfg.drive_horizon_s)
            except LayoutError as exc:  # pragma: no cover - grammar makes this unreachable
                self.errors.append(str(exc))
                continue
            for f in fields:
                prims.append(dataclasses.replace(f, accepted_direct=span.accepted_direct,
                                                 fallback_from=span.fallback_from))
            feats += [self.hidden[i] for i in range(span.start, span.end + 1) if i in self.hidden]
        self.stats.tokens_primitive = n_prim
        self.stats.tokens_text = len(self.tokens) - n_prim - self.stats.tokens_supplied
        first = len(self.tokens)
        specials = {self.vocab[V.TOOL_CALL_START]} | set(self.vocab.start_ids)
        for i, t in enumerate(self.tokens):
            if t in specials:
                first = i
                break
        subtask = tok.decode(self.tokens[:first], skip_special_tokens=True).strip()
        features = torch.stack(feats) if feats else torch.zeros(0, self.target.hidden_size)
        return DecodeResult(tokens=list(self.tokens), text=tok.decode(self.tokens), subtask=subtask,
                            primitives=prims, features=features, stats=self.stats, stop_reason=self.stop,
                            decoder=self.mode, errors=self.errors, spans=self.spans)
