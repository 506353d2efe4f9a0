"""Autoregressive training of the target VLM on annotated responses (vision tower included).

No pretrained weights are reachable on the machines this project targets, so
the target (a small Qwen3-VL built from a config) learns everything here:
next-token cross-entropy on the response tokens only (prompt positions and
padding are ignored), AdamW with a short warm-up and cosine decay, light
photometric augmentation (brightness, contrast, per-channel gain, pixel
noise) applied to the images before `PlannerModel.encode`, so the image
processor and prompt layout stay exactly the planner's.

Checkpoints every `checkpoint_every` steps hold the weights, optimiser,
step, RNG states and the data fingerprint; `resume=True` continues from them
and refuses a different data set unless `force_resume=True` (a resume onto
other episodes silently trains a different model). Model selection is by a
caller-supplied `evaluate(model) -> score` (lower is better), run every
`eval_every` steps: the planner's accuracy after real (AR) decoding, not the
teacher-forced loss, which hides single-token errors of metres.
"""
from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from plan_stack.config import param, validate
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.training.checkpoints import check_resume, load_state, save_state
from plan_stack.planning.training.data_parallel import Ranks, run_ranks
from plan_stack.planning.training.schedule import WarmupCosine

__all__ = ["TargetTrainConfig", "TrainItem", "SharedSelection", "LocateHead", "locate_loss", "collate", "augment",
           "train_target", "response_loss", "STATE_FILE", "BEST_DIR"]

STATE_FILE = "target_state.pt"
BEST_DIR = "best"


@dataclasses.dataclass(frozen=True)
class TargetTrainConfig:
    steps: int = param("optimiser steps", 2000, min=1)
    batch_size: int = param("samples per step", 16, min=1)
    lr: float = param("peak learning rate", 1e-3, min=0.0)
    beta2: float = param("AdamW beta2", 0.98, min=0.0, max=1.0)
    weight_decay: float = param("AdamW weight decay", 0.01, min=0.0)
    warmup_frac: float = param("warm-up fraction of the steps", 0.03, min=0.0, max=1.0)
    grad_clip: float = param("gradient norm clip (0: none)", 1.0, min=0.0)
    augment: bool = param("photometric augmentation of the images", True)
    checkpoint_every: int = param("steps between resumable checkpoints (0: only at the end)", 100, min=0)
    eval_every: int = param("steps between model-selection evaluations (0: only at the end)", 400, min=0)
    locate_weight: float = param("weight of the auxiliary localisation loss (squared error of the object's centre "
                                 "in image fractions; 0: off)", 0.0, min=0.0)
    coord_sigma_bins: float = param("std (in bins) of the Gaussian soft target over the coordinate tokens "
                                    "(0: the exact bin only)", 0.0, min=0.0)
    seed: int = param("random seed", 0)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass
class TrainItem:
    """One training keyframe: images per camera, instruction, response ids (fixed at data time)."""

    images: list[np.ndarray]
    instruction: str
    response: list[int]
    #: the located object's centre in the first image, (u, v) as fractions of its width and height (None: none)
    locate: tuple[float, float] | None = None


@dataclasses.dataclass(frozen=True)
class SharedSelection:
    """A selection score whose decodes the training ranks share: each rank decodes its part of `items`
    (`decode(model, part) -> results`), and rank 0 scores them all in `items`' order (`score(items, results)`).
    Called as a function it decodes everything in this process.

    Why: while rank 0 alone decoded them, with every thread, the other ranks waited; shared by two
    one-thread ranks the driving recipe's 43 selection keyframes decode 1.64x as fast (`bench/train.py
    --stages selection`; docs/decisions/0006-data-parallel-forked-ranks.md)."""

    items: Sequence[Any]
    decode: Callable[[Any, Sequence[Any]], list]
    score: Callable[[Sequence[Any], list], float]

    def __call__(self, model: Any) -> float:
        return self.score(self.items, self.decode(model, self.items))


