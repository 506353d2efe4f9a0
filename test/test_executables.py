"""The executables table: every node module is named after its executable."""
from __future__ import annotations

import importlib

import pytest

from plan_stack.executables import NODE_CLASSES, NODES


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
