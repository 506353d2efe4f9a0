"""robots: every robot's profile is complete and consistent, and reading profiles loads no robot code."""
from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from plan_stack.config import ConfigError
from plan_stack.embodiments import registry
from plan_stack.embodiments.base import Expert, RecorderFactory, Simulator
from plan_stack.executables import NODE_CLASSES, NODES
from plan_stack.planning.training.data_parallel import default_ranks
from plan_stack.robots import PROFILES, profile, profile_of_bridge, robot_names

NAMES = sorted(PROFILES)
EMBODIMENTS = Path(__file__).resolve().parents[2] / "src" / "plan_stack" / "embodiments"


def _call_parameters(protocol: type) -> list[str]:
    return list(inspect.signature(protocol.__call__).parameters)[1:]  # without self


def _members(protocol: type) -> dict[str, object]:
    """What a protocol declares: its public methods and properties."""
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def test_profiles_are_found_by_name_and_unknown_robots_are_named():
    assert robot_names() == ["aloha", "drive", "franka"] == NAMES
    assert all(profile(name).name == name for name in NAMES)
    with pytest.raises(ConfigError, match=r"^robot: unknown robot 'ur5' \(known: \['aloha', 'drive', 'franka'\]\)"):
        profile("ur5")


@pytest.mark.parametrize("name", NAMES)
def test_every_profile_speaks_of_one_robot(name):
    p = profile(name)
    assert p.learning.robot == name and p.package == f"plan_stack.embodiments.{name}"
    assert (EMBODIMENTS / name / "__init__.py").is_file()
    assert p.episode.tasks and p.episode.time_limit_s > 0
    assert p.episode.latency_camera == p.learning.cameras[0]  # the latency clock starts at the annotated camera
    assert profile_of_bridge(p.bridge_executable.name) is p and profile_of_bridge(p.sim_executable.name) is None
    assert [p for p in PROFILES.values() if p.learning.format == profile(name).learning.format] == [p]


@pytest.mark.parametrize("name", NAMES)
def test_every_executable_of_a_profile_is_in_the_node_table(name):
    p = profile(name)
    for role, exe in (("sim", p.sim_executable), ("bridge", p.bridge_executable)):
        assert exe.name == f"{name}_{role}" and exe.main.startswith(f"{role}_node:")
        assert NODES[exe.name] == f"{p.package}.{exe.main}"
        assert NODE_CLASSES[exe.name] == f"{p.package}.{role}_node:{exe.node_class}"


@pytest.mark.parametrize("name", NAMES)
def test_every_part_resolves_to_what_its_protocol_promises(name):
    p = profile(name)
    sim = registry.simulator_class(p)
    assert inspect.isclass(sim)
    for member, promised in _members(Simulator).items():
        assert isinstance(inspect.getattr_static(sim, member), property) == isinstance(promised, property), member
    assert not [q for q in inspect.signature(sim.reset).parameters.values()
                if q.name != "self" and q.default is inspect.Parameter.empty]  # reset() needs no argument
    assert list(inspect.signature(registry.expert(p)).parameters) == _call_parameters(Expert)
    factory = registry.load(p, p.parts.recorder)
    assert list(inspect.signature(factory).parameters) == _call_parameters(RecorderFactory)
    assert _call_parameters(RecorderFactory) == ["task", "out_dir", "width", "height"]
    assert dataclasses.is_dataclass(registry.record_options_class(p))
    assert dataclasses.is_dataclass(registry.load(p, p.parts.bridge_config))
    assert (p.parts.bridge_limits is None) == (p.episode.bridge_command_topic is None)


@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_shares_its_batches_among_the_default_ranks(name):
    recipe = profile(name).recipe
    for ranks in sorted({default_ranks(threads) for threads in range(1, 17)}):
        assert recipe.target_batch % ranks == 0 and recipe.drafter_batch % ranks == 0, ranks


@pytest.mark.parametrize("name", NAMES)
def test_split_seed_ranges_never_overlap_within_a_robot(name):
    ranges = sorted((first, first + episodes, split) for split, (first, episodes) in profile(name).splits.items())
    assert all(episodes > 0 for _, (_, episodes) in profile(name).splits.items())
    for (_, end, a), (start, _, b) in zip(ranges, ranges[1:]):
        assert end <= start, f"{name}: splits {a} and {b} share seeds"


@pytest.mark.parametrize("name", NAMES)
def test_every_split_a_profile_names_is_recorded_with_seeds(name):
    p = profile(name)
    rounds = [split for split, _ in p.onpolicy_rounds]
    assert set(p.splits) == {"train", "val", "heldout", *p.planner_extra_splits, *rounds}
    assert len(set(rounds)) == len(rounds) and not set(rounds) & set(p.planner_extra_splits)
    assert set(p.recipe.head_extra_splits) <= set(p.planner_extra_splits)
    assert p.recipe.target_locate_weight == 0 or p.recipe.locate == "largest" or p.learning.box_objects


def test_a_task_of_another_robot_is_refused():
    profile("franka").check_task("pick_place")
    with pytest.raises(ValueError, match=r"^task: 'drive' is not a franka task \(choose from \['pick_place'\]\)"):
        profile("franka").check_task("drive")


def test_reading_the_profiles_imports_only_the_standard_library():
    """CMake and setup.py read the executables table (which reads the profiles) before anything is installed."""
    code = ("import sys; before = set(sys.modules); import plan_stack.robots; "
            "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)"
            " - {'plan_stack'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
