"""Flow-matching action head: a small transformer over the H x D chunk.

Tokens: one robot-state token followed by H action tokens (each: linear
embedding of the noisy action + learned position + embedding of its own flow
time, so training-time RTC can give prefix positions the clean time 0). Each
block is pre-norm self-attention over those tokens, cross-attention to the
conditioning sequence (the `PlanFeatures` [tokens, width] interface), and an
MLP. The conditioning keys/values do not depend on x or t, so `encode`
computes them once per chunk and every Euler step reuses them.

The model works in normalised units; `Normaliser` (stored with the checkpoint)
converts at both edges. Checkpoints are a directory: `config.json` (HeadConfig
+ metadata) and `model.safetensors` (weights + normalisation statistics).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from plan_stack.actions.errors import CheckpointError
from plan_stack.config import ConfigError, from_mapping, param, validate
from plan_stack.planning.training.checkpoints import save_json, save_tensors

__all__ = ["HeadConfig", "Normaliser", "FlowHead", "Context", "save_checkpoint", "load_checkpoint"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class HeadConfig:
    """Shape and size of the head; sizes buffers, so read-only as node parameters."""

    action_dim: int = param("D: joints per action", 14, min=1, read_only=True)
    state_dim: int = param("robot-state size", 14, min=1, read_only=True)
    horizon: int = param("H: samples per chunk", 50, min=2, read_only=True)
    cond_width: int = param("width of each conditioning token (PlanFeatures shape[1])", 16, min=1,
                            read_only=True)
    width: int = param("transformer width", 64, min=8, read_only=True)
    layers: int = param("transformer blocks", 2, min=1, read_only=True)
    heads: int = param("attention heads", 4, min=1, read_only=True)
    mlp_ratio: int = param("MLP hidden size / width", 2, min=1, read_only=True)
    num_steps: int = param("N: Euler steps per chunk", 10, min=1)
    dt_s: float = param("control period of the chunk samples (s)", 0.02, min=1e-4)

    def __post_init__(self) -> None:
        validate(self)
        if self.width % self.heads:
            raise ConfigError(f"heads: width {self.width} is not divisible by {self.heads} heads")


class Normaliser(nn.Module):
    """Per-channel mean/std for actions, state and conditioning; saved with the weights.

    std is floored at `min_std` so constant channels (a gripper that never
    moves in the data) map to 0 instead of dividing by zero.
    """

    def __init__(self, action_dim: int, state_dim: int, cond_width: int, min_std: float = 1e-3) -> None:
        super().__init__()
        self.min_std = min_std
        for name, n in (("action", action_dim), ("state", state_dim), ("cond", cond_width)):
            self.register_buffer(f"{name}_mean", torch.zeros(n))
            self.register_buffer(f"{name}_std", torch.ones(n))

    def fit(self, actions: np.ndarray, states: np.ndarray, cond: np.ndarray) -> None:
        for name, data in (("action", actions), ("state", states), ("cond", cond)):
            data = np.asarray(data, dtype=np.float64).reshape(-1, getattr(self, f"{name}_mean").numel())
            getattr(self, f"{name}_mean").copy_(torch.from_numpy(data.mean(0)).float())
            getattr(self, f"{name}_std").copy_(torch.from_numpy(np.maximum(data.std(0), self.min_std)).float())

    def norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return (x - getattr(self, f"{name}_mean")) / getattr(self, f"{name}_std")

    def denorm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return x * getattr(self, f"{name}_std") + getattr(self, f"{name}_mean")


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of flow time t [...] in [0, 1] -> [..., dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=t.dtype, device=t.device) / half)
    ang = (t[..., None] * 1000.0) * freqs
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


@dataclasses.dataclass
class Context:
    """Per-chunk conditioning, computed once: state token and cross-attention K/V per block."""

    state_token: torch.Tensor  # [B, 1, C]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per block: [B, heads, K, C/heads] x 2
    cond_mask: torch.Tensor | None  # [B, 1, 1, K] bool, True = attend


class _Block(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj1 = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.q_cross = nn.Linear(width, width)
        self.kv_cross = nn.Linear(width, 2 * width)
        self.proj2 = nn.Linear(width, width)
        self.norm3 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, C] -> [B, heads, T, C/heads]
        b, n, c = x.shape
        return x.view(b, n, self.heads, c // self.heads).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, n, c = x.shape
        return x.transpose(1, 2).reshape(b, n, h * c)

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv_cross(memory).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(self, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor],
                cond_mask: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        x = x + self.proj1(self._merge(F.scaled_dot_product_attention(self._split(q), self._split(k),
                                                                       self._split(v))))
        q = self._split(self.q_cross(self.norm2(x)))
        x = x + self.proj2(self._merge(F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=cond_mask)))
        return x + self.mlp(self.norm3(x))


class FlowHead(nn.Module):
    """Velocity model v(x_t, t | state, cond) in normalised units."""

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.width
        self.action_in = nn.Linear(cfg.action_dim, c)
        self.pos = nn.Parameter(torch.randn(cfg.horizon, c) * 0.02)
        self.time_mlp = nn.Sequential(nn.Linear(c, c), nn.SiLU(), nn.Linear(c, c))
        self.state_in = nn.Linear(cfg.state_dim, c)
        self.cond_in = nn.Sequential(nn.Linear(cfg.cond_width, c), nn.LayerNorm(c))
        self.blocks = nn.ModuleList(_Block(c, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.layers))
        self.norm_out = nn.LayerNorm(c)
        self.action_out = nn.Linear(c, cfg.action_dim)
        self.normaliser = Normaliser(cfg.action_dim, cfg.state_dim, cfg.cond_width)

    def encode(self, state: torch.Tensor, cond: torch.Tensor, cond_mask: torch.Tensor | None = None) -> Context:
        """state [B, S], cond [B, K, W] (normalised), cond_mask [B, K] (True = valid) -> Context."""
        memory = self.cond_in(cond)
        kv = [cast(_Block, blk).cross_kv(memory) for blk in self.blocks]
        mask = None if cond_mask is None else cond_mask[:, None, None, :]
        return Context(self.state_in(state)[:, None, :], kv, mask)

    def velocity(self, x: torch.Tensor, t: torch.Tensor, ctx: Context) -> torch.Tensor:
        """x [B, H, D], per-position flow time t [B, H] -> v [B, H, D]."""
        h = self.action_in(x) + self.pos[None, : x.shape[1]] + self.time_mlp(time_embedding(t, self.cfg.width))
        h = torch.cat([ctx.state_token, h], dim=1)
        for blk, kv in zip(self.blocks, ctx.kv):
            h = blk(h, kv, ctx.cond_mask)
        return self.action_out(self.norm_out(h[:, 1:]))

    def forward(self, x: torch.Tensor, t: torch.Tensor, state: torch.Tensor, cond: torch.Tensor,
                cond_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.velocity(x, t, self.encode(state, cond, cond_mask))


# --- checkpoints ---------------------------------------------------------------------------------


def save_checkpoint(path: str, head: FlowHead, meta: dict[str, Any] | None = None) -> None:
    """Write `config.json` + `model.safetensors` into directory `path` (atomically per file, readable by all)."""
    os.makedirs(path, exist_ok=True)
    save_tensors(os.path.join(path, WEIGHTS_FILE),
                 {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()})
    save_json(os.path.join(path, CONFIG_FILE), {"head": dataclasses.asdict(head.cfg), "meta": meta or {}},
              indent=2, sort_keys=True)


def load_checkpoint(path: str, **overrides: Any) -> tuple[FlowHead, dict[str, Any]]:
    """Load a head (eval mode) and its metadata; `overrides` change non-shape fields (num_steps)."""
    from safetensors.torch import load_file

    cfg_path, w_path = os.path.join(path, CONFIG_FILE), os.path.join(path, WEIGHTS_FILE)
    if not (os.path.isfile(cfg_path) and os.path.isfile(w_path)):
        raise CheckpointError(f"checkpoint: {path!r} needs {CONFIG_FILE} and {WEIGHTS_FILE}")
    with open(cfg_path) as fh:
        doc = json.load(fh)
    try:
        cfg = from_mapping(HeadConfig, {**doc["head"], **overrides})
    except (KeyError, ConfigError) as exc:
        raise CheckpointError(f"checkpoint: {cfg_path} has an invalid head config: {exc}") from None
    head = FlowHead(cfg)
    try:
        head.load_state_dict(load_file(w_path))
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint: {w_path} does not fit its config: {exc}") from None
    head.eval()
    return head, doc.get("meta", {})
