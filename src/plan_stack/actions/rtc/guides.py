"""RTC guides: wrap any velocity function and change only what one Euler step sees (per-position
flow time, guided velocity) and what is imposed after it (the locked prefix); plus the test-time
guidance weights over positions (`prefix_weights`) and flow time (`guidance_weight`).
"""
from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from plan_stack.actions.errors import RtcError

__all__ = ["VelocityFn", "Schedule", "prefix_weights", "guidance_weight", "Guide", "Unguided", "PrefixConditioning",
           "Guidance"]

#: x [B, H, D], per-position flow time t [B, H] -> velocity [B, H, D]
VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]



class Schedule(str, enum.Enum):
    EXP = "exp"
    LINEAR = "linear"
    ONES = "ones"
    ZEROS = "zeros"


def prefix_weights(prefix_len: int, region_end: int, horizon: int, schedule: Schedule | str) -> np.ndarray:
    """Per-position guidance weights w [H]: 1 on the locked prefix, decaying to 0 at `region_end`.

    With d = prefix_len, e = region_end (exclusive end of the overlap with the
    previous chunk) and i the position:
    `linear`: clip((d - 1 - i)/(e - d + 1) + 1, 0, 1); `exp`: w_lin (e^w_lin - 1)/(e - 1);
    `ones`: 1; `zeros`: 1 only for i < d. Every schedule is 0 for i >= e.
    """
    schedule = Schedule(schedule)
    if not 0 <= region_end <= horizon or prefix_len < 0:
        raise RtcError(f"need 0 <= region_end <= horizon and prefix_len >= 0; got {region_end}, {horizon}, "
                       f"{prefix_len}")
    i = np.arange(horizon, dtype=float)
    d = min(prefix_len, region_end)
    if schedule is Schedule.ONES:
        w = np.ones(horizon)
    elif schedule is Schedule.ZEROS:
        w = (i < d).astype(float)
    else:
        w = np.clip((d - 1 - i) / (region_end - d + 1) + 1.0, 0.0, 1.0)
        if schedule is Schedule.EXP:
            w = w * np.expm1(w) / (math.e - 1.0)
    w[i >= region_end] = 0.0
    return w


def guidance_weight(t: float, beta: float) -> float:
    """Black et al.'s guidance weight, min(((1 - tau)/tau) (tau^2 + (1 - tau)^2)/(1 - tau)^2, beta).

    tau = 1 - t is their data time; at either end (the expression is infinite
    there) the weight is beta.
    """
    tau = 1.0 - t
    if tau <= 0.0 or tau >= 1.0:
        return float(beta)
    return float(min((1.0 - tau) / tau * (tau**2 + (1.0 - tau) ** 2) / (1.0 - tau) ** 2, beta))



class Guide(Protocol):
    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor: ...

    def project(self, x: torch.Tensor) -> torch.Tensor: ...


def _times(x: torch.Tensor, t: float) -> torch.Tensor:
    return torch.full(x.shape[:2], t, dtype=x.dtype, device=x.device)


class Unguided:
    """Plain flow sampling."""

    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor:
        return fn(x, _times(x, t))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return x


class PrefixConditioning:
    """Inpainting by construction: the first L positions are the aligned prefix, at clean time.

    The prefix is imposed before the first step, after every step and after
    the last, so the returned prefix equals it exactly.
    """

    def __init__(self, prefix: torch.Tensor, prefix_len: int) -> None:
        self.prefix = prefix  # [B, H, D] (only the first prefix_len positions are used)
        self.prefix_len = int(prefix_len)

    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor:
        times = _times(x, t)
        times[:, : self.prefix_len] = 0.0
        return fn(x, times)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        if self.prefix_len == 0:
            return x
        x = x.clone()
        x[:, : self.prefix_len] = self.prefix[:, : self.prefix_len]
        return x


class Guidance:
    """Test-time RTC: steer the clean estimate a_hat = x - t v toward the prefix.

    correction = J^T (w * (y - a_hat)) with J = d a_hat / d x (VJP through the
    denoiser) or J = I (direct); v_guided = v - g(t) correction, g(t) =
    `guidance_weight(t, beta)` (minus: our integration subtracts v). beta = 0
    gives exactly the unguided velocity.
    """

    def __init__(self, prefix: torch.Tensor, weights: torch.Tensor, beta: float, vjp: bool = True) -> None:
        self.prefix = prefix  # [B, H, D]
        self.weights = weights.to(prefix.dtype)[None, :, None]  # [1, H, 1]
        self.beta = float(beta)
        self.vjp = vjp

    def velocity(self, fn: VelocityFn, x: torch.Tensor, t: float) -> torch.Tensor:
        times = _times(x, t)
        g = guidance_weight(t, self.beta)
        if self.vjp:
            with torch.enable_grad():
                xr = x.detach().requires_grad_(True)
                v = fn(xr, times)
                a_hat = xr - t * v
                err = ((self.prefix - a_hat) * self.weights).detach()
                (corr,) = torch.autograd.grad(a_hat, xr, grad_outputs=err)
            v = v.detach()
        else:
            v = fn(x, times)
            corr = (self.prefix - (x - t * v)) * self.weights
        return v - g * corr

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return x
