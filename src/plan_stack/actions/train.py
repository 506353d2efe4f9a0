"""Training of the flow-matching head (optionally with training-time RTC), resumable.

Checkpoint directory layout (all safetensors + JSON, no pickles):
`config.json` + `model.safetensors` (what inference loads: weights and
normalisation statistics), `optimizer.safetensors` + `train_state.json`
(AdamW moments, step, data and noise RNG states, history) so an interrupted
run resumes exactly where it stopped. Held-out evaluation reports the flow
loss at fixed noise/time (comparable across steps) and the sampled chunk's
error to the demonstration in robot units.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from plan_stack.actions.data import ChunkWindows, Episode
from plan_stack.actions.errors import CheckpointError
from plan_stack.actions.head import FlowHead, HeadConfig, load_checkpoint, save_checkpoint
from plan_stack.actions.rtc.sampling import integrate
from plan_stack.actions.rtc.training import masked_flow_loss, sample_delays, training_time_inputs
from plan_stack.config import ConfigError, param, validate
from plan_stack.planning.training.checkpoints import load_optimizer, save_json, save_optimizer
from plan_stack.planning.training.schedule import WarmupCosine

__all__ = ["HeadTrainConfig", "TrainResult", "train", "evaluate"]

OPTIM_FILE = "optimizer.safetensors"
STATE_FILE = "train_state.json"


@dataclasses.dataclass(frozen=True)
class HeadTrainConfig:
    steps: int = param("total optimiser steps", 2000, min=1)
    batch_size: int = param("windows per step", 64, min=1)
    lr: float = param("peak AdamW learning rate", 3e-4, min=0.0)
    weight_decay: float = param("AdamW weight decay", 1e-4, min=0.0)
    warmup_steps: int = param("linear warm-up, then cosine decay to 10%", 100, min=0)
    rtc_max_delay: int = param("training-time RTC: simulated delays d in [0, max) (0 = off)", 0, min=0)
    rtc_distribution: str = param("simulated-delay distribution", "uniform", choices=["uniform", "exp"])
    rtc_temperature: float = param("temperature of the exp delay distribution", 4.0, min=1e-6)
    eval_every: int = param("held-out evaluation period (steps)", 500, min=1)
    checkpoint_every: int = param("checkpoint period (steps)", 500, min=1)
    log_every: int = param("progress line period (steps)", 100, min=1)
    eval_windows: int = param("held-out windows per evaluation", 256, min=1)
    state_noise: tuple[float, ...] = param(
        "std of Gaussian noise on the input state, robot units, one value for every channel or one per channel "
        "(empty = off): the target chunk stays the demonstration's, so the head learns to steer back to it from "
        "the nearby states its own errors lead to in closed loop", ())
    plan_shift: int = param("largest plan offset: with probability plan_shift_prob a window is conditioned on a "
                            "plan up to this many plans earlier or later in its episode (0 = off), so the head "
                            "reads the phase from its state when a planner is early or late", 0, min=0)
    plan_shift_prob: float = param("probability of a shifted plan per window", 0.0, min=0.0, max=1.0)
    seed: int = param("seed of data order, noise and flow times", 0, min=0)

    def __post_init__(self) -> None:
        validate(self)
        if any(not (math.isfinite(x) and x >= 0) for x in self.state_noise):
            raise ConfigError(f"state_noise: stds must be finite and >= 0, got {list(self.state_noise)}")


@dataclasses.dataclass(frozen=True)
class TrainResult:
    step: int
    train_loss: float
    eval: dict[str, float]
    resumed_from: int  # 0 when started fresh
    seconds: float


def _flow_times(b: int, gen: torch.Generator) -> torch.Tensor:
    """t ~ 0.999 Beta(1.5, 1) + 0.001: pi0's emphasis on the noisy end (t near 1)."""
    u = torch.rand(b, generator=gen)
    return 0.999 * u.pow(1.0 / 1.5) + 0.001  # inverse CDF of Beta(1.5, 1)


