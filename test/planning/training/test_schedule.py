"""The learning-rate schedule equals, bit for bit, the formulas each trainer used before it was shared."""
from __future__ import annotations

import math

import pytest
import torch

from plan_stack.planning.training.schedule import WarmupCosine


def planner_formula(step: int, lr: float, steps: int, warmup_frac: float) -> float:
    """The target and drafter trainers' own `_lr_at`, as they were written."""
    warm = max(1, int(warmup_frac * steps))
    if step < warm:
        return lr * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def head_formula(step: int, lr: float, steps: int, warmup_steps: int) -> float:
    """The action head trainer's own `_lr_at`, as it was written."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(steps - warmup_steps, 1)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


PEAKS = (1e-3, 2e-4, 3e-3, 3e-4, 1e-2, 7.5e-4, 0.0)
STEP_COUNTS = (1, 2, 7, 24, 200, 600, 2000, 4321)


def test_warmup_fraction_schedule_equals_the_target_and_drafter_formula_at_every_step():
    for lr in PEAKS:
        for steps in STEP_COUNTS:
            for frac in (0.0, 0.03, 0.04, 0.1, 0.5, 1.0):
                schedule = WarmupCosine.warmup_fraction(lr, steps, frac)
                # beyond `steps` too: a run resumed with more steps than it was planned for
                for step in range(steps + 5):
                    assert schedule(step) == planner_formula(step, lr, steps, frac), (lr, steps, frac, step)


def test_warmup_steps_schedule_with_a_tenth_floor_equals_the_action_head_formula_at_every_step():
    for lr in PEAKS:
        for steps in STEP_COUNTS:
            for warmup in (0, 1, 5, 100, steps, steps + 3):
                schedule = WarmupCosine(lr, steps, warmup, floor=0.1)
                for step in range(steps + 5):
                    assert schedule(step) == head_formula(step, lr, steps, warmup), (lr, steps, warmup, step)


def test_warmup_rises_linearly_to_the_peak_then_decays_to_the_floor():
    schedule = WarmupCosine(1.0, 10, 4, floor=0.25)
    assert [schedule(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert schedule(4) == 1.0 and schedule(10) == 0.25 and schedule(50) == 0.25
    assert all(schedule(s) > schedule(s + 1) for s in range(4, 10))


def test_a_warmup_fraction_under_one_step_still_warms_up_for_one_step():
    assert WarmupCosine.warmup_fraction(1e-3, 20, 0.01).warmup_steps == 1
    assert WarmupCosine.warmup_fraction(1e-3, 200, 0.04).warmup_steps == 8


def test_apply_sets_every_parameter_group_to_the_step_rate():
    opt = torch.optim.AdamW([{"params": [torch.nn.Parameter(torch.zeros(2))], "weight_decay": 0.1},
                             {"params": [torch.nn.Parameter(torch.zeros(3))], "weight_decay": 0.0}], lr=5.0)
    schedule = WarmupCosine(2e-3, 100, 10)
    schedule.apply(opt, 3)
    assert [g["lr"] for g in opt.param_groups] == [schedule(3), schedule(3)]
    assert schedule(3) == pytest.approx(8e-4)
