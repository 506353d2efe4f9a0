"""Launch files are valid Python, start config/<robot>.yaml, and every
executable they would start is installed in lib/plan_stack."""
from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest

from plan_stack.robot_config import load_robot_config

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))
LIB_DIR = ROOT / "install" / "plan_stack" / "lib" / "plan_stack"


def _robot_of(path: Path) -> str:
    tree = ast.parse(path.read_text(), filename=str(path))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "generate_launch_description_for"]
    assert len(calls) == 1, f"{path.name}: expected one generate_launch_description_for(robot) call"
    return ast.literal_eval(calls[0].args[0])


def test_every_robot_config_has_a_launch_file():
    robots = {p.stem for p in (ROOT / "config").glob("*.yaml")}
    assert robots == {_robot_of(p) for p in LAUNCH_FILES}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_compiles_and_its_executables_are_installed(path):
    compile(path.read_text(), str(path), "exec")
    cfg = load_robot_config(_robot_of(path))
    for spec in cfg.nodes:
        exe = LIB_DIR / spec.executable
        assert exe.is_file() and os.access(exe, os.X_OK), f"{path.name}: {exe} missing (run make setup)"


def test_launch_description_builds_on_a_real_ros_install():
    """The nodes come from an OpaqueFunction once the arguments are known: run the description's entities in a
    launch context as launch does and count the Node actions they give."""
    pytest.importorskip("launch_ros", reason="launch_ros is not installable from PyPI; runs on apt ROS 2 installs")
    from launch import LaunchContext
    from launch_ros.actions import Node

    for path in LAUNCH_FILES:
        spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        desc = module.generate_launch_description()
        context = LaunchContext()
        entities = [made for entity in desc.entities for made in (entity.execute(context) or [])]
        nodes = [e for e in entities if isinstance(e, Node)]
        assert len(nodes) == len(load_robot_config(_robot_of(path)).nodes), path.name


def test_launch_files_declare_config_use_sim_time_and_rviz_arguments():
    from plan_stack.launch_support import LAUNCH_ARGUMENTS

    assert {"config", "use_sim_time", "rviz"} <= set(LAUNCH_ARGUMENTS)
    source = (ROOT / "src" / "plan_stack" / "launch_support.py").read_text()
    for needed in ("DeclareLaunchArgument", "OpaqueFunction", "LaunchConfiguration", "perform(context)"):
        assert needed in source


def test_launch_plan_follows_the_arguments():
    from plan_stack.config import ConfigError
    from plan_stack.launch_support import launch_plan

    sim = launch_plan("aloha")
    assert [n["name"] for n in sim] == [s.name for s in load_robot_config("aloha").nodes]
    assert all(n["parameters"][0]["use_sim_time"] is True and n["respawn"] is True for n in sim)
    real = launch_plan("aloha_real", use_sim_time="false", respawn="false")
    assert "aloha_sim" not in [n["name"] for n in real]
    assert all(n["parameters"][0]["use_sim_time"] is False and n["respawn"] is False for n in real)
    forced = launch_plan("aloha", use_sim_time="false")
    assert all(n["parameters"][0]["use_sim_time"] is False for n in forced)
    with pytest.raises(ConfigError, match="use_sim_time"):
        launch_plan("aloha", use_sim_time="maybe")


def test_launch_nodes_carry_their_name_and_nice_but_no_prefix():
    """A niced node was started through `prefix="nice -n N"`: launch labelled its output `nice-N` and, with a
    prefix of its own, ignored the user's `--launch-prefix`. Now `exec_name` labels the output with the node's
    name and the niceness travels in the environment (the node applies it itself), so launch's own prefix
    handling applies to every node."""
    from plan_stack.launch_support import launch_plan
    from plan_stack.node_processes import NICE_ENV

    specs = {s.name: s for s in load_robot_config("aloha").nodes}
    plan = {n["name"]: n for n in launch_plan("aloha")}
    assert {name for name, s in specs.items() if s.nice} == {"aloha_sim", "planner", "viz"}
    for name, kwargs in plan.items():
        assert "prefix" not in kwargs and kwargs["exec_name"] == name
        nice = specs[name].nice
        assert kwargs.get("additional_env") == ({NICE_ENV: str(nice)} if nice else None), name


@pytest.mark.parametrize("returncode, respawn, action, says", [
    (2, True, "stop_all", "node planner exited with status 2: it refused its parameters (see its log above); "
                          "stopping the launch"),
    (2, False, "stop_all", "stopping the launch"),
    (1, True, "respawn", "node planner exited with status 1; restarting it in 2 s"),
    (-9, True, "respawn", "node planner killed by SIGKILL; restarting it in 2 s"),
    (-9, False, "respawn", "node planner killed by SIGKILL; not restarted (respawn:=false)"),
    (0, True, "stopped", "node planner exited with status 0: it stopped on request and is not restarted"),
    (-15, True, "stopped", "node planner killed by SIGTERM: it stopped on request"),
])
def test_a_configuration_error_stops_the_launch_and_only_crashes_respawn(returncode, respawn, action, says):
    from plan_stack.launch_support import exit_response

    got, message = exit_response("planner", returncode, respawn, 2.0)
    assert got.value == action and says in message


