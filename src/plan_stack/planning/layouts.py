"""Primitive layouts, quantisation, tool calls, grammar masks and the schema gate.

Every primitive of DESIGN section 4 is a fixed sequence of *slots* once its
waypoint count P is known: the start token (the block's anchor), delimiters
and one coordinate token per axis value. The tool call declares the block size
B; the start token picks the family; together they fix P and therefore the
role of every position, which is what lets the drafter fill a whole primitive
in one parallel pass.

Three consumers share the same rules (so they cannot disagree):
* `Grammar` walks tokens one by one and gives the legal set of the next token
  (constrained AR, DFlash verification inside primitives, the gate);
* `select_block` picks the best legal block from already computed drafter
  logits, solving the cross-position rules (box u1<u2, v1<v2; `<oof>` pairs)
  exactly on those logits, without another network pass;
* `tokens_to_fields` / `fields_to_tokens` convert blocks to and from the
  fields of `plan_stack/msg/Primitive` (metres and pixels, `<oof>` <-> NaN).
"""
from __future__ import annotations

import dataclasses
import json
import math
from functools import lru_cache
from typing import Mapping, Sequence

import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError, ToolCallError

# --- quantisation ----------------------------------------------------------------

#: value ranges (lower, upper) per coordinate space and axis (DESIGN section 4)
RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "robot": {"x": (-5.0, 5.0), "y": (-5.0, 5.0), "z": (0.0, 10.0)},  # camera optical frame, m
    "drive": {"x": (-10.0, 200.0), "y": (-50.0, 50.0)},  # ego frame, m
    "image": {"u": (0.0, 1000.0), "v": (0.0, 1000.0)},  # normalised image coordinates
}


Ranges = Mapping[str, Mapping[str, Sequence[float]]]


def merge_ranges(overrides: Ranges | None) -> dict[str, dict[str, tuple[float, float]]]:
    """`RANGES` with a model's own ranges (e.g. manifest `coordinate_ranges`) laid over it.

    A model trained with tighter ranges (same token layout) spends its 1000
    bins on the space its robot reaches; decoding must use the same ranges.
    Raises LayoutError for unknown spaces/axes or lo >= hi.
    """
    out = {space: dict(axes) for space, axes in RANGES.items()}
    for space, axes in (overrides or {}).items():
        if space not in out or space == "image":
            raise LayoutError(f"coordinate range space must be one of robot, drive; got {space!r}")
        for axis, pair in axes.items():
            if axis not in out[space]:
                raise LayoutError(f"{space} has no axis {axis!r} (axes: {sorted(out[space])})")
            lo, hi = (float(v) for v in pair)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise LayoutError(f"{space}.{axis} range must have finite lo < hi, got {pair!r}")
            out[space][axis] = (lo, hi)
    return out


def quantise(q: float, lo: float, hi: float) -> int:
    """k = floor(1000 (q - lo)/(hi - lo) + 1/2), clipped to [0, 1000] (out-of-range values saturate)."""
    if not math.isfinite(q):
        raise LayoutError(f"cannot quantise non-finite value {q!r}")
    k = math.floor(V.N_BINS * (q - lo) / (hi - lo) + 0.5)
    return min(max(k, 0), V.N_BINS)


def dequantise(k: int, lo: float, hi: float) -> float:
    """q = lo + k (hi - lo)/1000."""
    if not 0 <= k <= V.N_BINS:
        raise LayoutError(f"coordinate bin {k} outside 0..{V.N_BINS}")
    return lo + k * (hi - lo) / V.N_BINS


# --- layouts ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Part:
    """One delimited run of waypoints: start token, P tuples of `axes`, end token."""

    start: str
    end: str
    axes: tuple[str, ...]
    space: str  # "image", "robot", "drive"
    box: bool = False  # a box: one (u1 v1 u2 v2) tuple with ordering, no <oof>

    @property
    def oof(self) -> bool:
        return self.space == "image" and not self.box