class LocateHead(torch.nn.Module):
    """Auxiliary head, used in training only: the object's centre from the target's image tokens.

    The LM loss alone never taught a from-scratch vision tower where the cube is (every trained target gave one
    answer for 20 cube positions; docs/decisions/0016-localisation-loss-and-decoded-selection.md). This head
    reads the merged image tokens the LLM sees: a softmax over tokens says which one holds the object, a
    bounded offset places it inside that token, and the squared error to the annotated centre trains the tower
    directly. Soft-argmax keeps it translation-equivariant, so it generalises to positions between the
    training ones.
    """

    def __init__(self, width: int):
        super().__init__()
        self.proj = torch.nn.Linear(width, 3)

    def forward(self, tokens: torch.Tensor, grid_hw: tuple[int, int]) -> torch.Tensor:
        """[T, width] tokens of one image in row-major merged-grid order -> (u, v) in image fractions."""
        gh, gw = grid_hw
        ys, xs = torch.meshgrid((torch.arange(gh, device=tokens.device) + 0.5) / gh,
                                (torch.arange(gw, device=tokens.device) + 0.5) / gw, indexing="ij")
        centres = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)
        out = self.proj(tokens.float())
        weight = torch.softmax(out[:, 0], dim=0)
        half = torch.tensor([0.5 / gw, 0.5 / gh], device=tokens.device)
        return (weight[:, None] * (centres + half * torch.tanh(out[:, 1:]))).sum(dim=0)


