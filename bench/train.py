#!/usr/bin/env python3
"""Training throughput: one process against data-parallel ranks, side by side, on a robot's recipe.

For each stage (the target, then the drafter on it) and each rank count, the recipe's model is built
afresh from the same seed and trained `--steps` steps on the same recorded keyframes, with the whole
`--threads` budget shared by the ranks; the rank counts alternate which goes first from one repetition to
the next, since the machine's speed drifts. Each row is one run (fork and the first steps included);
the summary rows give the median steps/s and its ratio to the first variant (one process).

Stage `features`: the action heads' plan-feature pass (`actions.train_features.keyframe_features`, one
teacher-forced target pass of the annotated responses) of the shipped model over the keyframes, with
`--feature-batches` keyframes per padded pass (1: a pass per keyframe); "steps" are keyframes there, and the
ratio is to the first batch size.

Stage `selection`: the target's checkpoint-selection decodes (greedy AR on `--selection-keyframes`
keyframes, `planning.training.target.SharedSelection`) of the shipped model (`--model`), shared by the ranks or
decoded by one process with every thread; one training step at learning rate 0 first, so every run
decodes the same weights. There "steps" are keyframes decoded.

    plan-stack record-demos --robot drive --episodes 8 --out /tmp/drive_val --width 224 --height 224 \\
        --camera-rate 2 --keyframe-period 0.5
    python bench/train.py --robot drive --data /tmp/drive_val --steps 60 --reps 2 --json out/bench/train.json
    python bench/train.py --robot drive --data /tmp/drive_val --stages selection --selection-keyframes 43
    python bench/train.py --robot aloha --data /tmp/aloha_val --stages features --keyframes 170
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time

import torch
from report import add_json_option, report  # bench/report.py: shared table + JSON output

from plan_stack.actions.train_features import keyframe_features
from plan_stack.data.episodes import load_keyframes
from plan_stack.paths import find_data
from plan_stack.planning.model_dir import PlannerModel, load_planner_model
from plan_stack.planning.samples import KeyframeSamples, fit_ranges, response_tokens
from plan_stack.planning.training import drafter as TR
from plan_stack.planning.training import target as TT
from plan_stack.planning.training.data_parallel import usable_cores
from plan_stack.recipes.selection import ar_selection
from plan_stack.recipes.train import build_drafter, build_target, located_centre
from plan_stack.robots import profile, robot_names

COLUMNS = ["stage", "ranks", "threads_per_rank", "per_pass", "rep", "steps", "seconds", "steps_per_s", "samples_per_s",
           "x_vs_first"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="drive", choices=robot_names())
    ap.add_argument("--data", required=True, help="a recorded split (record-demos output) to train on")
    ap.add_argument("--keyframes", type=int, default=400, help="keyframes read from --data (default 400)")
    ap.add_argument("--steps", type=int, default=60, help="optimiser steps per run (default 60)")
    ap.add_argument("--reps", type=int, default=2, help="runs per stage and rank count (default 2)")
    ap.add_argument("--ranks", default="1,2", help="rank counts to compare (default 1,2)")
    ap.add_argument("--threads", type=int, default=usable_cores(), help="torch threads shared by the ranks")
    ap.add_argument("--stages", default="target,drafter", help="of target, drafter, selection")
    ap.add_argument("--model", default=None, help="stage selection: the model decoded (default: the shipped one)")
    ap.add_argument("--selection-keyframes", type=int, default=43, help="stage selection: keyframes decoded")
    ap.add_argument("--feature-batches", default="1,16", help="stage features: keyframes per target pass to compare")
    add_json_option(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    recipe, spec = profile(args.robot).recipe, profile(args.robot).learning
    keyframes = load_keyframes(args.data, spec, recipe.image_size)[:args.keyframes]
    if not keyframes:
        raise SystemExit(f"{args.data}: no keyframes")
    ranges, workspace = fit_ranges(keyframes, spec)
    manifest = {"robot": args.robot, "cameras": list(spec.cameras), "image_size": list(recipe.image_size),
                "coordinate_ranges": ranges, "workspace": workspace, "instruction": keyframes[0].instruction}

    def fresh_model() -> PlannerModel:
        torch.manual_seed(recipe.seed)
        return PlannerModel("unsaved", build_target(recipe), None, manifest)

    counts = [int(r) for r in args.ranks.split(",")]
    # the response tokens depend on the tokenizer and the ranges, the same for every fresh model: made once
    probe = fresh_model()
    items = [TT.TrainItem(kf.images, kf.instruction, response_tokens(probe.target, kf, spec, probe.ranges)[0],
                          located_centre(kf, spec, recipe.locate)) for kf in keyframes]
    target_cfg = TT.TargetTrainConfig(steps=args.steps, batch_size=recipe.target_batch, lr=recipe.target_lr,
                                      eval_every=0, checkpoint_every=0, locate_weight=recipe.target_locate_weight,
                                      coord_sigma_bins=recipe.target_coord_sigma_bins, seed=recipe.seed)
    drafter_cfg = TR.DrafterTrainConfig(steps=args.steps, batch_size=recipe.drafter_batch, lr=recipe.drafter_lr,
                                        max_text_anchors=recipe.drafter_text_anchors, checkpoint_every=0,
                                        seed=recipe.seed)
    rows: list[dict] = []
    per_pass = [int(b) for b in args.feature_batches.split(",")]
    for stage in args.stages.split(","):
        batch = {"target": target_cfg.batch_size, "drafter": drafter_cfg.batch_size}.get(stage, 1)
        steps = {"selection": args.selection_keyframes, "features": len(keyframes)}.get(stage, args.steps)
        # (ranks, keyframes per target pass) compared; the drafter packs its whole batch into one pass
        variants = [(1, b) for b in per_pass] if stage == "features" else [(r, batch) for r in counts]
        for rep in range(args.reps):
            for ranks, n_pass in variants if rep % 2 == 0 else variants[::-1]:
                model = fresh_model() if stage not in ("selection", "features") else shipped_model(args)
                with tempfile.TemporaryDirectory() as work:
                    if stage == "features":
                        t0 = time.perf_counter()
                        keyframe_features(model, keyframes, spec, batch=n_pass)
                    elif stage == "selection":
                        t0 = time.perf_counter()
                        select_once(model, keyframes[:args.selection_keyframes], spec, target_cfg, work, ranks)
                    elif stage == "target":
                        t0 = time.perf_counter()
                        TT.train_target(model, items, target_cfg, work, log=lambda s: None, ranks=ranks)
                    else:
                        drafter = build_drafter(recipe, model.target)
                        t0 = time.perf_counter()
                        TR.train(drafter, model.target, KeyframeSamples(model, keyframes, spec), drafter_cfg,
                                 ranks=ranks)
                    seconds = time.perf_counter() - t0
                rows.append({"stage": stage, "ranks": ranks, "threads_per_rank": max(1, args.threads // ranks),
                             "per_pass": n_pass, "rep": rep, "steps": steps, "seconds": round(seconds, 2),
                             "steps_per_s": round(steps / seconds, 3),
                             "samples_per_s": round(steps * batch / seconds, 1)})

        def rate_of(variant: tuple[int, int]) -> float:
            return statistics.median(r["steps_per_s"] for r in rows if r["stage"] == stage and r["rep"] != "median"
                                     and (r["ranks"], r["per_pass"]) == variant)

        for ranks, n_pass in variants:
            rows.append({"stage": stage, "ranks": ranks, "threads_per_rank": max(1, args.threads // ranks),
                         "per_pass": n_pass, "rep": "median", "steps": steps,
                         "steps_per_s": round(rate_of((ranks, n_pass)), 3),
                         "x_vs_first": round(rate_of((ranks, n_pass)) / rate_of(variants[0]), 2)})
    report(rows, COLUMNS, args.json)


def shipped_model(args: argparse.Namespace) -> PlannerModel:
    model = load_planner_model(args.model or find_data("models", args.robot))
    if model.manifest.get("robot") != args.robot:
        raise SystemExit(f"{model.path}: a {model.manifest.get('robot')} model, not {args.robot}")
    return model


def select_once(model: PlannerModel, keyframes, spec, cfg: TT.TargetTrainConfig, work: str, ranks: int) -> None:
    """One training step at learning rate 0 (the weights stay), then the selection decodes of `keyframes`."""
    items = [TT.TrainItem(kf.images, kf.instruction, response_tokens(model.target, kf, spec, model.ranges)[0])
             for kf in keyframes[:cfg.batch_size]]
    TT.train_target(model, items, dataclasses.replace(cfg, steps=1, lr=0.0, locate_weight=0.0, augment=False),
                    work, evaluate=ar_selection(keyframes, spec), log=lambda s: None, ranks=ranks)


if __name__ == "__main__":
    main()
