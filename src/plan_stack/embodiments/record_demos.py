"""`plan-stack record-demos`: scripted demonstrations of any embodiment as rosbag2 MCAP + annotation JSON.

`--robot aloha` (default; tasks transfer_cube, insertion), `franka` (task
pick_place) or `drive` (task drive). Episode `i` uses seed `--seed + i`
(object / cube and target / obstacle placement), is planned by the robot's
scripted expert, replayed on its simulator with rendering, and written to
`DIR/<task>_<seed>/` (a rosbag2 folder holding one .mcap) and
`DIR/<task>_<seed>.json` (annotation; formats in docs/aloha.md,
docs/franka.md, docs/drive.md). Options left out take the robot's recorder
defaults (`data.recording.RecordOptions`,
`embodiments.drive.recording.DriveRecordOptions`).
"""
from __future__ import annotations

import argparse
import sys
import time

from plan_stack.embodiments.aloha.model import TASKS as ALOHA_TASKS

#: robot -> its tasks (the first is the default).
ROBOT_TASKS: dict[str, tuple[str, ...]] = {
    "aloha": ("transfer_cube", *sorted(t for t in ALOHA_TASKS if t != "transfer_cube")),
    "franka": ("pick_place",),
    "drive": ("drive",),
}
#: options that only the driving recorder has.
_DRIVE_ONLY = ("duration", "horizon")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", choices=sorted(ROBOT_TASKS), default="aloha", help="embodiment (default aloha)")
    parser.add_argument("--task", choices=sorted({t for ts in ROBOT_TASKS.values() for t in ts}), default=None,
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


def _options(args: argparse.Namespace):
    """The robot's recorder options from the arguments given (the rest keep the recorder's defaults)."""
    given = {"width": args.width, "height": args.height, "camera_rate_hz": args.camera_rate,
             "keyframe_period_s": args.keyframe_period, "waypoints": args.waypoints}
    if args.robot == "drive":
        from plan_stack.embodiments.drive.recording import DriveRecordOptions as Options

        given.update(duration_s=args.duration, horizon_s=args.horizon)
    else:
        from plan_stack.data.recording import RecordOptions as Options
    return Options(**{k: v for k, v in given.items() if v is not None})


def _recorder(robot: str, task: str, args: argparse.Namespace):
    """seed, options -> annotation dict, for one robot (one simulator reused across episodes where it can be)."""
    if robot == "aloha":
        from plan_stack.embodiments.aloha.recording import record_episode as record_aloha
        from plan_stack.embodiments.aloha.sim import AlohaSim

        sim = AlohaSim(task, offscreen_size=(args.width, args.height))
        return lambda seed, options: record_aloha(task, seed, args.out, options, sim=sim)
    if robot == "franka":
        from plan_stack.embodiments.franka.recording import record_episode as record_franka
        from plan_stack.embodiments.franka.sim import FrankaSim

        sim = FrankaSim(offscreen_size=(args.width, args.height))
        return lambda seed, options: record_franka(seed, args.out, options, sim=sim)
    from plan_stack.embodiments.drive.recording import record_episode as record_drive

    return lambda seed, options: record_drive(seed, args.out, options)


def run(args: argparse.Namespace) -> int:
    robot = args.robot
    task = args.task or ROBOT_TASKS[robot][0]
    if task not in ROBOT_TASKS[robot]:
        print(f"record-demos: --task {task} is not a {robot} task (choose from {list(ROBOT_TASKS[robot])})",
              file=sys.stderr)
        return 2
    if robot != "drive" and any(getattr(args, name) is not None for name in _DRIVE_ONLY):
        print(f"record-demos: --{'/--'.join(_DRIVE_ONLY)} apply to --robot drive only", file=sys.stderr)
        return 2
    if args.episodes < 1:
        print("record-demos: --episodes must be at least 1", file=sys.stderr)
        return 2
    try:
        options = _options(args)
    except ValueError as exc:
        print(f"record-demos: {exc}", file=sys.stderr)
        return 2
    record = _recorder(robot, task, args)
    solved = 0
    for i in range(args.episodes):
        seed = args.seed + i
        t0 = time.monotonic()
        try:
            ann = record(seed, options)
        except FileExistsError as exc:
            print(f"record-demos: {exc}", file=sys.stderr)
            return 1
        solved += ann["success"]
        reward = f" (reward {ann['reward']})" if robot == "aloha" else ""
        print(f"{task} seed {seed}: {'success' if ann['success'] else 'FAILED'}{reward}, "
              f"{len(ann['keyframes'])} keyframes, {time.monotonic() - t0:.1f} s -> {args.out}/{ann['bag']}")
    outcome = "without collision or road departure" if robot == "drive" else "solved"
    print(f"{solved}/{args.episodes} episodes {outcome}")
    return 0
