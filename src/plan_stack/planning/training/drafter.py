"""Drafter training on annotated primitives (the VFlash training recipe).

* Labels are the annotated response tokens (sub-task text, tool call and the
  primitive block quantised from ground truth), never target continuations.
* Each annotated primitive is one block [start token, MASK x (B-1)] with equal
  weights; up to `max_text_anchors` text anchors per sequence make 16-position
  blocks with weights w_j = exp(-(j-1)/decay) (decay 7); labels `<oof>` count
  `oof_weight` (0.1); padding beyond the sequence counts 0.
* Blocks of all samples of a batch are packed into one drafter pass with
  their own position ids and a block-diagonal mask (`drafter.packed_mask`),
  attention run sample by sample (`drafter.packed_segments`);
  the frozen target's features are computed on the fly, one padded forward
  for the batch (`TargetAdapter.teacher_forced`).
* AdamW, zero weight decay, gradient clipping 1.0, warm-up then cosine decay;
  checkpoints (drafter + optimiser + step) are resumable.
"""
from __future__ import annotations

import dataclasses
import math
import os
import random
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.nn import functional as F

from plan_stack.config import param, validate
from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.drafter import Drafter, load_drafter, packed_mask, packed_segments, save_drafter
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens
from plan_stack.planning.target import Prompt, TargetAdapter
from plan_stack.planning.tool_call import tool_call_text
from plan_stack.planning.training.checkpoints import check_resume, load_state, save_state
from plan_stack.planning.training.data_parallel import Ranks, run_ranks
from plan_stack.planning.training.schedule import WarmupCosine


@dataclasses.dataclass(frozen=True)
class DrafterTrainConfig:
    steps: int = param("optimiser steps", 200, min=1)
    batch_size: int = param("samples per step", 4, min=1)
    lr: float = param("peak learning rate", 2e-4, min=0.0)
    warmup_frac: float = param("warm-up fraction of the steps", 0.04, min=0.0, max=1.0)
    grad_clip: float = param("gradient norm clip", 1.0, min=0.0)
    text_block: int = param("text block size", 16, min=2)
    max_text_anchors: int = param("text anchors per sequence", 512, min=0)
    text_decay: float = param("text weight decay constant: w_j = exp(-(j-1)/decay)", 7.0, min=1e-3)
    oof_weight: float = param("loss weight of <oof> labels", 0.1, min=0.0)
    checkpoint_every: int = param("steps between checkpoints (0: only at the end)", 100, min=0)
    seed: int = param("random seed", 0)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass
class Sample:
    """One annotated sequence: prompt and ground-truth response with its primitive spans."""

    prompt: Prompt
    response: list[int]
    spans: list[tuple[int, L.Layout]]  # (index of the start token in `response`, layout)

    def teacher_forced_prompt(self) -> Prompt:
        """The prompt with the annotated response appended: one target pass reads the whole sequence."""
        return dataclasses.replace(self.prompt, input_ids=torch.cat([
            self.prompt.input_ids.view(-1), torch.tensor(self.response, dtype=torch.long)]))


# --- block construction ---------------------------------------------------------------------


@dataclasses.dataclass
class Blocks:
    """Packed blocks of one batch (M block tokens)."""

    ids: torch.Tensor  # [M] anchor or MASK
    pos: torch.Tensor  # [M] position ids (anchor position + offset)
    labels: torch.Tensor  # [M] target token (ignored where weight == 0)
    weights: torch.Tensor  # [M]
    sample: torch.Tensor  # [M] sample index
    index: torch.Tensor  # [M] block index
    anchor: torch.Tensor  # [M] anchor position


def make_blocks(seqs: Sequence[list[int]], prompt_lens: Sequence[int], spans: Sequence[list[tuple[int, L.Layout]]],
                cfg: DrafterTrainConfig, vocab: V.Vocab, rng: random.Random) -> Blocks:
    """Primitive blocks (equal weights) and sampled text-anchor blocks (decaying weights)."""
    mask_id, oof = vocab[V.TEXT_MASK], vocab[V.OOF]
    cols: dict[str, list[float]] = {k: [] for k in ("ids", "pos", "labels", "weights", "sample", "index", "anchor")}
    n_block = 0

    def add(si: int, seq: list[int], a: int, size: int, weight_of) -> None:
        nonlocal n_block
        for j in range(size):
            p = a + j
            label = seq[p] if p < len(seq) else 0
            w = 0.0 if (j == 0 or p >= len(seq)) else weight_of(j)
            if label == oof:
                w *= cfg.oof_weight
            cols["ids"].append(seq[a] if j == 0 else mask_id)
            cols["pos"].append(p)
            cols["labels"].append(label)
            cols["weights"].append(w)
            cols["sample"].append(si)
            cols["index"].append(n_block)
            cols["anchor"].append(a)
        n_block += 1

    for si, (seq, plen, sp) in enumerate(zip(seqs, prompt_lens, spans)):
        inside: set[int] = set()
        for start, layout in sp:
            a = plen + start
            if a + layout.block_size > len(seq) or seq[a] != vocab[layout.start_token]:
                raise PlanningError(f"sample {si}: no {layout.kind} block of {layout.block_size} tokens at {start}")
            add(si, seq, a, layout.block_size, lambda j: 1.0)
            inside.update(range(a, a + layout.block_size))
        text = [p for p in range(plen, len(seq) - 1) if p not in inside]
        rng.shuffle(text)
        for a in sorted(text[:cfg.max_text_anchors]):
            add(si, seq, a, cfg.text_block, lambda j: math.exp(-(j - 1) / cfg.text_decay))
    t = {k: torch.tensor(v, dtype=torch.float32 if k == "weights" else torch.long) for k, v in cols.items()}
    return Blocks(**t)