def _to_torch(batch: dict[str, np.ndarray], head: FlowHead) -> dict[str, torch.Tensor]:
    n, dev = head.normaliser, next(head.parameters()).device
    return {
        "actions": n.norm("action", torch.from_numpy(batch["actions"]).float().to(dev)),
        "state": n.norm("state", torch.from_numpy(batch["state"]).float().to(dev)),
        "cond": n.norm("cond", torch.from_numpy(batch["cond"]).float().to(dev)),
        "cond_mask": torch.from_numpy(batch["cond_mask"]).to(dev),
    }


def flow_loss(head: FlowHead, b: dict[str, torch.Tensor], gen: torch.Generator, rtc_max_delay: int = 0,
              rtc_distribution: str = "uniform", rtc_temperature: float = 1.0) -> torch.Tensor:
    a = b["actions"]
    # Noise, times and delays come from the CPU generator on every device, so a seed means one run.
    noise = torch.randn(a.shape, generator=gen).to(a.device)
    t = _flow_times(a.shape[0], gen).to(a.device)
    if rtc_max_delay > 0:
        delays = sample_delays(a.shape[0], rtc_max_delay, gen, rtc_distribution, rtc_temperature).to(a.device)
    else:
        delays = torch.zeros(a.shape[0], dtype=torch.long, device=a.device)
    x_t, times, mask = training_time_inputs(a, noise, t, delays)
    v = head(x_t, times, b["state"], b["cond"], b["cond_mask"])
    return masked_flow_loss(v, a, noise, mask)


