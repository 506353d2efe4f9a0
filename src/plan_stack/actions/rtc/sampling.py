"""The one Euler loop every RTC method samples with (flow time 1 = noise -> 0 = clean)."""
from __future__ import annotations

import torch

from plan_stack.actions.errors import RtcError
from plan_stack.actions.rtc.guides import Guide, Unguided, VelocityFn

__all__ = ["integrate"]


def integrate(fn: VelocityFn, noise: torch.Tensor, num_steps: int, guide: Guide | None = None) -> torch.Tensor:
    """Euler integration from t = 1 (noise [B, H, D]) to t = 0; returns the clean sample."""
    if num_steps < 1:
        raise RtcError(f"num_steps: must be >= 1, got {num_steps}")
    guide = guide or Unguided()
    step = 1.0 / num_steps
    x = guide.project(noise)
    for k in range(num_steps):
        t = 1.0 - k * step
        x = x - step * guide.velocity(fn, x, t)
        x = guide.project(x)
    return x