def block_loss(drafter: Drafter, target: TargetAdapter, samples: Sequence[Sample], cfg: DrafterTrainConfig,
               rng: random.Random) -> torch.Tensor:
    """Weighted cross-entropy of one packed batch (frozen target features computed here)."""
    whole = [s.teacher_forced_prompt() for s in samples]
    feats = [t.features for t in target.teacher_forced(whole)]
    seqs, plens, ctx_sample, ctx_pos = [], [], [], []
    for si, (s, w) in enumerate(zip(samples, whole)):
        n = w.input_ids.numel()
        seqs.append(w.input_ids.tolist())
        plens.append(s.prompt.input_ids.numel())
        ctx_sample.append(torch.full((n,), si, dtype=torch.long))
        ctx_pos.append(torch.arange(n))
    dev = next(drafter.parameters()).device
    blocks = make_blocks(seqs, plens, [s.spans for s in samples], cfg, target.vocab, rng)
    blocks = Blocks(**{f.name: getattr(blocks, f.name).to(dev) for f in dataclasses.fields(blocks)})
    ctx_sample_t, ctx_pos_t = torch.cat(ctx_sample).to(dev), torch.cat(ctx_pos).to(dev)
    mask = packed_mask(ctx_sample_t, ctx_pos_t, blocks.sample, blocks.index, blocks.anchor,
                       torch.ones_like(blocks.sample, dtype=torch.bool))
    logits = drafter.forward_packed(torch.cat(feats).to(dev), ctx_pos_t, blocks.ids, blocks.pos, mask,
                                    packed_segments(ctx_sample_t, blocks.sample))
    ce = F.cross_entropy(logits, blocks.labels, reduction="none")
    return (ce * blocks.weights).sum() / blocks.weights.sum().clamp_min(1e-8)


# --- synthetic annotated data -----------------------------------------------------------------

_OBJECTS = ("cube", "cup", "bowl", "drawer", "lid", "towel", "can", "block")
_VERBS = ("pick up", "move", "push", "open", "close", "grasp", "lift", "place")


def synthetic_samples(target: TargetAdapter, n: int, kinds: Sequence[str] = ("robot_2d3d",), waypoints: int = 10,
                      image_size: tuple[int, int] = (64, 48), seed: int = 0,
                      images: bool | None = None) -> list[Sample]:
    """Annotated (instruction, sub-task, tool call, primitive) sequences with smooth ground truth.

    The geometry depends on the instruction (object index -> goal), so a
    drafter can learn it from the target's context. Out-of-image 2D points
    become `<oof>` pairs through the normal quantiser.
    """
    rng = np.random.default_rng(seed)
    tok = target.tokenizer
    use_images = target.is_vl if images is None else images
    width, height = image_size
    out = []
    for _ in range(n):
        verb, obj = _VERBS[rng.integers(len(_VERBS))], int(rng.integers(len(_OBJECTS)))
        instruction = f"{verb} the {_OBJECTS[obj]}"
        kind = kinds[int(rng.integers(len(kinds)))]
        layout = L.make_layout(kind, waypoints)
        goal = np.array([-0.4 + 0.1 * obj, 0.2 - 0.05 * obj, 0.6 + 0.05 * obj])
        start = goal + rng.normal(0, 0.05, 3) + np.array([0.2, -0.1, 0.2])
        prims = []
        for _arm in range(layout.arms):
            s = np.linspace(0, 1, layout.waypoints)[:, None]
            pts = start + s * (goal - start) + rng.normal(0, 0.005, (layout.waypoints, 3))
            if kind.startswith("drive"):
                pts = np.stack([s[:, 0] * (5 + 3 * obj), s[:, 0] ** 2 * (obj - 4), 0 * s[:, 0]], 1)
            fx = (width - 1) / 1.2
            uv = np.stack([width / 2 + fx * pts[:, 0] / np.maximum(pts[:, 2], 0.1),
                           height / 2 + fx * pts[:, 1] / np.maximum(pts[:, 2], 0.1)], 1)
            if kind == "box":
                u, v = sorted(rng.uniform(0, width, 2)), sorted(rng.uniform(0, height, 2))
                prims.append(PrimitiveFields("box", uv=(u[0], v[0], u[1], v[1])))
            else:
                prims.append(PrimitiveFields(kind, points=tuple(map(tuple, pts.tolist())),
                                               uv=tuple(uv.reshape(-1).tolist())))
        block = fields_to_tokens(target.vocab, layout, prims, image_size)
        subtask = tok.encode(f"{verb} the {_OBJECTS[obj]} now. " + tool_call_text(layout.block_size),
                             add_special_tokens=False)
        response = subtask + block + [tok.eos_token_id]
        imgs = [(rng.random((height, width, 3)) * 255).astype(np.uint8)] if use_images else []
        out.append(Sample(target.encode_prompt(instruction, imgs), response, [(len(subtask), layout)]))
    return out