def test_launch_files_and_plan_stack_up_share_one_exit_policy():
    import plan_stack.bringup
    import plan_stack.launch_support
    from plan_stack.node_processes import after_exit

    assert plan_stack.bringup.after_exit is plan_stack.launch_support.after_exit is after_exit
    source = (ROOT / "src" / "plan_stack" / "launch_support.py").read_text()
    for needed in ("on_exit=_exit_handler(", "EmitEvent(event=Shutdown(", "ShutdownProcess(process_matcher="):
        assert needed in source


def test_respawn_delay_must_be_above_zero():
    """With no delay launch starts the respawn at once, before an exit handler could stop it."""
    from plan_stack.config import ConfigError
    from plan_stack.launch_support import launch_plan

    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(ConfigError, match="respawn_delay: expected seconds above 0"):
            launch_plan("aloha", respawn_delay=bad)
    assert {n["respawn_delay"] for n in launch_plan("aloha", respawn_delay="0.5")} == {0.5}


def _run_launch(path, *, launch_prefix=None, until=None, timeout_s=90.0):
    """Run launch_support's description of `path` in a real LaunchService (apt ROS 2 installs) until it ends by
    itself, `until(starts)` (polled from a thread) is true, or `timeout_s` passes. Returns the process starts as
    (label, pid) and whether the launch ended by itself."""
    import threading
    import time

    from launch import LaunchDescription, LaunchService
    from launch.actions import RegisterEventHandler
    from launch.event_handlers import OnProcessStart

    from plan_stack.launch_support import generate_launch_description_for

    starts = []
    service = LaunchService(argv=[], noninteractive=True)
    if launch_prefix is not None:
        service.context.launch_configurations["launch-prefix"] = launch_prefix
    service.include_launch_description(LaunchDescription([
        RegisterEventHandler(OnProcessStart(on_start=lambda event, _ctx: starts.append(
            (event.action.process_details["name"], event.pid)))),
        generate_launch_description_for(str(path)),
    ]))
    finished, stopped_by_us = threading.Event(), threading.Event()

    def watch():
        deadline = time.monotonic() + timeout_s
        while not finished.wait(0.2):
            if time.monotonic() > deadline or (until is not None and until(starts)):
                stopped_by_us.set()
                service.shutdown()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    service.run()
    finished.set()
    watcher.join(timeout=5.0)
    return starts, not stopped_by_us.is_set()


CONFIG_ERROR_ROBOT = """
common:
  use_sim_time: false
nodes:
  refuses:
    executable: stitcher
    parameters: {joint_names: [j1], dt: fast}
  fine:
    executable: stitcher
    parameters: {joint_names: [j2]}
"""


def test_a_node_that_refuses_its_parameters_stops_a_real_launch_instead_of_respawning(tmp_path):
    """Under launch's default respawn:=true a node exiting with status 2 was restarted every 2 s forever."""
    pytest.importorskip("launch_ros", reason="launch_ros is not installable from PyPI; runs on apt ROS 2 installs")
    path = tmp_path / "robot.yaml"
    path.write_text(CONFIG_ERROR_ROBOT)
    starts, ended_by_itself = _run_launch(path, timeout_s=60.0)
    assert ended_by_itself, f"the launch kept running: {starts}"
    assert sorted(label.rsplit("-", 1)[0] for label, _ in starts) == ["fine", "refuses"], starts


def test_a_niced_node_keeps_its_name_and_the_users_launch_prefix_in_a_real_launch(tmp_path):
    pytest.importorskip("launch_ros", reason="launch_ros is not installable from PyPI; runs on apt ROS 2 installs")
    import os

    path = tmp_path / "robot.yaml"
    path.write_text("common: {use_sim_time: false}\nnodes:\n  niced:\n    executable: stitcher\n    nice: 5\n"
                    "    parameters: {joint_names: [j1]}\n")
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen = {}

    def niceness_reached(starts):
        for label, pid in starts:
            try:
                seen[label] = os.getpriority(os.PRIO_PROCESS, pid)
            except ProcessLookupError:
                pass
        return min(base + 1 + 5, 19) in seen.values()

    starts, _ = _run_launch(path, launch_prefix="nice -n 1", until=niceness_reached, timeout_s=60.0)
    assert [label.rsplit("-", 1)[0] for label, _ in starts] == ["niced"], starts
    assert list(seen.values()) == [min(base + 1 + 5, 19)], seen
