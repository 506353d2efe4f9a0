"""The planner's `plans` diagnostic: rates and percentiles over a rolling window, with the node's counters."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from plan_stack.planning.plan_stats import PlanStats
from plan_stack.planning.runtime import PlanOutput


def _out(total_ms: float, tau: float = 2.0, prompt_tokens: int = 100, prefilled_tokens: int = 25) -> PlanOutput:
    return PlanOutput(
        stamp_s=0.0, instruction="", subtask="", primitives=[], features=np.zeros((0, 4), np.float32), decoder="ar",
        valid=True, reason="", stop_reason="eos", vision_ms=1.0, prefill_ms=2.0, decode_ms=total_ms - 3.0,
        total_ms=total_ms, target_forwards=1, drafter_forwards=0, tokens_out=2, tau=tau, gate_accepted=0,
        gate_fallback=0, blocks_rejected=0, prompt_tokens=prompt_tokens, prefilled_tokens=prefilled_tokens,
        frames=1, frames_encoded=1)


def test_the_values_are_the_diagnostic_keys_in_order_with_missing_counters_zero():
    stats = PlanStats(window=10)
    stats.add(5.0, _out(10.0))
    counts = collections.Counter(plans=1, stale=2, superseded=3)
    values = stats.values(counts)
    assert list(values) == [
        "plans", "plans_per_s", "total_ms_p50_p95", "vision_ms_p50_p95", "prefill_ms_p50_p95", "decode_ms_p50_p95",
        "tokens_per_target_forward", "gate_accepted", "gate_fallback", "blocks_rejected", "skipped_stale",
        "skipped_malformed", "superseded", "invalid", "no_primitive", "cancelled", "streaming_saved_prefill_pct"]
    assert (values["plans"], values["skipped_stale"], values["superseded"], values["invalid"]) == (1, 2, 3, 0)
    assert values["plans_per_s"] == "0.00"  # one plan: no rate yet
    assert values["total_ms_p50_p95"] == "10.0/10.0" and values["vision_ms_p50_p95"] == "1.0/1.0"
    assert values["tokens_per_target_forward"] == "2.00"
    assert values["streaming_saved_prefill_pct"] == "75.0"


def test_rates_and_percentiles_cover_the_last_window_plans_only():
    stats = PlanStats(window=3)
    for t_s, total_ms in [(0.0, 1000.0), (10.0, 10.0), (10.5, 20.0), (11.0, 30.0)]:
        stats.add(t_s, _out(total_ms))
    values = stats.values({})
    assert values["plans_per_s"] == "2.00"  # 2 intervals over 1 s
    p50, p95 = (float(x) for x in values["total_ms_p50_p95"].split("/"))
    assert p50 == 20.0 and p95 == pytest.approx(29.0)


def test_a_window_needs_room_for_one_plan():
    with pytest.raises(ValueError, match="window: expected >= 1, got 0"):
        PlanStats(window=0)
