"""Constrained selection: the best legal block from already computed drafter logits.

The cross-position rules (box u1 < u2, v1 < v2; `<oof>` pairs) are solved
exactly on those logits, without another network pass.
"""
from __future__ import annotations

import torch

from plan_stack.planning.errors import LayoutError
from plan_stack.planning.grammar import TokenSets
from plan_stack.planning.layouts import Layout


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
