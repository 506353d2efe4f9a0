"""The learning-rate schedule every trainer runs: linear warm-up to the peak, then half a cosine down to a floor.

The trainers differ in two choices only, so they are this class's fields: the target and drafter trainers
warm up over a fraction of their steps (`warmup_fraction`) and decay to zero; the action head trainer warms up
over a number of steps (0: none, start at the cosine's top) and decays to 10 % of the peak (`floor=0.1`).
The rate is a pure function of the step, so a resumed run and the head's log lines read the same rates as the
run that stepped through them (test/planning/training/test_schedule.py holds the formulas they had before).
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["WarmupCosine"]


@dataclasses.dataclass(frozen=True)
class WarmupCosine:
    """Learning rate at optimiser step `step` (0-based): `peak_lr * (step + 1) / warmup_steps` while warming up,
    then `peak_lr * (floor + (1 - floor) * (1 + cos(pi * progress)) / 2)`, the progress running from 0 after
    warm-up to 1 at `steps` and held there (the floor) beyond."""

    peak_lr: float
    steps: int
    warmup_steps: int
    #: the decay's end as a fraction of the peak
    floor: float = 0.0

    @classmethod
    def warmup_fraction(cls, peak_lr: float, steps: int, warmup_frac: float, floor: float = 0.0) -> WarmupCosine:
        """Warm-up over `warmup_frac` of the steps, rounded down, and at least one step: the cosine then starts at
        step 1 (at step 0 the peak either way)."""
        return cls(peak_lr, steps, max(1, int(warmup_frac * steps)), floor)

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return self.peak_lr * (self.floor + (1.0 - self.floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))

    def apply(self, opt: torch.optim.Optimizer, step: int) -> None:
        """Set every parameter group of `opt` to this step's learning rate (called before the step's update)."""
        lr = self(step)
        for group in opt.param_groups:
            group["lr"] = lr