_BOX = Part(V.BOX, V.BOX_END, ("u", "v", "u", "v"), "image", box=True)
_R2 = Part(V.ROBOT_2D, V.ROBOT_END, ("u", "v"), "image")
_R3 = Part(V.ROBOT, V.ROBOT_END, ("x", "y", "z"), "robot")
_D2 = Part(V.DRIVE_2D, V.DRIVE_END, ("u", "v"), "image")
_D3 = Part(V.DRIVE, V.DRIVE_END, ("x", "y"), "drive")

#: layout kind -> (parts of one arm, arms, Primitive.kind)
KINDS: dict[str, tuple[tuple[Part, ...], int, str]] = {
    "box": ((_BOX,), 1, "box"),
    "robot_3d": ((_R3,), 1, "robot_3d"),
    "robot_2d3d": ((_R2, _R3), 1, "robot_2d3d"),
    "dual_3d": ((_R3,), 2, "robot_3d"),
    "dual_2d3d": ((_R2, _R3), 2, "robot_2d3d"),
    "drive_3d": ((_D3,), 1, "drive_3d"),
    "drive_2d3d": ((_D2, _D3), 1, "drive_2d3d"),
}
#: start token -> single-arm kind used when no valid block size is declared
OPEN_KIND: dict[str, str] = {V.BOX: "box", V.ROBOT: "robot_3d", V.ROBOT_2D: "robot_2d3d",
                             V.DRIVE: "drive_3d", V.DRIVE_2D: "drive_2d3d"}
MAX_WAYPOINTS = 256


@dataclasses.dataclass(frozen=True)
class Slot:
    """Role of one block position: a fixed token, or one coordinate of a waypoint."""

    token: str | None  # fixed delimiter/start token, None for a coordinate
    axis: str = ""
    space: str = ""
    part: int = 0  # index into Layout.parts (arms unrolled)
    waypoint: int = 0
    oof: bool = False  # `<oof>` legal here (2D trajectory slots)
    box_index: int = -1  # 0..3 for u1 v1 u2 v2


@dataclasses.dataclass(frozen=True)
class Layout:
    """A fully determined primitive block: kind, waypoints P and the slot of every position."""

    kind: str
    waypoints: int
    parts: tuple[Part, ...]  # arms unrolled: left parts then right parts
    slots: tuple[Slot, ...]

    @property
    def block_size(self) -> int:
        return len(self.slots)

    @property
    def start_token(self) -> str:
        return self.parts[0].start

    @property
    def arms(self) -> int:
        return KINDS[self.kind][1]


def block_size_of(kind: str, waypoints: int) -> int:
    parts, arms, _ = KINDS[kind]
    return arms * sum(2 + len(p.axes) * (1 if p.box else waypoints) for p in parts)


@lru_cache(maxsize=None)
def make_layout(kind: str, waypoints: int = 1) -> Layout:
    """Layout of `kind` with P = `waypoints` (boxes always have one tuple)."""
    if kind not in KINDS:
        raise LayoutError(f"unknown primitive kind {kind!r} (known: {sorted(KINDS)})")
    parts, arms, _ = KINDS[kind]
    if kind == "box":
        waypoints = 1
    if not 1 <= waypoints <= MAX_WAYPOINTS:
        raise LayoutError(f"waypoints {waypoints} outside 1..{MAX_WAYPOINTS}")
    unrolled = parts * arms
    slots: list[Slot] = []
    for pi, part in enumerate(unrolled):
        slots.append(Slot(part.start, part=pi))
        for w in range(1 if part.box else waypoints):
            for ai, axis in enumerate(part.axes):
                slots.append(Slot(None, axis, part.space, pi, w, part.oof, ai if part.box else -1))
        slots.append(Slot(part.end, part=pi))
    return Layout(kind, waypoints, unrolled, tuple(slots))


