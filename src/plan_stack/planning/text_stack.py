"""The Qwen3 / Qwen3-VL text layers run from their own weights: the target's decode steps and prompt.

A decode step is a few tokens through a few small layers, and transformers' per-call machinery (masks,
output capture, kwargs plumbing) was half of it; `run_layers` does the same operations in the same order
(tests compare every output with the model's forward, to the bit on CPU float32). `direct_layers` says
whether a model has the structure it computes.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

__all__ = ["direct_layers", "run_layers", "rms_norm", "rotate_half"]


def direct_layers(base: Any, text_config: Any) -> Any:
    """The Qwen3 / Qwen3-VL text stack `run_layers` computes (full attention, no biases, SiLU MLP,
    per-head q/k norms), or None: another structure keeps the model's own forward."""
    lm = getattr(base, "language_model", base)
    if type(lm).__name__ not in ("Qwen3Model", "Qwen3VLTextModel"):
        return None
    if getattr(text_config, "hidden_act", None) != "silu" or getattr(text_config, "attention_bias", False) \
            or getattr(text_config, "use_sliding_window", False) \
            or any(t != "full_attention" for t in getattr(text_config, "layer_types", None) or ()):
        return None
    for layer in lm.layers:
        att, mlp = layer.self_attn, layer.mlp
        if any(getattr(m, "bias", None) is not None for m in (att.q_proj, att.k_proj, att.v_proj, att.o_proj,
                                                             mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
            return None
    return lm


def run_layers(lm: Any, cache: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               mask: torch.Tensor | None, device: torch.device,
               deepstack: tuple[torch.Tensor, list[torch.Tensor]] | None = None
               ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Embeddings h [1, n, H] through every layer of `lm`, appending their K/V to `cache`.

    cos, sin [1, 1, n, head_dim] (rotary tables of the n positions); mask [n, cached + n] (bool, True = may
    attend, or an additive float bias), None: causal over the block; deepstack: (positions [1, n] of the image
    tokens, features added to them after layer 0, 1, ...). Returns the hidden states as transformers'
    `output_hidden_states` lists them (the embeddings, then each layer's output; each [1, n, H]) and the final
    normed hidden state [1, n, H].
    """
    n = h.shape[1]
    hidden = [h]  # as `output_hidden_states`: the embeddings, then each layer's output
    for i, layer in enumerate(lm.layers):
        att = layer.self_attn
        x = rms_norm(h, layer.input_layernorm)
        q = rms_norm(F.linear(x, att.q_proj.weight).view(1, n, -1, att.head_dim), att.q_norm).transpose(1, 2)
        k = rms_norm(F.linear(x, att.k_proj.weight).view(1, n, -1, att.head_dim), att.k_norm).transpose(1, 2)
        v = F.linear(x, att.v_proj.weight).view(1, n, -1, att.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = cache.update(k, v, i)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and n > 1,
                                           scale=att.scaling, enable_gqa=q.shape[1] != k.shape[1])
        h = h + F.linear(o.transpose(1, 2).reshape(1, n, -1), att.o_proj.weight)
        x = rms_norm(h, layer.post_attention_layernorm)
        mlp = layer.mlp
        h = h + F.linear(F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight),
                         mlp.down_proj.weight)
        hidden.append(h)  # the layer's output, before any deepstack feature (what transformers records)
        if deepstack is not None and i < len(deepstack[1]):
            where, feature = deepstack
            h = h.clone()
            h[where, :] = h[where, :] + feature[i].to(device, h.dtype)
    return hidden, rms_norm(h, lm.norm)


def rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    """The Qwen3 RMSNorm module's arithmetic (in float32, weight applied in the input's dtype)."""
    y = x.to(torch.float32)
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * y.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """x [..., d] -> [-x[d/2:], x[:d/2]] (RoPE's rotation, as the model's own)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
