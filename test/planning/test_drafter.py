"""Drafter: packed block-diagonal masks, packed training == inference, checkpoints, config."""
from __future__ import annotations

import pytest
import torch

from plan_stack.config import ConfigError
from plan_stack.planning.drafter import DrafterConfig, load_drafter, packed_mask, packed_segments, save_drafter
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.target import Prompt


def _loop_mask(ctx_sample, ctx_pos, blk_sample, blk_index, blk_anchor, blk_valid):
    m, s = len(blk_sample), len(ctx_sample)
    out = torch.zeros(m, s + m, dtype=torch.bool)
    for q in range(m):
        for k in range(s):
            out[q, k] = bool(ctx_sample[k] == blk_sample[q] and ctx_pos[k] < blk_anchor[q])
        for k in range(m):
            out[q, s + k] = bool(blk_index[k] == blk_index[q] and blk_valid[k])
    return out


def test_packed_mask_matches_plain_loop():
    g = torch.Generator().manual_seed(0)
    ctx_sample = torch.tensor([0] * 7 + [1] * 5)
    ctx_pos = torch.cat([torch.arange(7), torch.arange(5)])
    blk_index = torch.tensor([0] * 4 + [1] * 4 + [2] * 6)
    blk_sample = torch.tensor([0] * 4 + [0] * 4 + [1] * 6)
    blk_anchor = torch.tensor([2] * 4 + [5] * 4 + [3] * 6)
    blk_valid = torch.rand(14, generator=g) > 0.2
    ref = _loop_mask(ctx_sample, ctx_pos, blk_sample, blk_index, blk_anchor, blk_valid)
    assert torch.equal(packed_mask(ctx_sample, ctx_pos, blk_sample, blk_index, blk_anchor, blk_valid), ref)


def test_packed_forward_equals_inference_drafts(text_target, small_drafter):
    tg = text_target
    d = small_drafter(tg)
    seq = torch.tensor([5, 9, 30, 31, 32, 40, 41, 42, 43, 50, 51, 52])
    feats = tg.prefill(Prompt(seq)).features  # [S, 5H]
    anchors, bsz = [3, 7], [4, 5]
    ids, pos, bidx, anc = [], [], [], []
    for b, (a, n) in enumerate(zip(anchors, bsz)):
        ids += [int(seq[a])] + [d.config.mask_token_id] * (n - 1)
        pos += list(range(a, a + n))
        bidx += [b] * n
        anc += [a] * n
    s = seq.numel()
    mask = packed_mask(torch.zeros(s, dtype=torch.long), torch.arange(s), torch.zeros(len(ids), dtype=torch.long),
                       torch.tensor(bidx), torch.tensor(anc), torch.ones(len(ids), dtype=torch.bool))
    with torch.no_grad():
        packed = d.forward_packed(feats, torch.arange(s), torch.tensor(ids), torch.tensor(pos), mask)
    off = 0
    for a, n in zip(anchors, bsz):
        d.reset()
        d.extend(feats[:a])
        inf = d.draft(int(seq[a]), n)
        assert torch.allclose(packed[off + 1:off + n], inf, atol=1e-4)
        off += n
    d.crop(2)
    assert d.length == 2
    with pytest.raises(PlanningError, match="crop"):
        d.crop(5)
    with pytest.raises(PlanningError, match="block_size"):
        d.draft(1, 1)


