"""Legal tokens inside a primitive: per-vocabulary token sets, the token-by-token `Grammar`
(constrained AR, DFlash verification inside primitives) and the vectorised schema gate
`check_block` (delimiters, coordinate sets, box ordering, `<oof>` pairs), which agree (tested).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError
from plan_stack.planning.layouts import KINDS, Layout, Slot


class TokenSets:
    """Precomputed id tensors for one vocabulary (coordinates, `<oof>`, delimiters)."""

    def __init__(self, vocab: V.Vocab):
        self.vocab = vocab
        self.coords = torch.tensor(vocab.coord_ids(), dtype=torch.long)
        self.oof = vocab[V.OOF]
        self.coords_oof = torch.cat([self.coords, torch.tensor([self.oof])])
        self._single: dict[int, torch.Tensor] = {}
        self._index: dict[tuple[str, int], _LayoutIndex] = {}

    def index(self, layout: Layout) -> _LayoutIndex:
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
            self._part, self._axis, self._wp = 0, -1, 0
            self.waypoints: int | None = None  # P, fixed by the first part once it closes
            # -1 axis: next token is a coordinate or the end (after >= 1 waypoint)
        else:
            self.kind = layout.kind
        self._values: list[int] = []  # bins of the current tuple (box ordering / oof pairs)

    # -- fixed layout --
    def _fixed_allowed(self) -> torch.Tensor:
        assert self.layout is not None  # fixed-layout mode
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

    def copy(self) -> Grammar:
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

    def advance(self, token_id: int, checked: bool = False) -> None:
        """Consume one token; raises LayoutError if it is illegal here.

        `checked`: the caller has validated the whole block (`check_block`, which agrees with this grammar)
        and the legality test is skipped."""
        if not checked and not self.is_legal(token_id):
            raise LayoutError(f"token {token_id} is illegal at position {len(self.emitted) + 1}")
        k = self.sets.vocab.coord_value(token_id)
        value = -1 if token_id == self.sets.oof or k is None else k  # k is None only for delimiters, never stored
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
        fixed = [(j, s.token) for j, s in enumerate(slots) if s.token is not None]
        self.fixed = torch.tensor([j for j, _ in fixed], dtype=torch.long)
        self.fixed_tok = torch.tensor([sets.vocab[token] for _, token in fixed], dtype=torch.long)
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
