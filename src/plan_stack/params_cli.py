"""`plan-stack params <robot> --out DIR`: standard ROS 2 parameter files from a robot config.

One file per node (`/<node>: ros__parameters: {...}`), for
`ros2 run plan_stack <executable> --ros-args --params-file DIR/<node>.yaml` or
a launch file's `parameters=[...]`; the values are those `plan-stack up` gives.
"""
from __future__ import annotations

import argparse
import sys

from plan_stack.bringup import _bool, robot_argument_help
from plan_stack.config import ConfigError
from plan_stack.robot_config import load_robot_config, ros_parameter_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("robot", help=robot_argument_help())
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the <node>.yaml files")
    parser.add_argument("--use-sim-time", type=_bool, default=None, metavar="true|false",
                        help="override use_sim_time for every node")


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_robot_config(args.robot, use_sim_time=args.use_sim_time)
    except ConfigError as exc:
        print(f"plan-stack params: {exc}", file=sys.stderr)
        return 2
    for path in ros_parameter_files(cfg, args.out):
        print(path)
    return 0