def _packed_batch(tg, d, seqs, rng):
    """A packed batch the way training builds it (`make_blocks`): primitive-like and text blocks of several
    samples, their features concatenated in sample order."""
    import random

    from plan_stack.planning.training import drafter as TR

    feats = [tg.prefill(Prompt(torch.tensor(s))).features for s in seqs]
    cfg = TR.DrafterTrainConfig(max_text_anchors=3, text_block=5)
    blocks = TR.make_blocks(seqs, [2] * len(seqs), [[] for _ in seqs], cfg, tg.vocab, random.Random(rng))
    ctx_sample = torch.cat([torch.full((len(s),), i) for i, s in enumerate(seqs)])
    ctx_pos = torch.cat([torch.arange(len(s)) for s in seqs])
    mask = packed_mask(ctx_sample, ctx_pos, blocks.sample, blocks.index, blocks.anchor,
                       torch.ones_like(blocks.sample, dtype=torch.bool))
    return torch.cat(feats), ctx_pos, blocks, mask, packed_segments(ctx_sample, blocks.sample)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_per_sample_equals_the_packed_pass_values_and_gradients(text_target, small_drafter, seed):
    """Training runs the drafter's attention sample by sample (`packed_segments`); the mask lets nothing
    cross samples, so logits and every gradient equal the one packed pass over all samples."""
    tg = text_target
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(5, 60, (int(n),), generator=g).tolist() for n in torch.randint(8, 20, (4,), generator=g)]
    d = small_drafter(tg, seed=seed)
    feats, ctx_pos, blocks, mask, segments = _packed_batch(tg, d, seqs, seed)
    assert [b for _, b in segments][-1][1] == len(blocks.ids) and len(segments) == len(seqs)

    def run(seg):
        d.zero_grad(set_to_none=True)
        logits = d.forward_packed(feats, ctx_pos, blocks.ids, blocks.pos, mask, seg)
        (logits.log_softmax(-1)[torch.arange(len(blocks.labels)), blocks.labels] * blocks.weights).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in d.named_parameters() if p.grad is not None}

    packed, packed_grads = run(None)
    split, split_grads = run(segments)
    assert torch.allclose(split, packed, atol=1e-5, rtol=1e-5)
    assert packed_grads.keys() == split_grads.keys() and packed_grads
    for name, grad in packed_grads.items():
        assert torch.allclose(split_grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_packed_segments_refuses_rows_it_cannot_split():
    assert packed_segments(torch.tensor([0, 0, 1, 1, 1]), torch.tensor([0, 1, 1])) == [((0, 2), (0, 1)),
                                                                                       ((2, 5), (1, 3))]
    with pytest.raises(PlanningError, match="not contiguous"):
        packed_segments(torch.tensor([0, 1, 0]), torch.tensor([0, 1]))
    with pytest.raises(PlanningError, match="not contiguous"):
        packed_segments(torch.tensor([0, 1]), torch.tensor([0, 1, 0]))
    with pytest.raises(PlanningError, match=r"samples \[2\] have no context"):
        packed_segments(torch.tensor([0, 1]), torch.tensor([0, 2]))


def test_queued_positions_draft_as_if_extended_one_pass_at_a_time(text_target, small_drafter):
    """`extend` queues; the next draft makes the queued context K/V in its own pass. Drafts, lengths and
    crops (inside the queue and into the cache) agree with a drafter that flushes after every extend."""
    tg = text_target
    seq = torch.tensor([5, 9, 30, 31, 32, 40, 41, 42, 43, 50, 51, 52, 60, 61])
    feats = tg.prefill(Prompt(seq)).features
    lazy, eager = small_drafter(tg, seed=1), small_drafter(tg, seed=1)

    def both(action):
        a, b = action(lazy), action(eager)
        eager.flush()
        return a, b

    def draft(anchor, n):
        a, b = both(lambda d: d.draft(anchor, n))
        assert torch.allclose(a, b, atol=1e-5)
        assert lazy.length == eager.length

    both(lambda d: d.extend(feats[:3]))
    both(lambda d: d.extend(feats[3:5]))  # two queued steps
    assert lazy.length == eager.length == 5
    draft(int(seq[5]), 4)
    both(lambda d: d.extend(feats[5:9]))
    both(lambda d: d.crop(7))  # drops queued positions only
    assert lazy.length == 7
    draft(int(seq[7]), 3)
    both(lambda d: d.extend(feats[7:11]))
    both(lambda d: d.crop(4))  # into the cache: the queue goes too
    assert lazy.length == eager.length == 4
    draft(int(seq[4]), 5)
    both(lambda d: d.extend(feats[4:12]))
    lazy.flush()
    lazy.flush()  # nothing queued: no change
    assert lazy.length == eager.length == 12
    draft(int(seq[12]), 2)
    both(lambda d: d.extend(feats[:0]))  # an empty step queues nothing
    assert lazy.length == 12


def test_drafting_pass_equals_forward_also_after_the_weights_change(text_target, small_drafter):
    """`extending` (fused products over cached concatenated weights) computes what `kv` and `forward` do,
    with and without new context rows, also after the weights change in place (an optimiser step, a
    loaded checkpoint): its cached weights never go stale."""
    d = small_drafter(text_target, seed=2)
    layer, width = d.layer_stack()[0], d.config.width
    gen = torch.Generator().manual_seed(0)
    ctx, new, h = (torch.randn(n, width, generator=gen) for n in (5, 3, 4))

    def check():
        with torch.no_grad():
            k0, v0 = layer.kv(ctx, torch.arange(5))
            kn, vn = layer.kv(new, torch.arange(5, 8))
            k, v = torch.cat([k0, kn], 1), torch.cat([v0, vn], 1)
            want = layer(h, torch.arange(8, 12), k, v)
            got, gk, gv = layer.extending(h, k0, v0, new)
            assert torch.allclose(got, want, atol=1e-5)
            assert torch.allclose(gk, k, atol=1e-6) and torch.allclose(gv, v, atol=1e-6)
            got_plain, pk, _ = layer.extending(h, k, v)  # nothing new: the context stays as it was
            assert torch.allclose(got_plain, want, atol=1e-5) and torch.equal(pk, k)

    with torch.no_grad():  # norm weights away from 1: each head norm's weight must reach its own heads
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if p.ndim == 1 else 0.0))
    check()
    with torch.no_grad():  # in place, as an optimiser step does
        layer.k_norm.weight.mul_(2.0)
        layer.up.weight.add_(0.1)
        layer.q_proj.weight.neg_()
    check()
    layer.load_state_dict({k: v * 0.5 for k, v in layer.state_dict().items()})
    check()


def test_checkpoint_round_trip(text_target, small_drafter, tmp_path):
    d = small_drafter(text_target, seed=3)
    save_drafter(d, tmp_path)
    assert (tmp_path / "config.json").is_file() and (tmp_path / "model.safetensors").is_file()
    back = load_drafter(tmp_path, text_target)
    for (k, v), (k2, v2) in zip(d.state_dict().items(), back.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    # embeddings / LM head are shared with the target, not stored
    assert not any("embed" in k or "lm_head" in k for k in d.state_dict())
    bad = small_drafter(text_target)
    object.__setattr__(bad.config, "target_layers", (0, 0, 0, 0, 2))
    save_drafter(bad, tmp_path / "other")
    with pytest.raises(PlanningError, match="drafter expects"):
        load_drafter(tmp_path / "other", text_target)
    with pytest.raises(PlanningError, match="no config.json"):
        load_drafter(tmp_path / "missing", text_target)


def test_config_validation():
    base = dict(target_hidden=64, target_layers=(0, 1), mask_token_id=3)
    assert DrafterConfig(**base).layers == 5
    with pytest.raises(ConfigError, match="^heads"):
        DrafterConfig(**base, heads=3, kv_heads=2)
    with pytest.raises(ConfigError, match="^target_layers"):
        DrafterConfig(**{**base, "target_layers": ()})
    with pytest.raises(ConfigError, match="^head_dim"):
        DrafterConfig(**base, head_dim=15)
    with pytest.raises(ConfigError, match="^width"):
        DrafterConfig(**base, width=2)
