"""Block drafter: a few non-causal layers conditioned on target hidden states.

DFlash-style design (as in VFlash):
* context = hidden states of `target_layers` (5 spread target layers),
  concatenated, projected to the drafter width and RMS-normalised; each drafter
  layer turns the context into its own keys/values (feature-level K/V
  injection) and attends to it together with the block;
* the block is [anchor, MASK x (B-1)], embedded with the target's frozen
  input embeddings; positions inside the block see each other (non-causal)
  and every context position before the anchor, nothing after it;
* logits come from the target's frozen LM head, so only the layers and the
  projections are trained and stored (safetensors + JSON config).

The inference cache keeps each layer's context K/V for committed positions
(append on commit, crop on rollback), so a draft costs one pass over the block.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

from plan_stack.config import ConfigError, param, validate
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.training.checkpoints import save_json, write_atomically


@dataclasses.dataclass(frozen=True)
class DrafterConfig:
    """Shape of a drafter; stored as config.json next to the weights."""

    target_hidden: int = param("hidden width of the target (embeddings / LM head)", min=1)
    target_layers: tuple[int, ...] = param("target layers whose hidden states form the context")
    mask_token_id: int = param("id of <text_mask>, the MASK input of drafted positions", min=0)
    width: int = param("drafter hidden width", 256, min=8)
    layers: int = param("number of non-causal drafter layers", 5, min=1, max=64)
    heads: int = param("attention heads", 4, min=1)
    kv_heads: int = param("key/value heads (GQA)", 2, min=1)
    head_dim: int = param("per-head width", 64, min=2)
    intermediate: int = param("SwiGLU hidden width", 512, min=1)
    rope_theta: float = param("rotary base", 10000.0, min=1.0)
    rms_eps: float = param("RMSNorm epsilon", 1e-6, min=0.0)
    text_block: int = param("text block size (1 anchor + proposals)", 16, min=2, max=256)

    def __post_init__(self) -> None:
        validate(self)
        if not self.target_layers:
            raise ConfigError("target_layers: at least one layer is needed")
        if self.heads % self.kv_heads:
            raise ConfigError(f"heads: {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"head_dim: {self.head_dim} must be even (rotary)")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.eps, self.weight)


def rms_norm(x: torch.Tensor, eps: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """RMS norm over the last axis, computed in float32, times `weight` (None: 1)."""
    # one fused op: a draft is a few hundred small ops, each costs its dispatch (ONNX has no rms_norm at
    # the opsets the engines export to)
    if x.dtype == torch.float32 and not torch.onnx.is_in_onnx_export():
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    x32 = x.float()
    out = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return out if weight is None else out * weight


def _cos_sin(pos: torch.Tensor, d: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary cos/sin [n, d] of positions pos [n]."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=pos.device) / d))
    ang = pos.to(torch.float32)[:, None] * inv[None]
    return torch.cat([ang.cos(), ang.cos()], -1).to(dtype), torch.cat([ang.sin(), ang.sin()], -1).to(dtype)


#: (head_dim, theta, device, dtype) -> cos, sin tables [positions, head_dim], grown on demand
_ROPE_TABLES: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _rope_table(d: int, theta: float, n: int, device: torch.device, dtype: torch.dtype):
    """cos/sin of positions 0..>=n-1, the same values `_cos_sin` gives position by position."""
    key = (d, theta, device, dtype)
    cos_sin = _ROPE_TABLES.get(key)
    if cos_sin is None or cos_sin[0].shape[0] < n:
        size = max(n, 2 * cos_sin[0].shape[0] if cos_sin is not None else 512)
        cos_sin = _ROPE_TABLES[key] = _cos_sin(torch.arange(size, device=device), d, theta, dtype)
    return cos_sin


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE; x [..., n, d], pos [n] (non-negative integer positions)."""
    d = x.shape[-1]
    if torch.onnx.is_in_onnx_export():  # computed from pos in the graph: a table would be baked in at its size
        cos, sin = _cos_sin(pos, d, theta, x.dtype)
    elif pos.numel() == 0:
        return x
    else:
        cos_t, sin_t = _rope_table(d, theta, int(pos.max()) + 1, x.device, x.dtype)
        cos, sin = cos_t[pos], sin_t[pos]
    return _rotate(x, cos, sin)


