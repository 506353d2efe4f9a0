"""Closed-loop episodes of the whole stack (`plan-stack run-episodes`, `make demo`): success criteria,
latency by stage, the episode runner and the ground-truth-plan ablation."""
