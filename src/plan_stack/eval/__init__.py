"""Evaluation: plan accuracy on recorded episodes, and replay of bags through the graph.

Plan accuracy (`plan-stack eval-plans`): `plans` decodes the annotated
keyframes of recorded episodes with each decoder and scores the plans with
`plan_metrics` (ADE/FDE, success radius, pixel error, box IoU); `plans_cli`
is the command. Replay (`plan-stack record`, `plan-stack eval`): `record`
records live topics, `replay` feeds a bag through the real nodes,
`replay_metrics` summarises the outputs (chunk seams, trajectory continuity
and limits, latency) and `report` writes report.json / report.html; `cli` is
the command.
"""
