"""`plan-stack record-demos`: scripted demonstrations of any embodiment as rosbag2 MCAP + annotation JSON.

`--robot aloha` (default; tasks transfer_cube, insertion), `franka` (task
pick_place) or `drive` (task drive). Episode `i` uses seed `--seed + i`
(object / cube and target / obstacle placement), is planned by the robot's
scripted expert, replayed on its simulator with rendering, and written to
`DIR/<task>_<seed>/` (a rosbag2 folder holding one .mcap) and
`DIR/<task>_<seed>.json` (annotation; formats in docs/aloha.md,
docs/franka.md, docs/drive.md). Options left out take the robot's recorder
defaults. Robots, their tasks and options come from their profiles
(`plan_stack.robots`), their recorders through `embodiments.registry`.

`--jobs N` records the episodes in N worker processes (each episode depends
only on its seed, so the files are the same as with one); `--threads`
bounds each process's torch threads (the `--policy-model` planner).
Measured on the 2-core machine: two on-policy drives side by side took
93 s each with torch's default 2 threads per process, 19 s each with 1.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import sys
import time
from typing import Any

from plan_stack.embodiments import registry
from plan_stack.planning.decoders import DECODINGS
from plan_stack.robots import PROFILES, profile, robot_names

#: record-demos option -> the recorder options field it sets (for the robots whose recorder has it).
_ONLY_SOME = {"duration": "duration_s", "horizon": "horizon_s", "perturb": "perturbation", "miss": "miss_m",
             "pick_only": "pick_only", "policy_model": "policy_model", "policy_decoder": "policy_decoder",
             "policy_latency": "policy_latency_s", "policy_latency_max": "policy_latency_max_s",
             "displace": "displacement"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", choices=robot_names(), default="aloha", help="embodiment (default aloha)")
    parser.add_argument("--task", choices=sorted({t for p in PROFILES.values() for t in p.episode.tasks}), default=None,
                        help="task of the robot (default: transfer_cube for aloha; franka: pick_place; drive: drive)")
    parser.add_argument("--episodes", type=int, default=10, help="number of episodes (default 10)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    parser.add_argument("--width", type=int, default=320, help="camera width in px (default 320)")
    parser.add_argument("--height", type=int, default=240, help="camera height in px (default 240)")
    parser.add_argument("--camera-rate", type=float, default=None,
                        help="camera frames per sim second (default 10; drive 5)")
    parser.add_argument("--keyframe-period", type=float, default=None,
                        help="s between annotated keyframes (default 0.5; drive 1)")
    parser.add_argument("--waypoints", type=int, default=None,
                        help="waypoints per annotated path, P (default 10; drive: future ego waypoints, 8)")
    parser.add_argument("--duration", type=float, default=None,
                        help="drive only: recorded sim seconds per episode (default 30)")
    parser.add_argument("--horizon", type=float, default=None, help="drive only: time the waypoints span, s (default 4)")
    parser.add_argument("--perturb", type=float, default=None, metavar="STD",
                        help="aloha transfer_cube and drive only: recovery pushes of this std (rad) injected "
                             "into the expert's commands (drive: its steering), paths annotated as the expert "
                             "recovers (default 0: none)")
    parser.add_argument("--policy-model", default=None, metavar="DIR",
                        help="drive only: on-policy demonstrations (DAgger): this planner model directory (a path "
                             "or a name under models/) drives through the drive bridge, the expert labels each "
                             "keyframe with its path from there; the episode ends at the road's edge")
    parser.add_argument("--policy-decoder", default=None, choices=DECODINGS,
                        help="drive only: the policy's decoder (default vflash)")
    parser.add_argument("--policy-latency", type=float, default=None, metavar="S",
                        help="drive only: s from an image to its plan reaching the bridge (default 0.3, the "
                             "graph's planner latency)")
    parser.add_argument("--policy-latency-max", type=float, default=None, metavar="S",
                        help="drive only: draw each plan's delay uniformly from [--policy-latency, this] (the "
                             "graph's latency varies from plan to plan; default: a fixed delay)")
    parser.add_argument("--displace", type=_metres_radians, default=None, metavar="M,RAD",
                        help="drive only: displacement demonstrations: every 2-4 s the car's pose jumps sideways "
                             "by up to M metres and turns by up to RAD radians (uniform), the expert drives back, "
                             "paths annotated from each keyframe's state (default: none)")
    parser.add_argument("--miss", type=float, default=None, metavar="M",
                        help="franka only: recovery demonstrations whose first grasp closes M to 1.5 M metres "
                             "beside the cube; the expert reopens and picks it (default 0: none)")
    parser.add_argument("--pick-only", action="store_const", const=True, default=None,
                        help="franka only: record each episode until the grasp closes (the approach images); "
                             "success = the cube held")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes recording episodes side by side (default 1; at most one per core)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads per process for --policy-model (default 1: with more, processes "
                             "side by side oversubscribe the cores)")


def _metres_radians(text: str) -> tuple[float, float]:
    try:
        m, rad = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M,RAD (two numbers), got {text!r}") from None
    return m, rad


def _options(args: argparse.Namespace):
    """The robot's recorder options from the arguments given (the rest keep the recorder's defaults)."""
    robot = profile(args.robot)
    given = {"width": args.width, "height": args.height, "camera_rate_hz": args.camera_rate,
             "keyframe_period_s": args.keyframe_period, "waypoints": args.waypoints}
    given.update({_ONLY_SOME[name]: getattr(args, name) for name in robot.episode.recorder_only_options})
    options = registry.record_options_class(robot)
    return options(**{k: v for k, v in given.items() if v is not None})


def run(args: argparse.Namespace) -> int:
    robot, spec = args.robot, profile(args.robot).episode
    task = args.task or spec.tasks[0]
    if task not in spec.tasks:
        print(f"record-demos: --task {task} is not a {robot} task (choose from {list(spec.tasks)})",
              file=sys.stderr)
        return 2
    foreign = [n for n in _ONLY_SOME if n not in spec.recorder_only_options and getattr(args, n) is not None]
    if foreign:
        owners = [p.name for p in PROFILES.values() if foreign[0] in p.episode.recorder_only_options]
        print(f"record-demos: --{'/--'.join(n.replace('_', '-') for n in foreign)} apply to --robot {'/'.join(owners)} only", file=sys.stderr)
        return 2
    if args.episodes < 1:
        print("record-demos: --episodes must be at least 1", file=sys.stderr)
        return 2
    try:
        options = _options(args)
    except ValueError as exc:
        print(f"record-demos: {exc}", file=sys.stderr)
        return 2
    if args.jobs < 1 or args.threads < 1:
        print("record-demos: --jobs and --threads must be at least 1", file=sys.stderr)
        return 2
    seeds = [args.seed + i for i in range(args.episodes)]
    solved = 0
    try:
        for seed, ann, seconds in _record_all(args, task, options, seeds):
            solved += ann["success"]
            reward = f" (reward {ann['reward']})" if spec.reports_reward else ""
            print(f"{task} seed {seed}: {'success' if ann['success'] else 'FAILED'}{reward}, "
                  f"{len(ann['keyframes'])} keyframes, {seconds:.1f} s -> {args.out}/{ann['bag']}", flush=True)
    except FileExistsError as exc:
        print(f"record-demos: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # an option the task does not support (checked before anything is written)
        print(f"record-demos: {exc}", file=sys.stderr)
        return 2
    print(f"{solved}/{args.episodes} episodes {spec.success_means}")
    return 0


def _record_all(args: argparse.Namespace, task: str, options: Any, seeds: list[int]):
    """(seed, annotation, seconds) per episode: in this process in seed order, or with --jobs in worker
    processes as they finish (started with spawn: a forked simulator's GL context is not the child's)."""
    setup = (args.robot, task, args.out, args.width, args.height, args.threads, bool(args.policy_model))
    if args.jobs == 1 or len(seeds) == 1:
        _start_worker(*setup)
        for seed in seeds:
            yield _record_seed(seed, options)
        return
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(min(args.jobs, len(seeds)), mp_context=context,
                                                initializer=_start_worker, initargs=setup) as pool:
        futures = [pool.submit(_record_seed, seed, options) for seed in seeds]
        try:
            for done in concurrent.futures.as_completed(futures):
                yield done.result()
        finally:  # an error (or the caller stopping) cancels the episodes not started
            for f in futures:
                f.cancel()


#: this process's recorder (`_start_worker`): one per process, so a policy model loads once per process
_RECORDER: Any = None


def _start_worker(robot: str, task: str, out: str, width: int, height: int, threads: int, torch_used: bool) -> None:
    global _RECORDER
    if torch_used:
        import torch

        torch.set_num_threads(threads)
    _RECORDER = registry.recorder(profile(robot), task, out, width, height)


def _record_seed(seed: int, options: Any) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    ann = _RECORDER(seed, options)
    return seed, ann, time.monotonic() - t0
