"""Constrained selection on drafter logits: exact box order, <oof> pairs, masks."""
from __future__ import annotations

import itertools

import pytest
import torch

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError
from plan_stack.planning.grammar import check_block
from plan_stack.planning.selection import select_block

IMAGE = (640, 480)


def _brute_box(la, lb):
    best, arg = -float("inf"), None
    for i, j in itertools.combinations(range(len(la)), 2):
        if la[i] + lb[j] > best:
            best, arg = la[i] + lb[j], (i, j)
    return arg


def test_select_block_solves_box_order_exactly(vocab, sets):
    torch.manual_seed(0)
    lay = L.make_layout("box")
    for _ in range(5):
        logits = torch.randn(5, vocab.size)
        # make the unconstrained argmax violate the order on purpose
        logits[0, sets.coords[900]] += 10
        logits[2, sets.coords[100]] += 10
        toks = select_block(sets, lay, logits)
        assert check_block(sets, lay, toks.tolist()) == 0
        cl = logits[:, sets.coords]
        i, j = _brute_box(cl[0, :60].tolist() + cl[0, 60:].tolist(), cl[2].tolist())
        assert vocab.coord_value(int(toks[0])) == i and vocab.coord_value(int(toks[2])) == j


def test_select_block_pairs_oof_and_respects_masks(vocab, sets):
    torch.manual_seed(1)
    lay = L.make_layout("robot_2d3d", 3)
    logits = torch.randn(lay.block_size - 1, vocab.size)
    logits[0, sets.oof] += 50  # u of waypoint 0 wants <oof>, v does not -> pair decided by sum
    logits[2, sets.oof] += 1.0  # weak single <oof> vote: the coordinate pair must win
    logits[:, vocab[V.TEXT_MASK]] += 100  # illegal everywhere
    toks = select_block(sets, lay, logits).tolist()
    assert check_block(sets, lay, toks) == 0
    assert toks[0] == toks[1] == sets.oof
    assert toks[2] != sets.oof and toks[3] != sets.oof
    with pytest.raises(LayoutError, match="positions"):
        select_block(sets, lay, logits[:-1])
