"""`plan-stack export`: the fixed-shape models of a robot's stack to ONNX, with `engines.json`.

Exports the chunker's action head (flow step) and, when the robot has a
planner model directory, the drafter's pass per primitive block size (plus
the DFlash text block) and the vision encoder for the model's images. The
nodes run the result with `backend: onnx` (or `tensorrt` on a GPU) and
`engine_dir: DIR`.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", required=True, help="robot config name (config/<robot>.yaml) or path")
    parser.add_argument("--out", required=True, help="output directory (ONNX files + engines.json)")
    parser.add_argument("--model-dir", default=None,
                        help="planner model directory (default: models/<robot> when it exists)")
    parser.add_argument("--head", action="append", default=None, metavar="DIR",
                        help="action head checkpoint(s) (default: the chunker's `checkpoint` in the robot config)")
    parser.add_argument("--block-sizes", default=None,
                        help="comma-separated drafter block sizes (default: from the model manifest)")


def _chunker_checkpoint(robot: str) -> str | None:
    from plan_stack.robot_config import load_robot_config

    for spec in load_robot_config(robot).nodes:
        if spec.executable == "chunker" and spec.parameters.get("checkpoint"):
            return str(spec.parameters["checkpoint"])
    return None


def run(args: argparse.Namespace) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from tqdm import tqdm

    from plan_stack.config import ConfigError
    from plan_stack.engines import export as E
    from plan_stack.paths import find_data

    out = Path(args.out)
    jobs = []  # (label, callable returning {key: entry}, source name)
    sources: dict[str, dict[str, str]] = {}
    try:
        heads = args.head or [c for c in [_chunker_checkpoint(args.robot)] if c]
    except ConfigError as exc:
        print(f"plan-stack export: {exc}", file=sys.stderr)
        return 2
    for i, name in enumerate(heads):
        try:
            path = find_data("models", name)
        except FileNotFoundError as exc:
            print(f"plan-stack export: action head: {exc}", file=sys.stderr)
            return 2
        key = "flow_step" if i == 0 else f"flow_step_{i}"
        sources[key] = {"path": str(path), "sha256": E.directory_hash(path)}
        jobs.append((f"action head {name}", key, path))
    model_dir = args.model_dir
    if model_dir is None:
        robot = Path(args.robot).stem
        try:
            candidate = find_data("models", robot)
            model_dir = str(candidate) if (candidate / "manifest.json").is_file() else None
        except FileNotFoundError:
            model_dir = None
    if not jobs and model_dir is None:
        print(f"plan-stack export: nothing to export for {args.robot!r} (no chunker checkpoint, no models/<robot>)",
              file=sys.stderr)
        return 2
    models: dict[str, dict] = {}
    with tqdm(total=len(jobs) + (1 if model_dir else 0), desc="export", unit="model") as bar:
        from plan_stack.actions.head import load_checkpoint

        for _label, key, path in jobs:
            head, _ = load_checkpoint(str(path))
            entry = E.export_flow_step(head, out, name=key)
            entry["source"] = key
            models[key] = entry
            bar.update()
        if model_dir:
            from plan_stack.planning.errors import PlanningError
            from plan_stack.planning.model_dir import load_planner_model

            try:
                model = load_planner_model(model_dir)
            except PlanningError as exc:
                print(f"plan-stack export: {exc}", file=sys.stderr)
                return 2
            sources["planner"] = {"path": str(model_dir), "sha256": E.directory_hash(model_dir)}
            models.update(E.export_planner(model, out, args.block_sizes))
            bar.update()
    file = E.write_manifest(out, models, sources)
    for key, entry in sorted(models.items()):
        print(f"{key:24s} {entry['file']}")
    print(f"wrote {file}")
    return 0