def layout_for(start_token: str, block_size: int) -> Layout | None:
    """The layout that a start token and a declared block size fix, or None if none matches."""
    for kind, (parts, arms, _) in KINDS.items():
        if parts[0].start != start_token:
            continue
        per_p = arms * sum(len(p.axes) for p in parts)
        fixed = arms * 2 * len(parts)
        if kind == "box":
            if block_size == 6:
                return make_layout("box")
            continue
        rest = block_size - fixed
        if rest > 0 and rest % per_p == 0 and rest // per_p <= MAX_WAYPOINTS:
            return make_layout(kind, rest // per_p)
    return None


# --- tool calls -------------------------------------------------------------------

TOOL_NAME = "atomic_decoding"


def tool_call_text(block_size: int) -> str:
    """The exact tool call a target writes before a primitive (DESIGN section 4)."""
    body = json.dumps({"name": TOOL_NAME, "arguments": {"block_size": int(block_size)}}, separators=(",", ":"))
    return f"{V.TOOL_CALL_START}{body}{V.TOOL_CALL_END}"


def parse_tool_call(body: str) -> int:
    """Block size declared by a tool-call body (the JSON between the markers).

    Raises ToolCallError for malformed JSON, another tool name or a block size
    that is not a positive integer.
    """
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"tool call is not JSON: {body!r}") from exc
    if not isinstance(obj, dict) or obj.get("name") != TOOL_NAME:
        raise ToolCallError(f"tool call name must be {TOOL_NAME!r}: {body!r}")
    args = obj.get("arguments")
    size = args.get("block_size") if isinstance(args, dict) else None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ToolCallError(f"block_size must be a positive integer: {body!r}")
    return size


# --- legal token sets -------------------------------------------------------------


class TokenSets:
    """Precomputed id tensors for one vocabulary (coordinates, `<oof>`, delimiters)."""

    def __init__(self, vocab: V.Vocab):
        self.vocab = vocab
        self.coords = torch.tensor(vocab.coord_ids(), dtype=torch.long)
        self.oof = vocab[V.OOF]
        self.coords_oof = torch.cat([self.coords, torch.tensor([self.oof])])
        self._single: dict[int, torch.Tensor] = {}
        self._index: dict[tuple[str, int], "_LayoutIndex"] = {}

    def index(self, layout: "Layout") -> "_LayoutIndex":
        """Vectorised view of a layout (cached): used by the gate and `select_block`."""
        key = (layout.kind, layout.waypoints)
        idx = self._index.get(key)
        if idx is None:
            idx = self._index[key] = _LayoutIndex(self, layout)
        return idx

    def single(self, token_id: int) -> torch.Tensor:
        t = self._single.get(token_id)
        if t is None:
            t = self._single[token_id] = torch.tensor([token_id], dtype=torch.long)
        return t

    def slot_ids(self, slot: Slot) -> torch.Tensor:
        """Legal ids of a slot on its own (before cross-position rules)."""
        if slot.token is not None:
            return self.single(self.vocab[slot.token])
        if slot.box_index in (0, 1):
            return self.coords[:-1]  # u1, v1 < 1000 so that u2 > u1 stays possible
        if slot.box_index in (2, 3):
            return self.coords[1:]
        return self.coords_oof if slot.oof else self.coords

    def layout_mask(self, layout: Layout) -> torch.Tensor:
        """[B-1, V] bool: per-position legal tokens of positions 1..B-1 (slot rules only)."""
        mask = torch.zeros(layout.block_size - 1, self.vocab.size, dtype=torch.bool)
        for j, slot in enumerate(layout.slots[1:]):
            mask[j, self.slot_ids(slot)] = True
        return mask


# --- grammar: legal next token given the prefix -------------------------------------


