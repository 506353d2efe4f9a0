"""`plan-stack up <robot>`: start the nodes of config/<robot>.yaml.

Without launch/ros2cli (not installable from PyPI) this is how the stack runs
here, and it is handy on real installs too: all nodes in one process on a
MultiThreadedExecutor (default), or one process per node (`--processes`),
exactly the nodes and parameters the launch files use. Ctrl-C / SIGTERM
stops every node cleanly; a node that rejects its parameters stops the whole
bring-up with exit status 2 and a message naming the parameter.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import time

from plan_stack.config import ConfigError
from plan_stack.executables import NODE_CLASSES
from plan_stack.robot_config import NodeSpec, load_robot_config

#: How long children get to exit after SIGINT before they are killed (s).
STOP_GRACE_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("robot", help="robot name (config/<robot>.yaml) or a path to a robot YAML")
    parser.add_argument("--processes", action="store_true", help="one process per node instead of one process")
    parser.add_argument("--only", metavar="NODE", help="start only this node of the config")
    parser.add_argument("--threads", type=int, default=None, help="executor threads (one process)")


def node_factory(spec: NodeSpec):
    """A callable that builds the node of `spec` with its parameters and remappings."""
    from rclpy.parameter import Parameter

    module_name, cls_name = NODE_CLASSES[spec.executable].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    cli_args = ["--ros-args", "-r", f"__node:={spec.name}"]
    for src, dst in spec.remappings.items():
        cli_args += ["-r", f"{src}:={dst}"]
    overrides = [Parameter(k, value=v) for k, v in spec.parameters.items()]

    def make():
        return cls(cli_args=cli_args, parameter_overrides=overrides)

    return make


def _run_in_process(specs: list[NodeSpec], threads: int | None) -> int:
    from plan_stack.ros.conventions import run_nodes

    return run_nodes([node_factory(s) for s in specs], threads=threads)


def _run_processes(robot: str, specs: list[NodeSpec]) -> int:
    children: dict[str, subprocess.Popen] = {}
    stopping = False

    def stop(signum=None, frame=None):
        nonlocal stopping
        stopping = True

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        for spec in specs:
            cmd = [sys.executable, "-m", "plan_stack.bringup", robot, "--only", spec.name]
            children[spec.name] = subprocess.Popen(cmd, env=os.environ.copy())
        while not stopping:
            for name, child in children.items():
                code = child.poll()
                if code is not None:
                    print(f"plan-stack: node {name} exited with status {code}; stopping the others", file=sys.stderr)
                    status = code or 1
                    stopping = True
                    break
            time.sleep(0.1)
    finally:
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"plan-stack: node {name} did not stop in {STOP_GRACE_S} s; killing it", file=sys.stderr)
                child.kill()
                child.wait()
        for s, handler in old.items():
            signal.signal(s, handler)
    return status


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_robot_config(args.robot)
    except ConfigError as exc:
        print(f"plan-stack up: {exc}", file=sys.stderr)
        return 2
    specs = list(cfg.nodes)
    if args.only:
        specs = [s for s in specs if s.name == args.only]
        if not specs:
            print(f"plan-stack up: no node {args.only!r} in {cfg.path}", file=sys.stderr)
            return 2
    if not specs:
        print(f"plan-stack up: {cfg.path} lists no nodes", file=sys.stderr)
        return 2
    if args.processes and len(specs) > 1:
        return _run_processes(str(cfg.path), specs)
    return _run_in_process(specs, args.threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan_stack.bringup", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
