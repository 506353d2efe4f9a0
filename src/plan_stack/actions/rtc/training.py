"""Training-time RTC: simulated inference delays, the clean-prefix inputs and the masked flow loss."""
from __future__ import annotations

import torch

from plan_stack.actions.errors import RtcError

__all__ = ["sample_delays", "training_time_inputs", "masked_flow_loss"]


def sample_delays(batch: int, max_delay: int, generator: torch.Generator | None = None,
                  distribution: str = "uniform", temperature: float = 1.0) -> torch.Tensor:
    """Simulated delays d in {0, ..., max_delay - 1} (exclusive bound), [B] int64.

    `uniform`, or `exp`: p(d) proportional to exp(-d / temperature).
    """
    if max_delay < 1:
        raise RtcError(f"max_delay: must be >= 1, got {max_delay}")
    if distribution == "uniform":
        p = torch.ones(max_delay)
    elif distribution == "exp":
        if not temperature > 0:
            raise RtcError(f"temperature: must be > 0, got {temperature!r}")
        p = torch.exp(-torch.arange(max_delay, dtype=torch.float64) / temperature).float()
    else:
        raise RtcError(f"distribution: {distribution!r} is not one of ['uniform', 'exp']")
    return torch.multinomial(p, batch, replacement=True, generator=generator)


def training_time_inputs(actions: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
                         delays: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Noisy input, per-position time and loss mask for simulated-delay training.

    actions, noise [B, H, D]; t [B]; delays [B]. Positions j < d get the clean
    time (0) and their clean action, and no loss. Returns x_t [B, H, D],
    times [B, H], loss mask [B, H] (1 = supervised).
    """
    b, h, _ = actions.shape
    prefix = torch.arange(h, device=actions.device)[None, :] < delays[:, None]
    times = torch.where(prefix, torch.zeros((), dtype=t.dtype), t[:, None].expand(b, h))
    x_t = (1.0 - times)[..., None] * actions + times[..., None] * noise
    return x_t, times, (~prefix).to(actions.dtype)


def masked_flow_loss(v_pred: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor,
                     mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error to u = eps - a over supervised positions (mask [B, H])."""
    err = (v_pred - (noise - actions)).pow(2).mean(dim=-1)  # [B, H]
    if mask is None:
        return err.mean()
    return (err * mask).sum() / mask.sum().clamp(min=1.0)