class Grammar:
    """Legal next tokens inside one primitive, given everything emitted so far.

    With a fixed layout (valid declared block size) it follows the slots, with
    the cross-position rules applied against the actual previous tokens. In
    *open* mode (no usable block size) P is chosen by the model: a waypoint may
    start only if the rest of the primitive still fits in `budget_left`
    tokens, so a primitive is always closed before the budget ends.
    `budget_left` counts tokens still allowed after the start token.
    """

    def __init__(self, sets: TokenSets, layout: Layout | None = None, *, kind: str | None = None,
                 budget_left: int | None = None):
        self.sets = sets
        self.layout = layout
        self.emitted: list[int] = []  # tokens after the start token
        self.budget_left = budget_left
        if layout is None:
            if kind is None:
                raise LayoutError("Grammar needs a layout or an open kind")
            self.parts = KINDS[kind][0]  # open mode: one arm
            self.kind = kind
            self._part, self._axis, self._wp, self.waypoints = 0, -1, 0, None
            # -1 axis: next token is a coordinate or the end (after >= 1 waypoint)
        else:
            self.kind = layout.kind
        self._values: list[int] = []  # bins of the current tuple (box ordering / oof pairs)

    # -- fixed layout --
    def _fixed_allowed(self) -> torch.Tensor:
        j = len(self.emitted) + 1
        slot = self.layout.slots[j]
        return self._coord_rule(slot.axis, slot.oof, slot.box_index, slot.token)

    def _coord_rule(self, axis: str, oof: bool, box_index: int, token: str | None) -> torch.Tensor:
        s = self.sets
        if token is not None:
            return s.single(s.vocab[token])
        if box_index in (2, 3):
            lo = self._values[box_index - 2]
            return s.coords[lo + 1:]
        if box_index in (0, 1):
            return s.coords[:-1]
        if oof and axis == "v":
            return s.single(s.oof) if self._values and self._values[-1] < 0 else s.coords
        return s.coords_oof if oof else s.coords

    # -- open layout --
    def _remaining_after_close(self, waypoints: int) -> int:
        """Tokens needed after the end token of part 0 for the later parts."""
        return sum(2 + len(p.axes) * waypoints for p in self.parts[1:])

    def _open_allowed(self) -> torch.Tensor:
        s = self.sets
        part = self.parts[self._part]
        used = len(self.emitted)
        left = None if self.budget_left is None else self.budget_left - used
        if self._axis == -2:  # next part's start token
            return s.single(s.vocab[part.start])
        if part.box:
            box_index = len(self._values) if len(self._values) < 4 else -1
            if box_index == -1:
                return s.single(s.vocab[part.end])
            return self._coord_rule("", False, box_index, None)
        if self._axis >= 0:  # inside a tuple
            axis = part.axes[self._axis]
            return self._coord_rule(axis, part.oof, -1, None)
        # at a tuple boundary
        if self.waypoints is not None:  # P fixed by the first part
            if self._wp == self.waypoints:
                return s.single(s.vocab[part.end])
            return s.coords_oof if part.oof else s.coords
        need_more = len(part.axes) + 1 + self._remaining_after_close(self._wp + 1)
        may_add = left is None or need_more <= left
        may_close = self._wp >= 1
        if may_add and not may_close:
            return s.coords_oof if part.oof else s.coords
        if may_close and not may_add:
            return s.single(s.vocab[part.end])
        if not may_add and not may_close:
            raise LayoutError("budget too small to close the primitive")
        return torch.cat([s.coords_oof if part.oof else s.coords, s.single(s.vocab[part.end])])

    def copy(self) -> "Grammar":
        """Independent copy for speculative look-ahead (shares the token sets)."""
        g = object.__new__(Grammar)
        g.__dict__.update(self.__dict__)
        g.emitted, g._values = list(self.emitted), list(self._values)
        return g

    def min_length(self) -> int:
        """Tokens after the start token of the shortest primitive this grammar admits."""
        if self.layout is not None:
            return self.layout.block_size - 1
        return len(self.parts[0].axes) + 1 + self._remaining_after_close(1)

    @property
    def done(self) -> bool:
        if self.layout is not None:
            return len(self.emitted) == self.layout.block_size - 1
        return self._part >= len(self.parts)

    def allowed(self) -> torch.Tensor:
        """Legal ids of the next token (LongTensor)."""
        if self.done:
            raise LayoutError("primitive already complete")
        return self._fixed_allowed() if self.layout is not None else self._open_allowed()

    def is_legal(self, token_id: int) -> bool:
        return bool((self.allowed() == token_id).any())

    def advance(self, token_id: int) -> None:
        """Consume one token; raises LayoutError if it is illegal here."""
        if not self.is_legal(token_id):
            raise LayoutError(f"token {token_id} is illegal at position {len(self.emitted) + 1}")
        k = self.sets.vocab.coord_value(token_id)
        value = -1 if token_id == self.sets.oof else k
        self.emitted.append(token_id)
        if self.layout is not None:
            slot = self.layout.slots[len(self.emitted)]
            if slot.token is None:
                starts_tuple = slot.box_index == 0 or (slot.box_index < 0 and not (slot.oof and slot.axis == "v"))
                self._values = [value] if starts_tuple else self._values + [value]
            return
        part = self.parts[self._part]
        if self._axis == -2:  # the start token of a later part
            self._axis = -1
            return
        if token_id == self.sets.vocab[part.end]:
            if self.waypoints is None:
                self.waypoints = self._wp
            self._part += 1
            self._wp, self._axis, self._values = 0, -2, []
            return
        if part.box:
            self._values.append(value)
            return
        if self._axis == -1:
            self._values, self._axis = [value], 1
        else:
            self._values.append(value)
            self._axis += 1
        if self._axis == len(part.axes):
            self._axis, self._wp = -1, self._wp + 1