def _rope_from(x: torch.Tensor, start: int, theta: float) -> torch.Tensor:
    """`_rope` at the consecutive positions start, start+1, ... (x [..., n, d]): slices of the table, no
    gather."""
    d, n = x.shape[-1], x.shape[-2]
    cos_t, sin_t = _rope_table(d, theta, start + n, x.device, x.dtype)
    return _rotate(x, cos_t[start:start + n], sin_t[start:start + n])


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class DrafterLayer(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        self.in_norm = RMSNorm(c.width, c.rms_eps)
        self.q_proj = nn.Linear(c.width, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.width, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.width, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.width, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.post_norm = RMSNorm(c.width, c.rms_eps)
        self.gate = nn.Linear(c.width, c.intermediate, bias=False)
        self.up = nn.Linear(c.width, c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, c.width, bias=False)
        self._fused_key: tuple = ()
        self._fused_weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def kv(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values [kv_heads, n, head_dim] of inputs x [n, width] at positions pos [n]."""
        n = x.shape[0]
        k = self.k_norm(self.k_proj(x).view(n, self.c.kv_heads, self.c.head_dim)).transpose(0, 1)
        v = self.v_proj(x).view(n, self.c.kv_heads, self.c.head_dim).transpose(0, 1)
        return _rope(k, pos, self.c.rope_theta), v

    def forward(self, h: torch.Tensor, pos: torch.Tensor, ctx_k: torch.Tensor, ctx_v: torch.Tensor,
                mask: torch.Tensor | None = None, segments: Segments | None = None) -> torch.Tensor:
        """h [n, width] block states; ctx_k/v [kv, T, hd]; mask [n, T+n] (bool, or an additive float bias;
        None = see all).

        Training and export (any positions, gradients, an ONNX graph); drafting goes through `extending`.
        With `segments` (`packed_segments`), each sample's rows attend only to its own context and block
        columns: the same values when the mask lets nothing cross samples, at a fraction of the products."""
        c = self.c
        n = h.shape[0]
        x = self.in_norm(h)
        q = _rope(self.q_norm(self.q_proj(x).view(n, c.heads, c.head_dim)).transpose(0, 1), pos, c.rope_theta)
        k, v = self.kv(x, pos)
        if segments is None:
            att = self._attend(q, torch.cat([ctx_k, k], 1), torch.cat([ctx_v, v], 1), mask)
        else:
            t = ctx_k.shape[1]
            parts = []
            for (c0, c1), (b0, b1) in segments:
                sub = None if mask is None else torch.cat([mask[b0:b1, c0:c1], mask[b0:b1, t + b0:t + b1]], 1)
                parts.append(self._attend(q[:, b0:b1], torch.cat([ctx_k[:, c0:c1], k[:, b0:b1]], 1),
                                          torch.cat([ctx_v[:, c0:c1], v[:, b0:b1]], 1), sub))
            att = torch.cat(parts, 1)
        h = h + self.o_proj(att.transpose(0, 1).reshape(n, c.heads * c.head_dim))
        x = self.post_norm(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Attention [heads, n, hd] of queries q [heads, n, hd] over keys/values [kv_heads, T, hd]."""
        c = self.c
        if torch.onnx.is_in_onnx_export():  # the exporters know no enable_gqa: heads repeated explicitly
            kr = k.repeat_interleave(c.heads // c.kv_heads, 0)
            vr = v.repeat_interleave(c.heads // c.kv_heads, 0)
            return F.scaled_dot_product_attention(q[None], kr[None], vr[None], attn_mask=mask)[0]
        return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask,
                                              enable_gqa=c.heads != c.kv_heads)[0]

    @torch.no_grad()
    def extending(self, h: torch.Tensor, ctx_k: torch.Tensor, ctx_v: torch.Tensor,
                  new_ctx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Drafting: `forward` for a block at the positions right after the context, the context first grown
        by `new_ctx` [m, width] (positions after ctx_k's) in the same pass.

        Returns (h, ctx_k, ctx_v) with the m new positions appended. A draft pass is a few hundred small
        operations, each paying its dispatch, so the products are fused: queries, keys and values in one
        (the new context's rows and the block's together: a committed step's context costs no pass of its
        own), their head norms in one, gate and up in one; rotary tables are sliced, not gathered. Same
        values as `forward` plus `kv` (tested).
        """
        c = self.c
        heads, kv_heads, hd = c.heads, c.kv_heads, c.head_dim
        n = h.shape[0]
        m = 0 if new_ctx is None else new_ctx.shape[0]
        x = self.in_norm(h)
        if new_ctx is not None and m:
            x = torch.cat([new_ctx, x])
        start = ctx_k.shape[1]
        w_qkv, w_qk_norm, w_gate_up = self._fused()
        qkv = F.linear(x, w_qkv)
        qk = rms_norm(qkv[:, :(heads + kv_heads) * hd].reshape(m + n, heads + kv_heads, hd), c.rms_eps) * w_qk_norm
        q = _rope_from(qk[m:, :heads].transpose(0, 1), start + m, c.rope_theta)
        k = _rope_from(qk[:, heads:].transpose(0, 1), start, c.rope_theta)
        v = qkv[:, (heads + kv_heads) * hd:].reshape(m + n, kv_heads, hd).transpose(0, 1)
        k, v = torch.cat([ctx_k, k], 1), torch.cat([ctx_v, v], 1)
        att = F.scaled_dot_product_attention(q[None], k[None], v[None], enable_gqa=heads != kv_heads)[0]
        h = h + self.o_proj(att.transpose(0, 1).reshape(n, heads * hd))
        gate_up = F.linear(self.post_norm(h), w_gate_up)
        act = F.silu(gate_up[:, :c.intermediate]) * gate_up[:, c.intermediate:]
        return h + self.down(act), k[:, :start + m], v[:, :start + m]

    def _fused(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The weights `extending` multiplies by, concatenated: q|k|v projections, the q and k head norms
        (one row per head), gate|up. Rebuilt whenever a weight changed: moved (its storage) or written in place
        (a loaded checkpoint, an optimiser step: the tensor's version counter)."""
        c = self.c
        params = (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight, self.q_norm.weight,
                  self.k_norm.weight, self.gate.weight, self.up.weight)
        key = tuple((p.data_ptr(), p._version) for p in params)
        if key != self._fused_key or self._fused_weights is None:
            with torch.no_grad():
                self._fused_weights = (
                    torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]),
                    torch.cat([self.q_norm.weight.expand(c.heads, -1), self.k_norm.weight.expand(c.kv_heads, -1)]),
                    torch.cat([self.gate.weight, self.up.weight]))
            self._fused_key = key
        return self._fused_weights


class Drafter(nn.Module):
    """Trainable drafter layers; embeddings and LM head are borrowed (frozen) from the target."""

    def __init__(self, config: DrafterConfig, embed_tokens: nn.Module, lm_head: nn.Module):
        super().__init__()
        c = self.config = config
        self.fc = nn.Linear(len(c.target_layers) * c.target_hidden, c.width, bias=False)
        self.ctx_norm = RMSNorm(c.width, c.rms_eps)
        self.in_proj = nn.Identity() if c.width == c.target_hidden else nn.Linear(c.target_hidden, c.width, bias=False)
        self.layers = nn.ModuleList(DrafterLayer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.width, c.rms_eps)
        self.out_proj = nn.Identity() if c.width == c.target_hidden else nn.Linear(c.width, c.target_hidden, bias=False)
        self._shared = (embed_tokens, lm_head)  # a tuple: not registered, not saved, not trained
        self._ctx_k: list[torch.Tensor] = []
        self._ctx_v: list[torch.Tensor] = []
        self._pending: list[torch.Tensor] = []  # committed features without context K/V yet (`extend`)
        self.reset()

    def layer_stack(self) -> list[DrafterLayer]:
        """The layers with their type (a ModuleList hands out plain Modules to a type checker)."""
        return [cast(DrafterLayer, layer) for layer in self.layers]

    # -- shared pieces --
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.in_proj(self._shared[0](ids).to(self.fc.weight.dtype))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        head = self._shared[1]
        return head(self.out_proj(self.norm(h)).to(head.weight.dtype)).float()

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """features [T, L*H_target] -> context states [T, width]."""
        return self.ctx_norm(self.fc(features.to(self.fc.weight.dtype)))

    # -- inference cache --
    def reset(self) -> None:
        c = self.config
        dt, dev = self.fc.weight.dtype, self.fc.weight.device
        self._ctx_k = [torch.zeros(c.kv_heads, 0, c.head_dim, dtype=dt, device=dev) for _ in range(c.layers)]
        self._ctx_v = [torch.zeros(c.kv_heads, 0, c.head_dim, dtype=dt, device=dev) for _ in range(c.layers)]
        self._pending = []

    @property
    def length(self) -> int:
        """Committed positions: those with context K/V plus those queued by `extend`."""
        return int(self._ctx_k[0].shape[1]) + sum(int(f.shape[0]) for f in self._pending)

    def extend(self, features: torch.Tensor) -> None:
        """Append committed target positions (features [n, L*H]).

        They are queued, and the next `draft` turns them into every layer's context K/V in its own pass
        (`DrafterLayer.extending`): a decoding step then costs one drafter pass, not two. `flush` does it
        at once.
        """
        if features.shape[0]:
            self._pending.append(features)

    def _take_pending(self) -> torch.Tensor | None:
        """Context states [m, width] of the queued positions (the queue emptied), None if none."""
        if not self._pending:
            return None
        feats = self._pending[0] if len(self._pending) == 1 else torch.cat(self._pending)
        self._pending = []
        return self.context(feats.to(self.fc.weight.device))

    @torch.no_grad()
    def flush(self) -> None:
        """Context K/V of every queued position now (readers of the cache itself, e.g. an engine)."""
        ctx = self._take_pending()
        if ctx is None:
            return
        start = int(self._ctx_k[0].shape[1])
        pos = torch.arange(start, start + ctx.shape[0], device=ctx.device)
        for i, layer in enumerate(self.layer_stack()):
            k, v = layer.kv(ctx, pos)
            self._ctx_k[i] = torch.cat([self._ctx_k[i], k], 1)
            self._ctx_v[i] = torch.cat([self._ctx_v[i], v], 1)

    def crop(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise PlanningError(f"drafter crop to {length} outside [0, {self.length}]")
        cached = int(self._ctx_k[0].shape[1])
        if length >= cached:  # only queued positions go
            if length < self.length:
                self._pending = [torch.cat(self._pending)[:length - cached]]
            return
        self._pending = []
        self._ctx_k = [k[:, :length] for k in self._ctx_k]
        self._ctx_v = [v[:, :length] for v in self._ctx_v]

    @torch.no_grad()
    def draft(self, anchor_id: int, block_size: int) -> torch.Tensor:
        """Logits [B-1, V] of positions 1..B-1 of the block [anchor, MASK x (B-1)] (one pass)."""
        if block_size < 2:
            raise PlanningError(f"block_size {block_size} < 2")
        dev = self.fc.weight.device
        ids = torch.full((block_size,), self.config.mask_token_id, dtype=torch.long, device=dev)
        ids[0] = anchor_id
        new_ctx = self._take_pending()
        h = self.embed(ids)
        for i, layer in enumerate(self.layer_stack()):
            h, self._ctx_k[i], self._ctx_v[i] = layer.extending(h, self._ctx_k[i], self._ctx_v[i], new_ctx)
        return self.logits(h[1:]).cpu()  # decoding (grammar, gate) works on the CPU

    # -- packed training forward --
    def forward_packed(self, ctx_features: torch.Tensor, ctx_pos: torch.Tensor, block_ids: torch.Tensor,
                       block_pos: torch.Tensor, mask: torch.Tensor, segments: Segments | None = None) -> torch.Tensor:
        """Many blocks in one pass: logits [M, V] for the M packed block tokens.

        ctx_features [S, L*H] (all samples' target features, concatenated),
        ctx_pos [S] their positions; block_ids/pos [M]; mask [M, S+M] bool from
        `packed_mask` (True = may attend); `segments` from `packed_segments`: attention per sample.
        """
        ctx = self.context(ctx_features)
        h = self.embed(block_ids)
        bias = torch.zeros(mask.shape, dtype=h.dtype, device=h.device).masked_fill(~mask, float("-inf"))
        for layer in self.layer_stack():
            ck, cv = layer.kv(ctx, ctx_pos)
            h = layer(h, block_pos, ck, cv, bias, segments)
        return self.logits(h)


def packed_mask(ctx_sample: torch.Tensor, ctx_pos: torch.Tensor, blk_sample: torch.Tensor, blk_index: torch.Tensor,
                blk_anchor: torch.Tensor, blk_valid: torch.Tensor) -> torch.Tensor:
    """Attention mask [M, S+M] for packed blocks (True = may attend).

    A block token sees the context positions of its own sample that come before
    its anchor, and the valid tokens of its own block (non-causal); nothing of
    other blocks or samples.
    """
    ctx_ok = (blk_sample[:, None] == ctx_sample[None, :]) & (ctx_pos[None, :] < blk_anchor[:, None])
    blk_ok = (blk_index[:, None] == blk_index[None, :]) & blk_valid[None, :]
    return torch.cat([ctx_ok, blk_ok], 1)


Segments = list[tuple[tuple[int, int], tuple[int, int]]]


def packed_segments(ctx_sample: torch.Tensor, blk_sample: torch.Tensor) -> Segments:
    """Per sample, its (context rows, block rows) as [start, end) ranges of a packed batch.

    `packed_mask` lets no row see another sample, so attention can run sample by sample: with 8 samples
    of ~150 context and ~100 block tokens, one packed pass scores 800 x 2,000 pairs, most of them masked,
    against 8 x 100 x 250. Both index lists must hold each sample in one run, in the same order
    (`make_blocks` and the concatenated features do); anything else is refused rather than mis-split.
    """
    def runs(ids: torch.Tensor) -> tuple[list[int], list[tuple[int, int]]]:
        values, counts = torch.unique_consecutive(ids.cpu(), return_counts=True)
        ends = torch.cumsum(counts, 0).tolist()
        return values.tolist(), [(e - n, e) for e, n in zip(ends, counts.tolist())]

    ctx_ids, ctx_runs = runs(ctx_sample)
    blk_ids, blk_runs = runs(blk_sample)
    if len(set(ctx_ids)) != len(ctx_ids) or len(set(blk_ids)) != len(blk_ids):
        raise PlanningError("packed_segments: a sample's rows are not contiguous")
    where = dict(zip(ctx_ids, ctx_runs))
    missing = [i for i in blk_ids if i not in where]
    if missing:
        raise PlanningError(f"packed_segments: blocks of samples {missing} have no context rows")
    return [(where[i], blk) for i, blk in zip(blk_ids, blk_runs)]


# --- checkpoints ---------------------------------------------------------------------------

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def new_drafter(target: Any, **overrides: Any) -> Drafter:
    """A freshly initialised drafter for a `TargetAdapter` (shares its embeddings and LM head)."""
    from plan_stack.planning import vocab as V

    fields = dict(target_hidden=target.hidden_size, target_layers=tuple(target.feature_layers),
                  mask_token_id=target.vocab[V.TEXT_MASK])
    fields.update(overrides)
    d = Drafter(DrafterConfig(**fields), target.embed_tokens, target.lm_head).to(target.dtype)
    d.reset()
    return d


def save_drafter(drafter: Drafter, path: str | os.PathLike) -> None:
    """Write config.json + model.safetensors into directory `path`, each file atomically: it is the drafter
    trainer's checkpoint too, which a stopped run must leave loadable."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    save_json(os.path.join(path, CONFIG_FILE), dataclasses.asdict(drafter.config), indent=1)
    tensors = {k: v.contiguous() for k, v in drafter.state_dict().items()}
    write_atomically(os.path.join(path, WEIGHTS_FILE), lambda tmp: save_file(tensors, tmp))


def load_drafter(path: str | os.PathLike, target: Any) -> Drafter:
    """Load config.json + model.safetensors; the target must match its hidden width and layers."""
    from safetensors.torch import load_file

    cfg_path = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(cfg_path):
        raise PlanningError(f"{path}: no {CONFIG_FILE}")
    with open(cfg_path) as fh:
        raw = json.load(fh)
    raw["target_layers"] = tuple(raw.get("target_layers", ()))
    cfg = DrafterConfig(**raw)
    if cfg.target_hidden != target.hidden_size or tuple(cfg.target_layers) != tuple(target.feature_layers):
        raise PlanningError(
            f"drafter expects target width {cfg.target_hidden} and layers {cfg.target_layers}, "
            f"target has {target.hidden_size} and {target.feature_layers}")
    d = Drafter(cfg, target.embed_tokens, target.lm_head)
    d.load_state_dict(load_file(os.path.join(path, WEIGHTS_FILE)))
    d = d.to(target.dtype)
    d.reset()
    return d


def num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())