def evaluate(head: FlowHead, windows: ChunkWindows, n: int, seed: int = 1234, num_steps: int | None = None
             ) -> dict[str, float]:
    """Held-out flow loss (fixed noise and times) and sampled-chunk RMSE in robot units."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(windows), size=min(n, len(windows)), replace=False)
    gen = torch.Generator().manual_seed(seed)
    was_training = head.training
    head.eval()
    with torch.no_grad():
        b = _to_torch(windows.batch(rows), head)
        loss = flow_loss(head, b, gen).item()
        ctx = head.encode(b["state"], b["cond"], b["cond_mask"])
        noise = torch.randn(b["actions"].shape, generator=gen).to(b["actions"].device)
        x = integrate(lambda x, t: head.velocity(x, t, ctx), noise, num_steps or head.cfg.num_steps)
        err = head.normaliser.denorm("action", x) - head.normaliser.denorm("action", b["actions"])
        rmse = err.pow(2).mean().sqrt().item()
    head.train(was_training)
    return {"eval_flow_loss": loss, "eval_chunk_rmse": rmse}


def _data_summary(data: Any) -> str:
    if not isinstance(data, dict):
        return repr(data)
    keys = ("source", "path", "episodes", "sha256")
    parts = [f"{k}={data[k]}" for k in keys if k in data]
    if "train" in data:
        parts.append(f"{len(data['train'])} train episodes")
    return ", ".join(parts) or repr(data)


def train(head_cfg: HeadConfig, cfg: HeadTrainConfig, train_eps: list[Episode], eval_eps: list[Episode],
          out_dir: str, resume: bool = True, log: Callable[[str], None] = print,
          meta: dict[str, Any] | None = None, force_resume: bool = False,
          device: torch.device | str = "cpu") -> TrainResult:
    """Train (or resume) into `out_dir`; returns the final step's figures.

    Resuming requires the same head config and RTC setting, and the same
    data (`meta["data"]`: its source and episode identities) unless
    `force_resume`; anything else raises CheckpointError rather than
    silently mixing runs.
    """
    windows = ChunkWindows(train_eps, head_cfg.horizon)
    eval_windows = ChunkWindows(eval_eps, head_cfg.horizon) if eval_eps else None
    if (windows.action_dim, windows.state_dim, windows.cond_width) != (
            head_cfg.action_dim, head_cfg.state_dim, head_cfg.cond_width):
        raise ConfigError(f"action_dim: head expects (action, state, cond) = ({head_cfg.action_dim}, "
                          f"{head_cfg.state_dim}, {head_cfg.cond_width}), data has ({windows.action_dim}, "
                          f"{windows.state_dim}, {windows.cond_width})")
    noise_std = np.asarray(cfg.state_noise, dtype=float) if any(cfg.state_noise) else None
    if noise_std is not None and noise_std.size not in (1, head_cfg.state_dim):
        raise ConfigError(f"state_noise: give one std or {head_cfg.state_dim} (one per state channel), "
                          f"got {noise_std.size}")
    dt = {e.dt_s for e in train_eps + eval_eps}
    if any(abs(x - head_cfg.dt_s) > 1e-9 for x in dt):
        raise ConfigError(f"dt_s: head dt {head_cfg.dt_s} differs from the data's {sorted(dt)}")
    with torch.random.fork_rng():  # seeded initialisation without touching the caller's global RNG
        torch.manual_seed(cfg.seed)
        head = FlowHead(head_cfg)
    head.to(device)
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = WarmupCosine(cfg.lr, cfg.steps, cfg.warmup_steps, floor=0.1)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, history, resumed_from = 0, [], 0
    meta = {**(meta or {}), "rtc_max_delay": cfg.rtc_max_delay, "train": dataclasses.asdict(cfg)}
    state_path = os.path.join(out_dir, STATE_FILE)
    if resume and os.path.isfile(state_path):
        loaded, old_meta = load_checkpoint(out_dir)
        if loaded.cfg != head_cfg or old_meta.get("rtc_max_delay") != cfg.rtc_max_delay:
            raise CheckpointError(f"out_dir: {out_dir!r} holds a run with another head config or RTC setting; "
                                  "use a new directory or --fresh")
        if not force_resume and old_meta.get("data") != meta.get("data"):
            raise CheckpointError(f"out_dir: {out_dir!r} was trained on other data "
                                  f"({_data_summary(old_meta.get('data'))}"
                                  f", now {_data_summary(meta.get('data'))}); use the same episodes, a new "
                                  "directory, --fresh, or --force-resume")
        head.load_state_dict(loaded.state_dict())
        load_optimizer(os.path.join(out_dir, OPTIM_FILE), opt)
        with open(state_path) as fh:
            st = json.load(fh)
        step, history = st["step"], st["history"]
        rng.bit_generator.state = st["data_rng"]
        gen.set_state(torch.tensor(st["noise_rng"], dtype=torch.uint8))
        resumed_from = step
        log(f"resumed from step {step} in {out_dir}")
    else:
        head.normaliser.fit(windows.all_actions(), windows.all_states(), windows.all_cond())
    os.makedirs(out_dir, exist_ok=True)

    def checkpoint() -> None:
        save_checkpoint(out_dir, head, meta)
        save_optimizer(os.path.join(out_dir, OPTIM_FILE), opt)
        save_json(state_path, {"step": step, "history": history, "data_rng": rng.bit_generator.state,
                               "noise_rng": gen.get_state().tolist()})

    t_start = time.perf_counter()
    head.train()
    running, n_running, last_loss, ev = 0.0, 0, float("nan"), {}
    while step < cfg.steps:
        schedule.apply(opt, step)
        rows = rng.integers(0, len(windows), cfg.batch_size)
        shift = None
        if cfg.plan_shift and cfg.plan_shift_prob > 0:
            offsets = rng.integers(-cfg.plan_shift, cfg.plan_shift + 1, cfg.batch_size)
            shift = np.where(rng.random(cfg.batch_size) < cfg.plan_shift_prob, offsets, 0)
        batch = windows.batch(rows, shift)
        if noise_std is not None:
            batch["state"] = batch["state"] + rng.normal(0.0, 1.0, batch["state"].shape) * noise_std
        loss = flow_loss(head, _to_torch(batch, head), gen, cfg.rtc_max_delay,
                         cfg.rtc_distribution, cfg.rtc_temperature)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        last_loss = loss.item()
        running, n_running = running + last_loss, n_running + 1
        if step % cfg.log_every == 0 or step == cfg.steps:
            el = time.perf_counter() - t_start
            log(f"step {step}/{cfg.steps} loss {running / n_running:.4f} lr {schedule(step - 1):.2e} "
                f"{(step - resumed_from) / max(el, 1e-9):.1f} steps/s")
            running, n_running = 0.0, 0
        if eval_windows is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
            ev = evaluate(head, eval_windows, cfg.eval_windows)
            history.append({"step": step, "train_loss": last_loss, **ev})
            log(f"eval step {step}: " + " ".join(f"{k} {v:.4f}" for k, v in ev.items()))
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            checkpoint()
    head.eval()
    return TrainResult(step, last_loss, ev, resumed_from, time.perf_counter() - t_start)