class _LayoutIndex:
    """Slot indices of one layout as tensors (positions 1..B-1 -> rows 0..B-2)."""

    def __init__(self, sets: TokenSets, layout: Layout):
        slots = layout.slots[1:]
        self.mask = sets.layout_mask(layout)  # [B-1, V]
        fixed = [j for j, s in enumerate(slots) if s.token is not None]
        self.fixed = torch.tensor(fixed, dtype=torch.long)
        self.fixed_tok = torch.tensor([sets.vocab[slots[j].token] for j in fixed], dtype=torch.long)
        self.coord = torch.tensor([j for j, s in enumerate(slots) if s.token is None], dtype=torch.long)
        self.pair_u = torch.tensor([j for j, s in enumerate(slots) if s.oof and s.axis == "u"], dtype=torch.long)
        self.box = [j for j, s in enumerate(slots) if s.box_index == 0]


def check_block(sets: TokenSets, layout: Layout, tokens: Sequence[int] | torch.Tensor) -> int:
    """Index (1-based block position) of the first illegal token, or 0 if the block is valid.

    `tokens` are positions 1..B-1 (without the start token). This is the schema
    part of the gate A_s: delimiters, coordinate sets, box ordering, `<oof>`
    pairs. Vectorised; agrees with walking `Grammar` token by token (tested).
    """
    n = layout.block_size - 1
    if len(tokens) != n:
        return min(len(tokens), n) + 1
    t = torch.as_tensor(tokens, dtype=torch.long).view(-1)
    if bool(((t < 0) | (t >= sets.vocab.size)).any()):
        return int(((t < 0) | (t >= sets.vocab.size)).nonzero()[0, 0]) + 1
    idx = sets.index(layout)
    ok = idx.mask[torch.arange(n), t].clone()
    if idx.pair_u.numel():
        u_oof, v_oof = t[idx.pair_u] == sets.oof, t[idx.pair_u + 1] == sets.oof
        ok[idx.pair_u + 1] &= u_oof == v_oof  # the v of a pair breaks the pairing rule
    for j in idx.box:
        for a in (0, 1):
            lo, hi = sets.vocab.coord_value(int(t[j + a])), sets.vocab.coord_value(int(t[j + a + 2]))
            if lo is not None and hi is not None and hi <= lo:
                ok[j + a + 2] = False
    bad = (~ok).nonzero()
    return 0 if bad.numel() == 0 else int(bad[0, 0]) + 1


# --- constrained selection on drafter logits ---------------------------------------------


def _best_ordered(la: torch.Tensor, lb: torch.Tensor) -> tuple[int, int, float]:
    """argmax_{i<j} la[i] + lb[j] over 1001 bins, in O(n) with a suffix max."""
    suffix_val, suffix_idx = torch.flip(lb, [0]).cummax(0)
    suffix_val = torch.flip(suffix_val, [0])
    suffix_idx = (lb.numel() - 1) - torch.flip(suffix_idx, [0])
    total = la[:-1] + suffix_val[1:]  # pair (i, best j > i)
    i = int(total.argmax())
    return i, int(suffix_idx[i + 1]), float(total[i])


