"""Evaluation, one module per command: plan accuracy, bag replay, closed-loop episodes, action heads.

* Plan accuracy (`plan-stack eval-plans`): `plans` decodes the annotated keyframes of recorded episodes with
  each decoder and scores the plans with `plan_metrics` (ADE/FDE, success radius, pixel error, box IoU);
  `plans_cli` is the command.
* Bag replay (`plan-stack eval`): `bag_replay` feeds a bag through the real nodes, `replay_metrics`
  summarises the outputs (chunk seams, trajectory continuity and limits, latency) and `report` writes
  report.json / report.html; `cli` is the command. (`plan-stack record`, which records live topics, is
  `plan_stack.data.record_cli`.)
* Closed-loop episodes (`plan-stack run-episodes`, `make demo`): `episodes/`.
* Action heads alone in the simulator (`plan-stack eval-head`): `heads`, `heads_cli`.
"""
