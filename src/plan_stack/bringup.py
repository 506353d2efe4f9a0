"""`plan-stack up <robot>`: start the nodes of config/<robot>.yaml.

Without launch/ros2cli (not installable from PyPI) this is how the stack runs
here, and it is handy on real installs too: all nodes in one process, each on
its own executor (default), except the nodes the config marks `own_process:
true` (the planner: its decoding is Python-bound, and in a shared process it
waits on the other nodes' threads for the GIL: measured 4x slower, plans 2-5 s
old at the chunker), which then run in processes of their own; or one process
per node (`--processes`); exactly the nodes and parameters the launch files
use. A node's `nice` (config) lowers the priority of the process that runs it
(`apply_nice`; under launch the node applies it itself, from
`node_processes.NICE_ENV`). Ctrl-C / SIGTERM stops every node cleanly, also
while a node is still loading its model; a node that rejects its parameters
stops the whole bring-up with exit status 2 and a message naming the parameter.

Failure behaviour: with more than one process, what happens after a node
process ends is `node_processes.after_exit`, the launch files' policy too. A
node process that crashed (`kill -9`, a failed worker thread: exit status 1)
is restarted after a back-off that doubles from RESPAWN_DELAY_S up to
RESPAWN_MAX_DELAY_S (reset once it has stayed up RESPAWN_RESET_S), and each
restart is logged; the bridges hold position meanwhile (their watchdog). A
node that refuses its parameters (status 2) is not restarted: the bring-up
stops. A node stopped on request (status 0, SIGINT, SIGTERM) stays stopped.
In one process, a failed node stops the process with status 1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import time

from plan_stack.child_processes import die_with_parent
from plan_stack.config import ConfigError
from plan_stack.executables import NODE_CLASSES
from plan_stack.node_processes import AfterExit, after_exit, describe_exit, exit_now
from plan_stack.paths import find_data
from plan_stack.robot_config import NodeSpec, load_robot_config

#: How long children get to exit after SIGINT before they are killed (s).
STOP_GRACE_S = 10.0
#: First restart delay of a node process that died (s); doubles per quick death up to the maximum.
RESPAWN_DELAY_S = 1.0
RESPAWN_MAX_DELAY_S = 30.0
#: A node that stayed up this long (s) before dying restarts after the first delay again.
RESPAWN_RESET_S = 60.0
#: RViz configuration started by `--rviz` (config/ folder).
RVIZ_CONFIG = "plan_stack.rviz"


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def robot_argument_help() -> str:
    """What a robot argument accepts: the robots of `plan_stack.robots` and the configs under config/."""
    from plan_stack.robot_config import config_names
    from plan_stack.robots import robot_names

    try:
        configs = ", ".join(config_names())
    except ConfigError as exc:  # no config folder found: say so in the help instead of failing
        configs = f"none found ({exc})"
    return (f"a robot ({', '.join(robot_names())}: its stack in config/<robot>.yaml), a config by name "
            f"(config/<name>.yaml: {configs}; <robot>_real runs on the real robot, without a simulator) or a "
            f"path to a robot YAML")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("robot", nargs="?", help=robot_argument_help())
    parser.add_argument("--config", metavar="PATH", help="robot config file (instead of the robot name)")
    parser.add_argument("--use-sim-time", type=_bool, default=None, metavar="true|false",
                        help="override use_sim_time for every node (false on a real robot: no /clock)")
    parser.add_argument("--rviz", action="store_true", help="also start rviz2 with config/plan_stack.rviz")
    parser.add_argument("--processes", action="store_true", help="one process per node instead of one process")
    parser.add_argument("--no-respawn", dest="respawn", action="store_false",
                        help="with more than one process: stop everything when a node process dies instead of "
                             "restarting it")
    parser.add_argument("--only", metavar="NODE[,NODE...]",
                        help="start only these nodes of the config (comma-separated), in this process")
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


def apply_nice(specs: list[NodeSpec]) -> int:
    """Lower this process's priority by the nodes' `nice` (the least of them when they differ: a process that
    runs a control-path node is never deprioritised; said in the log). Returns the increment applied."""
    increment = min(s.nice for s in specs)
    if increment != max(s.nice for s in specs):
        _log("nice: " + ", ".join(f"{s.name} +{s.nice}" for s in specs) + f" share one process: it runs at "
             f"+{increment} (--processes gives each its own)")
    if increment > 0:
        os.nice(increment)
    return increment


def _run_in_process(specs: list[NodeSpec], threads: int | None) -> int:
    apply_nice(specs)
    try:  # the node modules import torch, transformers, mujoco...: seconds in which Ctrl-C may come
        from plan_stack.ros.lifecycle import run_nodes

        factories = [node_factory(s) for s in specs]
    except KeyboardInterrupt:
        return 0
    return run_nodes(factories, threads=threads)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] plan-stack: {message}", file=sys.stderr, flush=True)


class _Child:
    """One node process with its restart bookkeeping."""

    def __init__(self, name: str, cmd: list[str]) -> None:
        self.name, self.cmd = name, cmd
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.restarts = 0
        self.quick_deaths = 0
        self.restart_at: float | None = None
        self.stopped = False  # ended on request (status 0, SIGINT, SIGTERM): left stopped

    def start(self) -> None:
        # SIGTERM when the bring-up dies (even by SIGKILL): a node never outlives it
        self.proc = subprocess.Popen(self.cmd, env=os.environ.copy(), preexec_fn=die_with_parent(signal.SIGTERM))
        self.started = time.monotonic()
        self.restart_at = None


def respawn_delay(quick_deaths: int) -> float:
    """Back-off before restart number `quick_deaths` + 1 of a node that keeps dying."""
    return min(RESPAWN_MAX_DELAY_S, RESPAWN_DELAY_S * 2.0 ** max(0, quick_deaths - 1))


def process_groups(specs: list[NodeSpec], processes: bool) -> list[list[NodeSpec]]:
    """The nodes of each process: one per node with `processes`, else every node that does not ask for
    `own_process` together and each node that does on its own (config order kept within a group)."""
    if processes:
        return [[s] for s in specs]
    shared = [s for s in specs if not s.own_process]
    return ([shared] if shared else []) + [[s] for s in specs if s.own_process]


def _run_processes(robot: str, groups: list[list[NodeSpec]], respawn: bool = True,
                   use_sim_time: bool | None = None, threads: int | None = None) -> int:
    extra = [] if use_sim_time is None else ["--use-sim-time", str(use_sim_time).lower()]
    if threads is not None:
        extra += ["--threads", str(threads)]
    children = [_Child(",".join(s.name for s in group),
                       [sys.executable, "-m", "plan_stack.bringup", robot, "--only", ",".join(s.name for s in group),
                        *extra])
                for group in groups]
    stopping = False

    def stop(signum=None, frame=None):
        nonlocal stopping
        stopping = True

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        for child in children:
            child.start()
        while not stopping:
            now = time.monotonic()
            for child in children:
                if child.stopped:
                    continue
                if child.restart_at is not None:
                    if now >= child.restart_at:
                        child.restarts += 1
                        _log(f"restarting node {child.name} (restart {child.restarts})")
                        child.start()
                    continue
                code = child.proc.poll() if child.proc is not None else None  # started above
                if code is None:
                    continue
                action = after_exit(code)  # the launch files decide the same way (launch_support)
                if action is AfterExit.STOP_ALL or not respawn:
                    _log(f"node {child.name} {describe_exit(code)}; stopping the others")
                    status = code if code > 0 else (0 if action is AfterExit.STOPPED else 1)
                    stopping = True
                    break
                if action is AfterExit.STOPPED:
                    _log(f"node {child.name} {describe_exit(code)}: it stopped on request and is not restarted")
                    child.stopped = True
                    continue
                child.quick_deaths = 1 if now - child.started >= RESPAWN_RESET_S else child.quick_deaths + 1
                delay = respawn_delay(child.quick_deaths)
                child.restart_at = now + delay
                _log(f"node {child.name} {describe_exit(code)}; restarting it in {delay:.1f} s")
            if all(child.stopped for child in children):
                break
            time.sleep(0.1)
    finally:
        running = [(c.name, c.proc) for c in children if c.proc is not None and c.proc.poll() is None]
        for _, proc in running:
            proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log(f"node {name} did not stop in {STOP_GRACE_S} s; killing it")
                proc.kill()
                proc.wait()
        for s, handler in old.items():
            signal.signal(s, handler)
    return status


def start_rviz() -> subprocess.Popen | None:
    """rviz2 with config/plan_stack.rviz, or None (and a message saying why) where it cannot start."""
    exe = shutil.which("rviz2")
    if exe is None:
        _log("--rviz: rviz2 is not installed here (on a ROS 2 install: apt install ros-$ROS_DISTRO-rviz2); "
             "continuing without it")
        return None
    try:
        cfg = find_data("config", RVIZ_CONFIG)
    except FileNotFoundError:
        _log(f"--rviz: config/{RVIZ_CONFIG} not found; starting rviz2 with its default view")
        return subprocess.Popen([exe])
    return subprocess.Popen([exe, "-d", str(cfg)])


def run(args: argparse.Namespace) -> int:
    robot = args.config or args.robot
    if not robot:
        print("plan-stack up: give a robot name or --config PATH", file=sys.stderr)
        return 2
    try:
        cfg = load_robot_config(robot, use_sim_time=args.use_sim_time)
    except ConfigError as exc:
        print(f"plan-stack up: {exc}", file=sys.stderr)
        return 2
    specs = list(cfg.nodes)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        missing = [n for n in wanted if n not in {s.name for s in specs}]
        if missing or not wanted:
            print(f"plan-stack up: no node {(missing or [args.only])[0]!r} in {cfg.path}", file=sys.stderr)
            return 2
        specs = [s for s in specs if s.name in wanted]
    if not specs:
        print(f"plan-stack up: {cfg.path} lists no nodes", file=sys.stderr)
        return 2
    rviz = start_rviz() if getattr(args, "rviz", False) else None
    # --only: exactly these nodes in this process (how the bring-up starts its own children)
    groups = [specs] if args.only else process_groups(specs, args.processes)
    try:
        if len(groups) > 1:
            return _run_processes(str(cfg.path), groups, respawn=args.respawn, use_sim_time=args.use_sim_time,
                                  threads=args.threads)
        status = _run_in_process(specs, args.threads)
    finally:
        if rviz is not None and rviz.poll() is None:
            rviz.terminate()
            try:
                rviz.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                rviz.kill()
    # the nodes ran in this process and are closed: skip the interpreter's finalisation (seconds with torch)
    exit_now(status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan_stack.bringup", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())  # a node process (`--only`) ends in run() with exit_now