def select_block(sets: TokenSets, layout: Layout, logits: torch.Tensor) -> torch.Tensor:
    """Best legal block from per-position logits [B-1, V] -> token ids [B-1].

    Each position takes its best legal token; boxes take the best (u1<u2) and
    (v1<v2) pairs by summed logits; each 2D (u, v) pair is either both `<oof>`
    or both coordinates, whichever has the larger summed logit. Exact for these
    rules, no extra network pass.
    """
    if logits.shape[0] != layout.block_size - 1:
        raise LayoutError(f"logits have {logits.shape[0]} positions, layout needs {layout.block_size - 1}")
    logits = logits.detach().float()
    idx = sets.index(layout)
    coords = sets.coords
    coord_logits = logits[:, coords]  # [B-1, 1001]
    best_val, best = coord_logits.max(-1)
    out = coords[best]
    out[idx.fixed] = idx.fixed_tok
    if idx.pair_u.numel():
        u, v = idx.pair_u, idx.pair_u + 1
        oof = logits[u, sets.oof] + logits[v, sets.oof] > best_val[u] + best_val[v]
        out[u[oof]] = sets.oof
        out[v[oof]] = sets.oof
    for j in idx.box:  # u1 v1 u2 v2
        u1, u2, _ = _best_ordered(coord_logits[j], coord_logits[j + 2])
        v1, v2, _ = _best_ordered(coord_logits[j + 1], coord_logits[j + 3])
        out[j:j + 4] = coords[torch.tensor([u1, v1, u2, v2])]
    return out


# --- primitive fields <-> tokens -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PrimitiveFields:
    """Exactly the fields of plan_stack/msg/Primitive; a node copies them 1:1.

    points: metric (x, y, z) in frame_id (driving: z = 0); uv: flattened pixel
    pairs, NaN pair = out of frame; boxes: uv = (u1, v1, u2, v2).
    """

    kind: str
    arm: str = ""
    frame_id: str = ""
    points: tuple[tuple[float, float, float], ...] = ()
    uv: tuple[float, ...] = ()
    horizon_s: float = 0.0
    block_size: int = 0
    accepted_direct: bool = False
    fallback_from: int = -1


def _pixel_scale(box: bool, width: int, height: int) -> tuple[float, float]:
    """Pixels per normalised unit*1000: boxes divide by W, H; trajectories by W-1, H-1."""
    return (float(width), float(height)) if box else (float(width - 1), float(height - 1))


