"""Drafter training: block weights, packed loss, loss decrease, resumable checkpoints, CLI."""
from __future__ import annotations

import math
import random

import pytest
import torch

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.grammar import TokenSets, check_block
from plan_stack.planning.training import drafter as TR


def test_block_weights_follow_the_recipe(text_target):
    vocab = text_target.vocab
    lay = L.make_layout("robot_2d3d", 2)
    c = lambda k: vocab[V.COORD_TOKENS[k]]  # noqa: E731
    block = [vocab[V.ROBOT_2D], vocab[V.OOF], vocab[V.OOF], c(1), c(2), vocab[V.ROBOT_END], vocab[V.ROBOT],
             c(3), c(4), c(5), c(6), c(7), c(8), vocab[V.ROBOT_END]]
    assert len(block) == lay.block_size
    prompt = [7, 8, 9]
    seq = prompt + [20, 21, 22] + block + [1]
    cfg = TR.DrafterTrainConfig(max_text_anchors=2, text_block=4)
    b = TR.make_blocks([seq], [3], [[(3, lay)]], cfg, vocab, random.Random(0))
    prim = b.index == 0
    w = b.weights[prim]
    assert w[0] == 0  # the anchor is given, not predicted
    assert torch.allclose(w[1:3], torch.tensor([0.1, 0.1]))  # <oof> labels
    assert torch.all(w[3:] == 1.0)  # equal weights inside a primitive
    assert b.ids[prim][0] == vocab[V.ROBOT_2D] and torch.all(b.ids[prim][1:] == vocab[V.TEXT_MASK])
    assert torch.equal(b.pos[prim], torch.arange(6, 6 + 14))
    text_blocks = sorted(set(b.index[~prim].tolist()))
    assert len(text_blocks) == 2  # capped by max_text_anchors
    for bi in text_blocks:
        sel = b.index == bi
        a = int(b.anchor[sel][0])
        assert a not in range(6, 20) and a >= 3  # anchors in the response text, outside the primitive
        expect = [0.0] + [math.exp(-(j - 1) / 7) * (0.1 if seq[a + j] == vocab[V.OOF] else 1.0)
                          if a + j < len(seq) else 0.0 for j in range(1, 4)]
        assert torch.allclose(b.weights[sel], torch.tensor(expect))
        assert torch.equal(b.labels[sel][1:][b.weights[sel][1:] > 0],
                           torch.tensor(seq[a + 1:a + 4])[: int((b.weights[sel][1:] > 0).sum())])
    with pytest.raises(PlanningError, match="no robot_2d3d block"):
        TR.make_blocks([seq], [3], [[(2, lay)]], cfg, vocab, random.Random(0))


def test_training_lowers_the_loss_and_resumes(vl_target, small_drafter, tmp_path):
    samples = TR.synthetic_samples(vl_target, 6, kinds=("robot_2d3d", "box"), waypoints=3, seed=1)
    for s in samples:  # ground truth parses back through the layout
        start, lay = s.spans[0]
        assert check_block(TokenSets(vl_target.vocab), lay, s.response[start + 1:start + lay.block_size]) == 0
    d = small_drafter(vl_target, seed=4)
    cfg = TR.DrafterTrainConfig(steps=24, batch_size=3, lr=1e-2, max_text_anchors=4, checkpoint_every=12, seed=0)
    torch.manual_seed(0)
    with torch.no_grad():
        before = float(TR.block_loss(d, vl_target, samples, cfg, random.Random(0)))
    losses = TR.train(d, vl_target, samples, cfg, out_dir=tmp_path)
    with torch.no_grad():
        after = float(TR.block_loss(d, vl_target, samples, cfg, random.Random(0)))
    # the frozen tiny LM head has small logits, so the loss moves slowly from ln(V); it must move
    assert len(losses) == 24 and after < before - 0.3
    assert (tmp_path / TR.STATE_FILE).is_file()
    # resume: a finished run does nothing; a longer one continues from step 24
    d2 = small_drafter(vl_target, seed=9)
    assert TR.train(d2, vl_target, samples, cfg, out_dir=tmp_path, resume=True) == []
    assert all(torch.equal(a, b) for a, b in zip(d.state_dict().values(), d2.state_dict().values()))
    longer = TR.DrafterTrainConfig(steps=26, batch_size=3, lr=1e-2, max_text_anchors=4, checkpoint_every=0, seed=0)
    assert len(TR.train(d2, vl_target, samples, longer, out_dir=tmp_path, resume=True)) == 2
    with pytest.raises(PlanningError, match="no training samples"):
        TR.train(d2, vl_target, [], cfg)
    # the checkpoint knows its data: another data set is refused unless forced
    with pytest.raises(PlanningError, match="trained on data"):
        TR.train(d2, vl_target, samples, longer, out_dir=tmp_path, resume=True, data_id={"episodes": 3})
    assert TR.train(d2, vl_target, samples, longer, out_dir=tmp_path, resume=True, data_id={"episodes": 3},
                    force_resume=True) == []

