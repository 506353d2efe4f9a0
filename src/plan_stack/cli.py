"""`plan-stack` command: one entry point, one module per subcommand.

Each subcommand module provides `add_arguments(parser)` and `run(args) -> int`
and is imported only when that subcommand runs (no heavy imports at start).
"""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("plan_stack.bringup", "start the nodes of config/<robot>.yaml"),
    "record-demos": ("plan_stack.embodiments.record_demos",
                     "record scripted demonstrations, --robot aloha|franka|drive (MCAP + annotations)"),
    "train-action-head": ("plan_stack.actions.train_cli", "train the flow-matching action head (resumable)"),
    "train-drafter": ("plan_stack.planning.training.cli", "train the VFlash drafter for a target (resumable)"),
    "render": ("plan_stack.viz.render", "PNG pictures of the plans in a bag (overlays, 3D plots vs ground truth)"),
    "eval": ("plan_stack.eval.cli", "replay bags through the real nodes: metrics, report.json + report.html"),
    "record": ("plan_stack.data.record_cli", "record live topics to a rosbag2 MCAP bag (Ctrl-C closes it)"),
    "export": ("plan_stack.engines.export_cli", "export a robot's fixed-shape models to ONNX (+ engines.json)"),
    "params": ("plan_stack.params_cli", "write standard ROS 2 parameter files (one per node) from a robot config"),
    "train": ("plan_stack.recipes.train",
              "rebuild a robot's planner models (target, drafter, action heads) from recordings (resumable)"),
    "eval-plans": ("plan_stack.eval.plans_cli", "plan accuracy of a model directory on recorded episodes, per decoder"),
    "run-episodes": ("plan_stack.eval.episodes.cli",
                     "closed-loop episodes of the stack through the full ROS graph, one per seed (success, latency)"),
    "eval-head": ("plan_stack.eval.heads_cli",
                  "closed-loop success of action heads alone in the simulator (annotated plans, no ROS)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="plan-stack", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    # Parse the subcommand name first, then let its module define its arguments.
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv)
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    sub_parser = argparse.ArgumentParser(prog=f"plan-stack {argv[0]}", description=SUBCOMMANDS[argv[0]][1])
    module.add_arguments(sub_parser)
    args = sub_parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
