"""`plan-stack train-drafter`: train a VFlash drafter for a target checkpoint.

The target is a local checkpoint directory (`--target`) or, for a quick
self-contained run, a tiny random Qwen3 / Qwen3-VL built from a config
(`--tiny text|vl`, saved to OUT/target so the drafter stays paired with it).
Training data are synthetic annotated primitives (`training.drafter.synthetic_samples`).
"""
from __future__ import annotations

import argparse
import os
import sys

from plan_stack.device import EngineError, add_device_arguments, placement_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--target", help="local target checkpoint directory (weights + tokenizer)")
    src.add_argument("--tiny", choices=("text", "vl"), help="build a tiny random target from a config")
    parser.add_argument("--out", required=True, help="output directory of the drafter checkpoint")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--samples", type=int, default=64, help="synthetic annotated sequences")
    parser.add_argument("--kinds", default="robot_2d3d", help="comma-separated layout kinds")
    parser.add_argument("--waypoints", type=int, default=10)
    parser.add_argument("--max-text-anchors", type=int, default=512)
    parser.add_argument("--width", type=int, default=256, help="drafter width")
    parser.add_argument("--layers", type=int, default=5, help="drafter layers")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    parser.add_argument("--force-resume", action="store_true",
                        help="resume even though the checkpoint was trained on other data")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    parser.add_argument("--ranks", type=int, default=None,
                        help="data-parallel training processes on the CPU, sharing the threads and splitting "
                             "--batch-size (default: 2 where there are 2-3 threads, 4 from 4, where that divides "
                             "--batch-size, else 1; 1 on a GPU)")
    parser.add_argument("--seed", type=int, default=0)
    add_device_arguments(parser, dtype=False)


def run(args: argparse.Namespace) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    from plan_stack.planning import drafter as D
    from plan_stack.planning import target_build as T
    from plan_stack.planning.errors import PlanningError
    from plan_stack.planning.training import drafter as TR
    from plan_stack.planning.training.data_parallel import training_ranks, usable_cores

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        device = placement_from_args(args).device
    except EngineError as exc:
        print(f"train-drafter: {exc}", file=sys.stderr)
        return 2
    try:
        ranks = training_ranks(args.ranks, args.threads or usable_cores(), device, args.batch_size)
    except PlanningError as exc:
        print(f"train-drafter: {exc}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    if args.tiny:
        tdir = os.path.join(args.out, "target")
        if args.resume and os.path.isfile(os.path.join(tdir, "config.json")):
            target = T.load_target(tdir)
        else:
            target = T.tiny_target(args.tiny, seed=args.seed)
            T.save_target(target, tdir)
    else:
        target = T.load_target(args.target)
    target.model.to(device)
    if args.resume and os.path.isfile(os.path.join(args.out, D.CONFIG_FILE)):
        drafter = D.load_drafter(args.out, target)
    else:
        drafter = D.new_drafter(target, width=args.width, layers=args.layers, heads=args.heads,
                                kv_heads=max(1, args.heads // 2), head_dim=args.head_dim, intermediate=2 * args.width)
    drafter.to(device)
    cfg = TR.DrafterTrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                max_text_anchors=args.max_text_anchors, checkpoint_every=args.checkpoint_every,
                                seed=args.seed)
    samples = TR.synthetic_samples(target, args.samples, kinds=tuple(args.kinds.split(",")),
                                   waypoints=args.waypoints, seed=args.seed)
    data_id = {"source": "synthetic", "samples": args.samples, "kinds": args.kinds, "waypoints": args.waypoints,
               "seed": args.seed}
    try:
        losses = TR.train(drafter, target, samples, cfg, out_dir=args.out, resume=args.resume, progress=True,
                          data_id=data_id, force_resume=args.force_resume, ranks=ranks)
    except PlanningError as exc:
        print(f"train-drafter: {exc}")
        return 2
    if losses:
        print(f"trained {len(losses)} steps on {ranks} rank{'s' if ranks > 1 else ''}: loss {losses[0]:.3f} -> "
              f"{losses[-1]:.3f}; drafter in {args.out}")
    else:
        print(f"nothing to do: checkpoint in {args.out} already has {cfg.steps} steps")
    return 0
