"""The executables table: every node module is named after its executable, robots' nodes come from their profiles."""
from __future__ import annotations

import importlib
import runpy
import subprocess
import sys

import pytest

import plan_stack.executables as executables
from plan_stack.executables import NODE_CLASSES, NODES
from plan_stack.robots import PROFILES


@pytest.mark.parametrize("name", sorted(NODES))
def test_node_module_is_named_after_its_executable(name):
    module = NODES[name].split(":")[0]
    parts = module.split(".")
    if parts[1] == "embodiments":  # embodiments.<robot>.<role>_node for <robot>_<role>
        robot, role = parts[2], parts[3].removesuffix("_node")
        assert name == f"{robot}_{role}" and parts[3].endswith("_node"), module
    else:
        assert parts[-1] == f"{name}_node", module
    assert NODE_CLASSES[name].split(":")[0] == module


@pytest.mark.parametrize("name", sorted(NODES))
def test_entry_points_resolve(name):
    for target in (NODES[name], NODE_CLASSES[name]):
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr)), target


def test_every_robot_node_is_a_profiles_executable():
    robot_nodes = {n for n in NODES if NODES[n].startswith("plan_stack.embodiments.")}
    assert robot_nodes == {e.name for p in PROFILES.values() for e in p.executables()}
    assert set(NODE_CLASSES) == set(NODES)


def test_cmake_runs_the_table_as_a_script_with_only_the_standard_library():
    """CMakeLists.txt runs the file before the package is installed (`-S -I`: no site-packages, no PYTHONPATH)."""
    res = subprocess.run([sys.executable, "-S", "-I", executables.__file__, "--cmake"], capture_output=True,
                         text=True, check=True)
    assert res.stdout.strip() == ";".join(executables._cmake_lines())
    assert "aloha_sim=lib/plan_stack=plan_stack.embodiments.aloha.sim_node=main" in res.stdout.split(";")


def test_setup_py_reads_the_same_tables_through_runpy():
    table = runpy.run_path(executables.__file__)
    assert table["NODES"] == NODES and table["NODE_CLASSES"] == NODE_CLASSES
    assert table["COMMANDS"] == executables.COMMANDS