def locate_loss(head: LocateHead, merged: torch.Tensor, grid_thw: torch.Tensor, items: Sequence[TrainItem],
                merge: int = 2) -> torch.Tensor:
    """Mean squared centre error over the items with a `locate` target (the first image of each item)."""
    sizes = (grid_thw.prod(-1) // merge ** 2).tolist()
    starts = np.cumsum([0] + sizes)
    errs, image = [], 0
    for it in items:
        if it.locate is not None:
            _, h, w = (int(x) for x in grid_thw[image])
            pred = head(merged[starts[image]:starts[image + 1]], (h // merge, w // merge))
            errs.append(((pred - torch.tensor(it.locate, device=pred.device)) ** 2).sum())
        image += len(it.images)
    return torch.stack(errs).mean() if errs else merged.new_zeros(())


def augment(images: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Light photometric jitter (geometry untouched: the labels are pixel- and metre-exact)."""
    out = []
    for im in images:
        x = im.astype(np.float32)
        gain = rng.uniform(0.85, 1.15) * rng.uniform(0.93, 1.07, size=3)
        mean = x.mean()
        x = (x - mean) * rng.uniform(0.85, 1.15) + mean
        x = x * gain + rng.uniform(-12, 12) + rng.normal(0, 3.0, size=x.shape)
        out.append(np.clip(x, 0, 255).astype(np.uint8))
    return out


def collate(model: Any, items: Sequence[TrainItem], rng: np.random.Generator | None = None) -> dict[str, torch.Tensor]:
    """HF forward inputs of a batch: prompts from `model.encode`, responses appended, right padding.

    `labels` are -100 on the prompt and the padding, so only response tokens are learnt.
    """
    prompts, labels = [], []
    for it in items:
        images = augment(it.images, rng) if rng is not None else it.images
        prompt = model.encode(it.instruction, [images] if images else [])
        ids = torch.cat([prompt.input_ids.view(-1), torch.tensor(it.response, dtype=torch.long)])
        lab = ids.clone()
        lab[:prompt.input_ids.numel()] = -100
        prompts.append(dataclasses.replace(prompt, input_ids=ids))
        labels.append(lab)
    batch = model.target.padded_batch(prompts)
    label_t = torch.full_like(batch["input_ids"], -100)
    for i, lab in enumerate(labels):
        label_t[i, :lab.numel()] = lab
    batch["labels"] = label_t
    return batch


def response_loss(logits: torch.Tensor, labels: torch.Tensor, coord_ids: torch.Tensor | None = None,
                  sigma_bins: float = 0.0) -> torch.Tensor:
    """Next-token cross-entropy over the labelled positions; with `sigma_bins` > 0, a coordinate token's
    target is a Gaussian over the neighbouring coordinate bins (mode at the true bin) instead of the bin
    alone.

    With one token per 0.5 mm bin, the exact-bin loss gives no credit to a near miss: a model that cannot
    yet place the object learns the marginal and stays there (measured: the same reach target for every
    cube position). The soft target rewards being close, so the gradient points towards the object from
    the start; its mode is still the true bin, so greedy decoding is unbiased.
    """
    logits, labels = logits[:, :-1].float(), labels[:, 1:]
    keep = labels != -100
    logp = torch.log_softmax(logits[keep], dim=-1)
    target = labels[keep]
    nll = -logp.gather(1, target[:, None])[:, 0]
    if coord_ids is None or sigma_bins <= 0:
        return nll.mean()
    coord_ids = coord_ids.to(target.device)
    bin_of = torch.full((logits.shape[-1],), -1, dtype=torch.long, device=target.device)
    bin_of[coord_ids] = torch.arange(len(coord_ids), device=target.device)
    bins = bin_of[target]
    is_coord = bins >= 0
    if not bool(is_coord.any()):
        return nll.mean()
    grid = torch.arange(len(coord_ids), device=target.device, dtype=torch.float32)
    soft = torch.exp(-0.5 * ((grid[None] - bins[is_coord, None].float()) / sigma_bins) ** 2)
    soft = soft / soft.sum(dim=1, keepdim=True)
    nll = nll.clone()
    nll[is_coord] = -(soft * logp[is_coord][:, coord_ids]).sum(dim=1)
    return nll.mean()


def train_target(model: Any, items: Sequence[TrainItem], cfg: TargetTrainConfig, out_dir: str | os.PathLike,
                 *, data_id: dict | None = None, resume: bool = False, force_resume: bool = False,
                 evaluate: Callable[[Any], float] | SharedSelection | None = None, progress: bool = False,
                 log: Callable[[str], None] = print, ranks: int = 1) -> dict:
    """Train `model.target.model` in place; returns {losses, best_score, best_step, minutes, steps, locate_losses,
    locate_rms} (the last two: the localisation loss per step and its RMS over the last 50 steps, image fractions).

    With `evaluate`, the best-scoring weights are saved under `out_dir/best`
    (`save_target` format) and loaded back into the model at the end. `ranks` > 1: data-parallel on the CPU
    (`data_parallel.run_ranks`, one thread each), each rank's augmentation drawn from (seed, step, rank).
    """
    from plan_stack.planning.target_build import load_target, save_target

    if not items:
        raise PlanningError("no training samples")
    os.makedirs(out_dir, exist_ok=True)
    net = model.target.model
    device = next(net.parameters()).device  # the caller places the model; batches follow it
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    nrng = np.random.default_rng(cfg.seed)
    locate = cfg.locate_weight > 0 and any(it.locate is not None for it in items)
    if cfg.locate_weight > 0 and not locate:
        raise PlanningError("locate_weight > 0 but no training sample has a located object")
    head = LocateHead(net.config.vision_config.out_hidden_size).to(device) if locate else None
    captured: dict[str, torch.Tensor] = {}
    hook = None
    if head is not None:  # the merged image tokens of the training forward pass, no second vision pass
        def keep_tokens(_module: Any, _args: Any, output: Any) -> None:
            captured["merged"] = output.pooler_output
        hook = net.model.visual.register_forward_hook(keep_tokens)
    params = list(net.named_parameters()) + ([(f"locate.{n}", p) for n, p in head.named_parameters()]
                                             if head is not None else [])
    decay = [p for n, p in params if p.ndim >= 2 and "norm" not in n]
    no_decay = [p for n, p in params if not (p.ndim >= 2 and "norm" not in n)]
    for _, p in params:
        p.requires_grad_(True)
    trained = [p for _, p in params]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, cfg.beta2))
    schedule = WarmupCosine.warmup_fraction(cfg.lr, cfg.steps, cfg.warmup_frac)
    from plan_stack.planning import vocab as V

    coord_ids = torch.tensor(model.target.tokenizer.convert_tokens_to_ids(list(V.COORD_TOKENS)), dtype=torch.long)
    state_path = os.path.join(out_dir, STATE_FILE)
    step0, best, best_step, elapsed0 = 0, math.inf, -1, 0.0
    order: list[int] = []
    if resume and os.path.isfile(state_path):
        state = load_state(state_path)
        check_resume(state.get("data_id"), data_id, force_resume, f"{state_path}")
        net.load_state_dict(state["model"])
        if head is not None:
            if state.get("locate_head") is None:
                raise PlanningError(f"{state_path}: saved without the localisation head; resume with the same "
                                    "locate_weight or start a new output directory")
            head.load_state_dict(state["locate_head"])
        opt.load_state_dict(state["optimizer"])
        step0, best, best_step = int(state["step"]), float(state["best"]), int(state["best_step"])
        rng.setstate(state["rng"])
        nrng.bit_generator.state = state["nrng"]
        torch.set_rng_state(state["torch_rng"])
        order, elapsed0 = list(state["order"]), float(state.get("minutes", 0.0)) * 60
        log(f"resumed at step {step0} (best {best:.4f} at step {best_step})")
    losses: list[float] = []
    locate_errs: list[float] = []  # squared centre error (image fractions) per step, training batches
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=step0, desc="train-target", unit="step", mininterval=5.0)
    t_start = time.monotonic()

    def checkpoint(done: int) -> None:
        save_state(state_path, {
            "model": net.state_dict(), "locate_head": head.state_dict() if head is not None else None,
            "optimizer": opt.state_dict(), "step": done, "best": best, "best_step": best_step, "rng": rng.getstate(),
            "nrng": nrng.bit_generator.state, "torch_rng": torch.get_rng_state(), "order": order,
            "data_id": data_id, "minutes": (elapsed0 + time.monotonic() - t_start) / 60})

    def run_eval(done: int, where: Ranks) -> None:
        """Every rank takes part in a shared selection; otherwise rank 0 alone, with the others' threads."""
        nonlocal best, best_step
        shared = evaluate if isinstance(evaluate, SharedSelection) and where.world > 1 else None
        if evaluate is None or (shared is None and not where.lead):
            return
        net.eval()
        if shared is not None:
            parts = where.gather(shared.decode(model, where.share(shared.items)))
            score = None if parts is None else float(shared.score(shared.items, where.unshare(parts)))
        else:
            with where.leading():
                score = float(evaluate(model))
        net.train()
        if score is None:  # a shared selection's other ranks: rank 0 scores
            return
        mark = ""
        if score < best:
            best, best_step, mark = score, done, " (best)"
            save_target(model.target, os.path.join(out_dir, BEST_DIR))
        log(f"step {done}: selection score {score:.4f}{mark}")

    def loop(where: Ranks) -> None:
        nonlocal order
        net.train()
        for step in range(step0, cfg.steps):
            if len(order) < cfg.batch_size:
                fresh = list(range(len(items)))
                rng.shuffle(fresh)
                order += fresh
            idx, order = order[:cfg.batch_size], order[cfg.batch_size:]
            schedule.apply(opt, step)
            chosen = [items[i] for i in where.share(idx)]
            aug = (nrng if where.world == 1 else np.random.default_rng((cfg.seed, step, where.rank))) \
                if cfg.augment else None
            batch = collate(model, chosen, aug)
            captured.clear()  # the selection decodes run the tower too: only this step's tokens may be read
            if cfg.coord_sigma_bins > 0:
                labels = batch.pop("labels").to(device)
                out = net(**{k: v.to(device) for k, v in batch.items()})
                loss = response_loss(out.logits, labels, coord_ids, cfg.coord_sigma_bins)
            else:
                out = net(**{k: v.to(device) for k, v in batch.items()})
                loss = out.loss
            aux = None
            if head is not None and "merged" in captured:
                aux = locate_loss(head, captured.pop("merged"), batch["image_grid_thw"], chosen,
                                  net.config.vision_config.spatial_merge_size)
                loss = loss + cfg.locate_weight * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            said = where.average(trained, loss, *([aux] if aux is not None else []))
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
            opt.step()
            losses.append(said[0])
            if aux is not None:
                locate_errs.append(said[1])
            done = step + 1
            if where.lead and bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}",
                                **({"locate_px224": f"{224 * math.sqrt(locate_errs[-1]):.1f}"} if locate_errs else {}))
            if (cfg.eval_every and done % cfg.eval_every == 0 and done != cfg.steps) or done == cfg.steps:
                run_eval(done, where)
            if not where.lead:
                continue
            if done == cfg.steps or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0):
                checkpoint(done)

    run_ranks(ranks if step0 < cfg.steps else 1, loop)  # nothing left to train: no ranks to fork
    if bar is not None:
        bar.close()
    if hook is not None:
        hook.remove()
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    best_dir = os.path.join(out_dir, BEST_DIR)
    if evaluate is not None and os.path.isdir(best_dir):
        net.load_state_dict(load_target(best_dir).model.state_dict())
    minutes = (elapsed0 + time.monotonic() - t_start) / 60
    return {"losses": losses, "best_score": best, "best_step": best_step, "minutes": minutes, "steps": cfg.steps,
            "locate_losses": locate_errs,
            "locate_rms": math.sqrt(float(np.mean(locate_errs[-50:]))) if locate_errs else None}