def fields_to_tokens(vocab: V.Vocab, layout: Layout, prims: Sequence[PrimitiveFields],
                     image_size: tuple[int, int], ranges: Ranges | None = None) -> list[int]:
    """Quantise one layout's primitives (one per arm) into block tokens [B] (start token first).

    `ranges` are the model's metric ranges (default `RANGES`; see
    `merge_ranges`). Metric values outside the range saturate at the range ends; pixel values
    outside the image (or NaN) become an `<oof>` pair; box corners are clipped
    to the image and forced to u1 < u2, v1 < v2 after quantisation.
    """
    arms = layout.arms
    if len(prims) != arms:
        raise LayoutError(f"{layout.kind} needs {arms} primitive(s), got {len(prims)}")
    width, height = image_size
    per_arm = len(layout.parts) // arms
    out: list[int] = []
    for pi, part in enumerate(layout.parts):
        prim = prims[pi // per_arm]
        out.append(vocab[part.start])
        if part.box:
            if len(prim.uv) != 4:
                raise LayoutError(f"box needs uv = (u1, v1, u2, v2), got {len(prim.uv)} values")
            su, sv = _pixel_scale(True, width, height)
            ks = [quantise(min(max(prim.uv[i], 0.0), (su, sv)[i % 2]) * V.N_BINS / (su, sv)[i % 2], 0, V.N_BINS)
                  for i in range(4)]
            for a in (0, 1):
                ks[a] = min(ks[a], V.N_BINS - 1)
                ks[a + 2] = max(ks[a + 2], ks[a] + 1)
            out.extend(vocab[V.COORD_TOKENS[k]] for k in ks)
        elif part.space == "image":
            uv = prim.uv
            if len(uv) != 2 * layout.waypoints:
                raise LayoutError(f"{layout.kind} needs {2 * layout.waypoints} uv values, got {len(uv)}")
            su, sv = _pixel_scale(False, width, height)
            for w in range(layout.waypoints):
                u, v = uv[2 * w], uv[2 * w + 1]
                if not (math.isfinite(u) and math.isfinite(v)) or not (0 <= u <= su and 0 <= v <= sv):
                    out.extend([vocab[V.OOF]] * 2)
                else:
                    out.append(vocab[V.COORD_TOKENS[quantise(u * V.N_BINS / su, 0, V.N_BINS)]])
                    out.append(vocab[V.COORD_TOKENS[quantise(v * V.N_BINS / sv, 0, V.N_BINS)]])
        else:
            if len(prim.points) != layout.waypoints:
                raise LayoutError(f"{layout.kind} needs {layout.waypoints} points, got {len(prim.points)}")
            space = (ranges or RANGES)[part.space]
            for p in prim.points:
                for ai, axis in enumerate(part.axes):
                    lo, hi = space[axis]
                    out.append(vocab[V.COORD_TOKENS[quantise(float(p[ai]), lo, hi)]])
        out.append(vocab[part.end])
    if len(out) != layout.block_size:  # pragma: no cover - layout arithmetic guard
        raise LayoutError("internal: block length mismatch")
    return out


def tokens_to_fields(vocab: V.Vocab, layout: Layout, tokens: Sequence[int], image_size: tuple[int, int], *,
                     frame_id: str = "", horizon_s: float = 0.0, sets: TokenSets | None = None,
                     ranges: Ranges | None = None) -> list[PrimitiveFields]:
    """Dequantise a block [B] (start token first) into one PrimitiveFields per arm.

    The block must be valid (see `check_block`); `<oof>` pairs become NaN pairs.
    """
    tokens = [int(t) for t in tokens]
    if len(tokens) != layout.block_size or tokens[0] != vocab[layout.start_token]:
        raise LayoutError(f"{layout.kind} block needs {layout.block_size} tokens starting with {layout.start_token}")
    sets = sets or TokenSets(vocab)
    bad = check_block(sets, layout, tokens[1:])
    if bad:
        raise LayoutError(f"{layout.kind} block has an illegal token at position {bad}")
    width, height = image_size
    arms = layout.arms
    per_arm = len(layout.parts) // arms
    _, _, msg_kind = KINDS[layout.kind]
    uv: list[list[float]] = [[] for _ in range(arms)]
    pts: list[list[list[float]]] = [[] for _ in range(arms)]
    for slot, tok in zip(layout.slots, tokens):
        if slot.token is not None:
            continue
        arm = slot.part // per_arm
        part = layout.parts[slot.part]
        if slot.space == "image":
            k = vocab.coord_value(tok)
            su, sv = _pixel_scale(part.box, width, height)
            scale = su if slot.axis == "u" else sv
            uv[arm].append(float("nan") if k is None else k * scale / V.N_BINS)
        else:
            lo, hi = (ranges or RANGES)[slot.space][slot.axis]
            value = dequantise(vocab.coord_value(tok), lo, hi)
            if slot.axis == part.axes[0]:
                pts[arm].append([])
            pts[arm][-1].append(value)
    names = ("left", "right") if arms == 2 else ("",)
    horizon = horizon_s if layout.kind.startswith("drive") else 0.0
    out = []
    for a in range(arms):
        points = tuple((p[0], p[1], p[2] if len(p) > 2 else 0.0) for p in pts[a])
        out.append(PrimitiveFields(kind=msg_kind, arm=names[a], frame_id=frame_id, points=points,
                                   uv=tuple(uv[a]), horizon_s=horizon, block_size=layout.block_size))
    return out
