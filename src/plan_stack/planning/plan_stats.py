"""What the planner's `plans` diagnostic says about its recent plans (no ROS).

Over the last `window` plans: plans per second of wall time, p50/p95 of each stage's latency, tokens per
target forward, and the share of prompt tokens streaming spared the prefill; with them, the node's counters
of what happened to observations and plans. The values are strings in the diagnostic's units and order.
"""
from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from plan_stack.planning.runtime import PlanOutput

__all__ = ["PlanStats"]

#: diagnostic key -> planner node counter, in the order they are reported
_COUNTERS = {"gate_accepted": "gate_accepted", "gate_fallback": "gate_fallback",
                    "blocks_rejected": "blocks_rejected", "skipped_stale": "stale", "skipped_malformed": "malformed",
                    "superseded": "superseded", "invalid": "invalid", "no_primitive": "no_primitive",
                    "cancelled": "cancelled"}


class PlanStats:
    """A rolling window of the last `window` plans. Not thread-safe: the planner's worker adds and reports."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"window: expected >= 1, got {window}")
        self._plans: collections.deque[tuple[float, PlanOutput]] = collections.deque(maxlen=window)

    def add(self, wall_s: float, out: PlanOutput) -> None:
        """A plan published at `wall_s` (a monotonic wall clock, s)."""
        self._plans.append((wall_s, out))

    def values(self, counts: Mapping[str, int]) -> dict[str, Any]:
        """The `plans` diagnostic's values: `counts` (the node's counters; missing ones are 0) and the window's
        statistics. Needs at least one plan."""
        outs = [o for _, o in self._plans]
        stamps = [t for t, _ in self._plans]

        def pct(attr: str) -> str:
            v = np.asarray([getattr(o, attr) for o in outs])
            return f"{np.percentile(v, 50):.1f}/{np.percentile(v, 95):.1f}"

        rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else 0.0
        prompt = sum(o.prompt_tokens for o in outs)
        saved = 100.0 * (1.0 - sum(o.prefilled_tokens for o in outs) / max(prompt, 1))
        return dict(
            plans=counts.get("plans", 0), plans_per_s=f"{rate:.2f}",
            total_ms_p50_p95=pct("total_ms"), vision_ms_p50_p95=pct("vision_ms"),
            prefill_ms_p50_p95=pct("prefill_ms"), decode_ms_p50_p95=pct("decode_ms"),
            tokens_per_target_forward=f"{np.mean([o.tau for o in outs]):.2f}",
            **{key: counts.get(counter, 0) for key, counter in _COUNTERS.items()},
            streaming_saved_prefill_pct=f"{saved:.1f}")
