"""embodiments.registry: every robot's parts exist under the same module names and load from its profile."""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import plan_stack.embodiments as embodiments
from plan_stack.config import ConfigError
from plan_stack.embodiments import registry
from plan_stack.robots import PROFILES, profile
from plan_stack.trajectory.limits import Limits

#: the module every robot folder has (the roles the registry names)
COMMON = {"__init__.py", "sim.py", "expert.py", "recording.py", "bridge.py", "sim_node.py", "bridge_node.py"}


def test_every_robot_folder_uses_the_same_module_names():
    root = Path(embodiments.__file__).parent
    folders = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(PROFILES)
    for name in PROFILES:
        assert COMMON <= {p.name for p in (root / name).glob("*.py")}, name


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_part_a_profile_names_loads(name):
    p = profile(name)
    for ref in (p.parts.sim, p.parts.expert, p.parts.recorder_options, p.parts.bridge_config, p.parts.recorder,
                "recording:record_episode"):
        assert callable(registry.load(p, ref)), ref
    if p.parts.bridge_limits is not None:
        lim = registry.joint_limits(p, {"use_sim_time": True})  # keys the bridge config does not declare are ignored
        assert isinstance(lim, Limits) and lim.joint_names


def test_aloha_tasks_are_the_models_tasks():
    from plan_stack.embodiments.aloha.model import TASKS

    assert set(profile("aloha").episode.tasks) == set(TASKS) and profile("aloha").episode.tasks[0] == "transfer_cube"


def test_a_bridge_that_is_not_joint_space_has_no_joint_limits():
    with pytest.raises(ConfigError, match="^robot: drive has no joint limits .*not joint space"):
        registry.joint_limits(profile("drive"), {})


def test_registry_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, plan_stack.embodiments.registry; "
            "print(any(m.split('.')[0] in ('mujoco', 'torch', 'rclpy') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    importlib.import_module("plan_stack.embodiments.record_demos")


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_expert_has_the_same_entry_point(name):
    p = profile(name)
    assert list(inspect.signature(registry.expert(p)).parameters) == ["task", "seed", "sim"]
    with pytest.raises(ValueError, match=rf"^task: 'juggle' is not a {name} task"):
        registry.demonstrate(p, "juggle", 0)  # refused before any simulator is built


def test_a_demonstration_through_the_registry():
    demo = registry.demonstrate(profile("franka"), "pick_place", 3)
    assert demo.robot == "franka" and demo.seed == 3 and demo.success and demo.episode.trajectory.joint_names


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_robot_has_its_episode_and_data_entries(name):
    """The closed loop and the planner's datasets find each robot through its profile, not a robot name."""
    from plan_stack.data.episodes import spec_of_format
    from plan_stack.eval.episodes.criterion import CRITERIA, criterion_of

    p = profile(name)
    assert p.episode.success_criterion in CRITERIA and criterion_of(name).kind == p.episode.success_criterion
    assert spec_of_format(p.learning.format) is p.learning
