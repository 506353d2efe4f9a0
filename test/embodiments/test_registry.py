"""embodiments.registry: every robot's parts exist under the same module names and load through one table."""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

import plan_stack.embodiments as embodiments
from plan_stack.config import ConfigError
from plan_stack.embodiments.registry import ROBOTS, robot, robot_names, robot_of_bridge
from plan_stack.executables import NODES
from plan_stack.trajectory.limits import Limits

#: the module every robot folder has (the roles the registry names)
COMMON = {"__init__.py", "sim.py", "expert.py", "recording.py", "bridge.py", "sim_node.py", "bridge_node.py"}


def test_every_robot_folder_uses_the_same_module_names():
    root = Path(embodiments.__file__).parent
    folders = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(ROBOTS)
    for name in ROBOTS:
        assert COMMON <= {p.name for p in (root / name).glob("*.py")}, name


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_every_part_the_registry_names_exists(name):
    r = robot(name)
    for ref in (r.sim, r.expert, r.record_options, r.bridge_config, "recording:recorder", "recording:record_episode"):
        assert callable(r.load(ref)), ref
    assert dataclasses.is_dataclass(r.load(r.record_options))
    assert r.bridge_executable in NODES and r.sim_executable in NODES
    assert NODES[r.bridge_executable].startswith(f"{r.package}.bridge_node:")
    assert NODES[r.sim_executable].startswith(f"{r.package}.sim_node:")
    assert robot_of_bridge(r.bridge_executable) is r
    if r.bridge_limits is not None:
        lim = r.joint_limits({"use_sim_time": True})  # keys the bridge config does not declare are ignored
        assert isinstance(lim, Limits) and lim.joint_names


def test_aloha_tasks_are_the_models_tasks():
    from plan_stack.embodiments.aloha.model import TASKS

    assert set(robot("aloha").tasks) == set(TASKS) and robot("aloha").tasks[0] == "transfer_cube"


def test_unknown_robots_are_named():
    with pytest.raises(ConfigError, match=r"unknown robot 'ur5' \(known: \['aloha', 'drive', 'franka'\]\)"):
        robot("ur5")
    assert robot_names() == ["aloha", "drive", "franka"] and robot_of_bridge("stitcher") is None
    with pytest.raises(ConfigError, match="not joint space"):
        robot("drive").joint_limits({})


def test_registry_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, plan_stack.embodiments.registry; "
            "print(any(m.split('.')[0] in ('mujoco', 'torch', 'rclpy') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    importlib.import_module("plan_stack.embodiments.record_demos")


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_every_expert_has_the_same_entry_point(name):
    import inspect

    r = robot(name)
    fn = r.load(r.expert)
    assert list(inspect.signature(fn).parameters) == ["task", "seed", "sim"]
    with pytest.raises(ValueError, match=rf"^task: 'juggle' is not a {name} task"):
        r.demonstrate("juggle", 0)  # refused before any simulator is built


def test_a_demonstration_through_the_registry():
    demo = robot("franka").demonstrate("pick_place", 3)
    assert demo.robot == "franka" and demo.seed == 3 and demo.success and demo.episode.trajectory.joint_names


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_every_robot_has_its_episode_and_data_entries(name):
    """The closed loop and the planner's datasets find each robot through its entries, not a robot name."""
    from plan_stack.data.episodes import ROBOTS as SPECS
    from plan_stack.data.episodes import spec_of_format
    from plan_stack.eval.episodes.criterion import CRITERIA, criterion_of

    r = robot(name)
    assert r.success_criterion in CRITERIA and criterion_of(name).kind == r.success_criterion
    assert r.episode_time_limit_s > 0
    spec = SPECS[name]
    assert spec.robot == name and spec_of_format(spec.format) is spec
    assert r.latency_camera == spec.cameras[0]  # the latency clock starts at the annotated camera