# --- training loop -----------------------------------------------------------------------------

STATE_FILE = "trainer_state.pt"


def _batches(samples: Sequence[Sample], batch: int, rng: random.Random) -> Iterator[list[Sample]]:
    order = list(range(len(samples)))
    while True:
        rng.shuffle(order)
        for i in range(0, len(order) - batch + 1 if len(order) >= batch else 1, batch):
            yield [samples[j] for j in order[i:i + batch]]


def train(drafter: Drafter, target: TargetAdapter, samples: Sequence[Sample], cfg: DrafterTrainConfig,
          out_dir: str | os.PathLike | None = None, resume: bool = False, progress: bool = False,
          data_id: dict | None = None, force_resume: bool = False, ranks: int = 1) -> list[float]:
    """Train `drafter` in place; returns the loss of every step run here.

    With `out_dir`, checkpoints go there every `checkpoint_every` steps and at
    the end; `resume=True` continues from the checkpoint found there, which
    must have been trained on the same data (`data_id`, e.g.
    `data.episodes.data_fingerprint`) unless `force_resume`. `ranks` > 1: data-parallel on the CPU
    (`data_parallel.run_ranks`, one thread each): the batch order is the same on every rank, and each rank
    draws its blocks' anchors from (seed, step, rank).
    """
    if not samples:
        raise PlanningError("no training samples")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, weight_decay=0.0)
    schedule = WarmupCosine.warmup_fraction(cfg.lr, cfg.steps, cfg.warmup_frac)
    step0 = 0
    if resume and out_dir is not None and os.path.isfile(os.path.join(out_dir, STATE_FILE)):
        state = load_state(os.path.join(out_dir, STATE_FILE))
        check_resume(state.get("data_id"), data_id, force_resume, os.path.join(out_dir, STATE_FILE))
        drafter.load_state_dict(load_drafter(out_dir, target).state_dict())
        opt.load_state_dict(state["optimizer"])
        step0 = int(state["step"])
        rng.setstate(state["rng"])
    losses: list[float] = []
    batches = _batches(samples, cfg.batch_size, rng)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=step0, desc="train-drafter", unit="step")
    params = list(drafter.parameters())

    def loop(where: Ranks) -> None:
        drafter.train()
        for step in range(step0, cfg.steps):
            schedule.apply(opt, step)
            batch = next(batches)
            anchors = rng if where.world == 1 else random.Random(f"{cfg.seed}:{step}:{where.rank}")
            loss = block_loss(drafter, target, where.share(batch), cfg, anchors)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            said = where.average(params, loss)
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            losses.append(said[0])
            done = step + 1
            if not where.lead:
                continue
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if out_dir is not None and (done == cfg.steps or (cfg.checkpoint_every
                                                               and done % cfg.checkpoint_every == 0)):
                save_checkpoint(drafter, opt, done, rng, out_dir, data_id)

    # nothing left to train, or fewer samples than a batch (`_batches` then yields them all, too few to share):
    # one process
    run_ranks(ranks if step0 < cfg.steps and len(samples) >= cfg.batch_size else 1, loop)
    if bar is not None:
        bar.close()
    drafter.eval()
    drafter.reset()
    return losses


def save_checkpoint(drafter: Drafter, opt: torch.optim.Optimizer, step: int, rng: random.Random,
                    out_dir: str | os.PathLike, data_id: dict | None = None) -> None:
    """The drafter (`save_drafter` format, what `load_drafter` resumes from) and the trainer's state beside it."""
    save_drafter(drafter, out_dir)
    save_state(os.path.join(out_dir, STATE_FILE),
               {"optimizer": opt.state_dict(), "step": step, "rng": rng.getstate(), "data_id": data_id})

