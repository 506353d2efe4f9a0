"""`plan-stack eval-head`: closed-loop success of action heads alone, in the simulator, without ROS.

For every recorded episode in `--demos` (record-demos; its seed places the
cube), each head drives a fresh simulator of that seed (`eval.heads.rollout`)
conditioned on `--plans`: `annotated` (the episode's annotated plans through
the frozen target: the head's share of a closed-loop failure) or a decoder
(`vflash`, `ar`, `dflash`: the planner on the live camera image every
`--replan-steps`, the learned stack minus ROS and latency). Seconds per
episode instead of minutes through the graph. One JSON row per (head, episode) plus one summary per
head; `--expert` adds the scripted commands through the same loop (must be
100 %: the loop's own check).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from plan_stack.planning.decoders import DECODINGS
from plan_stack.robots import profile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="aloha", help="robot (ALOHA only: the simulator this loop drives)")
    parser.add_argument("--demos", required=True, help="directory of recorded episodes (record-demos --out)")
    parser.add_argument("--heads", default="aloha/action_head/plain,aloha/action_head/rtc",
                        help="comma-separated head checkpoints: paths or names under models/")
    parser.add_argument("--model", default=None, help="planner model directory whose target makes the features "
                        "(default: the shipped models/<robot>)")
    parser.add_argument("--episodes", type=int, default=None, help="use only the first N episodes")
    parser.add_argument("--execute-steps", type=int, default=10,
                        help="control periods executed from each chunk before the next query (default 10)")
    parser.add_argument("--delay-steps", type=int, default=0,
                        help="latency in control periods: a chunk runs from its row N on, N periods after its "
                             "query (default 0)")
    parser.add_argument("--episode-s", type=float, default=10.0, help="sim seconds per episode (default 10)")
    parser.add_argument("--plans", default="annotated", choices=["annotated", *DECODINGS],
                        help="plan source: the annotated plans, or the planner decoding the live image")
    parser.add_argument("--replan-steps", type=int, default=25,
                        help="live plans: control periods between plans (default 25: the planner's 0.5 s)")
    parser.add_argument("--noise-scale", type=float, default=None,
                        help="scale of the flow's start noise (default: the chunker's in config/<robot>.yaml)")
    parser.add_argument("--expert", action="store_true", help="also replay the scripted commands (the ceiling)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    import glob

    import torch
    from tqdm import tqdm

    from plan_stack.actions.errors import ActionsError
    from plan_stack.actions.head import load_checkpoint
    from plan_stack.actions.policy import ChunkPolicy
    from plan_stack.eval.heads import (
        AnnotatedPlans,
        LivePlanner,
        keyframe_conditioning,
        replay_commands,
        rollout,
        summarise,
    )
    from plan_stack.paths import find_data
    from plan_stack.planning.model_dir import load_planner_model

    if args.robot != "aloha":
        print(f"eval-head: only ALOHA's simulator runs in process here, not {args.robot!r}", file=sys.stderr)
        return 2
    if args.execute_steps < 1 or args.replan_steps < 1 or not args.episode_s > 0 or args.delay_steps < 0:
        print("eval-head: --execute-steps and --replan-steps must be >= 1, --delay-steps >= 0 and --episode-s > 0",
              file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(args.demos, "*.json")))[: args.episodes]
    if not files:
        print(f"eval-head: no annotation JSON files in {args.demos!r} (run `plan-stack record-demos`)",
              file=sys.stderr)
        return 2
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.set_num_threads(args.threads)
    from plan_stack.embodiments.aloha.expert import plan_episode
    from plan_stack.embodiments.aloha.model import JOINT_NAMES
    from plan_stack.embodiments.aloha.sim import AlohaSim

    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    from plan_stack.robot_config import load_robot_config

    nodes = {n.executable: n.parameters for n in load_robot_config(args.robot).nodes}
    noise_scale = args.noise_scale
    if noise_scale is None:
        noise_scale = float(nodes.get("chunker", {}).get("noise_scale", 1.0))
    sim_params = nodes.get("aloha_sim", {})
    camera_size = (int(sim_params.get("camera_width", 320)), int(sim_params.get("camera_height", 240)))
    try:
        model = load_planner_model(args.model or str(find_data("models", args.robot)))
        policies = {}
        for h in heads:
            path = h if os.path.isdir(h) else str(find_data("models", h))
            head, _ = load_checkpoint(path)
            policies[h] = ChunkPolicy(head, "naive", fast=True, noise_scale=noise_scale)
    except (OSError, ValueError, ActionsError) as exc:
        print(f"eval-head: {exc}", file=sys.stderr)
        return 2
    spec = profile(args.robot).learning
    episodes = []
    for f in tqdm(files, desc="plan features", unit="episode"):
        with open(f, encoding="utf-8") as fh:
            seed = int(json.load(fh)["seed"])
        annotated = AnnotatedPlans(*keyframe_conditioning(model, f, spec)) if args.plans == "annotated" else None
        episodes.append((seed, annotated, plan_episode("transfer_cube", seed).commands))
    sim = AlohaSim("transfer_cube", offscreen_size=(max(640, camera_size[0]), max(480, camera_size[1])))
    live = None if args.plans == "annotated" else LivePlanner(model, args.plans, sim, camera_size=camera_size)
    names = tuple(JOINT_NAMES)
    out, table = [], []
    for name in (["expert"] if args.expert else []) + heads:
        rows = []
        for seed, annotated, expert in tqdm(episodes, desc=name, unit="episode"):
            if name == "expert":
                sample = replay_commands(expert, args.execute_steps)
            else:
                gen = torch.Generator().manual_seed(seed)
                pol = policies[name]

                def sample(state, cond, pol=pol, gen=gen):
                    return pol.sample(state, cond, generator=gen).positions
            plans = annotated if annotated is not None else live if name != "expert" else _no_plans
            assert plans is not None  # live is built whenever there are no annotated plans
            rows.append(rollout(sample, seed, plans, expert, episode_s=args.episode_s,
                                execute_steps=args.execute_steps, replan_steps=args.replan_steps, sim=sim,
                                joint_names=names, delay_steps=args.delay_steps))
        summary = {"head": name, "plans": args.plans, "noise_scale": None if name == "expert" else noise_scale,
                   "execute_steps": args.execute_steps, "delay_steps": args.delay_steps, **summarise(rows)}
        table.append(summary)
        out.append({"summary": summary, "rows": [r.row() for r in rows]})
    if live is not None:
        live.close()
    print(f"plans: {args.plans}")
    print(f"{'head':<40} {'success':>9} {'stages 0/1/2/3/4':>18} {'rms to expert':>14}")
    for s in table:
        print(f"{s['head']:<40} {s['successes']:>4}/{s['episodes']:<4} {'/'.join(map(str, s['reward_stages'])):>18} "
              f"{s['rms_to_expert_median']:>14}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


def _no_plans(t_s, sim):
    """The expert's replay reads no plan."""
    import numpy as np

    return np.zeros((1, 1))


def main() -> int:  # pragma: no cover
    parser = argparse.ArgumentParser(prog="plan-stack eval-head")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
