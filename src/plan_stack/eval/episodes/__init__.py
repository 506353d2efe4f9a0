"""Closed-loop episodes of the whole stack (`plan-stack run-episodes`, `make demo`, `make demo-expert`):
success criteria, latency by stage, the episode runner, the ground-truth-plan ablation, the replay of a
recorded command stream and the scripted expert's demo."""
