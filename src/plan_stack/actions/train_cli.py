"""`plan-stack train-action-head`: train the flow-matching head on demonstrations.

Sources: `--demos DIR` (episodes recorded by `plan-stack record-demos`,
conditioning built from their annotated ground-truth plan and instruction) or
`--synthetic N` (smooth synthetic reaches, for smoke tests and the RTC
benchmark). Re-running with the same `--out` resumes from its last checkpoint
(`--fresh` starts over).
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil

from plan_stack.actions.errors import ActionsError
from plan_stack.config import ConfigError
from plan_stack.device import EngineError, add_device_arguments, placement_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--demos", metavar="DIR", help="directory written by `plan-stack record-demos`")
    src.add_argument("--synthetic", type=int, metavar="N", help="use N synthetic episodes instead")
    parser.add_argument("--out", required=True, help="checkpoint directory (resumed if it holds a run)")
    parser.add_argument("--fresh", action="store_true", help="delete an existing run in --out first")
    parser.add_argument("--force-resume", action="store_true",
                        help="resume even though the run in --out was trained on other data")
    parser.add_argument("--eval-fraction", type=float, default=0.2, help="episodes held out for evaluation")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    add_device_arguments(parser, dtype=False)
    parser.add_argument("--dt", type=float, default=0.02, help="control period of synthetic episodes (s)")
    from plan_stack.actions.head import HeadConfig
    from plan_stack.actions.train import HeadTrainConfig

    head_fields = ("horizon", "width", "layers", "heads", "mlp_ratio", "num_steps")
    for f in dataclasses.fields(HeadConfig):
        if f.name in head_fields:
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                                help=f.metadata["plan_stack"].description.replace("%", "%%"))
    for f in dataclasses.fields(HeadTrainConfig):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                            help=f.metadata["plan_stack"].description.replace("%", "%%"))


def run(args: argparse.Namespace) -> int:
    import torch

    from plan_stack.actions.data import split_episodes, synthetic_episodes
    from plan_stack.actions.head import HeadConfig
    from plan_stack.actions.train import HeadTrainConfig, train

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        if args.demos:
            from plan_stack.actions.demos import load_demo_dir
            from plan_stack.data.episodes import data_fingerprint

            episodes = load_demo_dir(args.demos)
            source = {"source": "demos", **data_fingerprint([args.demos])}
        else:
            episodes = synthetic_episodes(args.synthetic, dt_s=args.dt, seed=args.seed)
            source = {"source": "synthetic", "episodes": args.synthetic, "seed": args.seed, "dt_s": args.dt}
        train_eps, eval_eps = split_episodes(episodes, args.eval_fraction, seed=args.seed)
        e = episodes[0]
        head_cfg = HeadConfig(action_dim=e.actions.shape[1], state_dim=e.states.shape[1],
                              cond_width=e.cond.shape[2], dt_s=e.dt_s, horizon=args.horizon, width=args.width,
                              layers=args.layers, heads=args.heads, mlp_ratio=args.mlp_ratio,
                              num_steps=args.num_steps)
        train_cfg = HeadTrainConfig(**{f.name: getattr(args, f.name)
                                       for f in dataclasses.fields(HeadTrainConfig)})
        if args.fresh:
            shutil.rmtree(args.out, ignore_errors=True)
        print(f"{len(train_eps)} training / {len(eval_eps)} held-out episodes, head {head_cfg}")
        res = train(head_cfg, train_cfg, train_eps, eval_eps, args.out,
                    meta={"data": {**source, "train": [x.name for x in train_eps],
                                   "eval": [x.name for x in eval_eps]}},
                    force_resume=args.force_resume, device=placement_from_args(args).device)
    except (ActionsError, ConfigError, EngineError) as exc:
        print(f"train-action-head: {exc}")
        return 2
    print(f"done: step {res.step}, train loss {res.train_loss:.4f}, "
          + " ".join(f"{k} {v:.4f}" for k, v in res.eval.items()) + f", checkpoint in {args.out}")
    return 0
