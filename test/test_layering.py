"""Layering: libraries import no ROS; the learning code reads data from `plan_stack.data`, not from robots.

A module is a *ROS edge* when it is a node or talks to a running graph:
* a file named `*_node.py` or `node_common.py` (nodes and their shared base),
* anything under `plan_stack/ros/` (node conventions, message conversions, test helpers),
* a message converter `*convert.py`, a command-line shell `cli.py` / `*_cli.py`, `bringup.py`,
  a stand-alone publisher `*_publisher.py`, a demo script `demo.py`,
* `eval/record.py` and `eval/replay.py` (they record from and replay into a live graph).
Every other module under src/plan_stack is a *library*: it must not import rclpy, a ROS message
package (`*_msgs`, `*_interfaces`, `*_srvs`) or this package's generated `plan_stack.msg` /
`.action` / `.srv`, not even lazily inside a function (the whole syntax tree is walked).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "plan_stack"
ROS_IMPORT = re.compile(r"^(rclpy|[a-z0-9_]+_(msgs|interfaces|srvs)|plan_stack\.(msg|action|srv))(\.|$)")
EDGE_NAME = re.compile(r"^(.*_node|node_common|.*convert|cli|.*_cli|bringup|.*_publisher|demo)\.py$")
EDGE_MODULES = {"plan_stack.eval.record", "plan_stack.eval.replay",  # a running graph: record it, replay into it
                "plan_stack.closed_loop.episode",  # runs an episode's graph and monitors it over DDS
                "plan_stack.closed_loop.gt_planner"}  # the ground-truth-plan ablation's node, started by episode


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts)


def is_edge(path: Path) -> bool:
    rel = path.relative_to(PKG)
    return rel.parts[0] == "ros" or bool(EDGE_NAME.match(path.name)) or module_name(path) in EDGE_MODULES


def imports(path: Path) -> set[str]:
    """Every absolute module an import statement in `path` names (top level or nested)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


LIBRARIES = sorted(p for p in PKG.rglob("*.py") if not is_edge(p))


def test_the_rule_sees_both_kinds():
    edges = [p for p in PKG.rglob("*.py") if is_edge(p)]
    assert len(LIBRARIES) > 50 and len(edges) > 10
    assert PKG / "ingest" / "ingest_node.py" in edges and PKG / "ingest" / "sync.py" in LIBRARIES


def test_the_checker_catches_a_lazy_ros_import(tmp_path):
    bad = tmp_path / "lib.py"
    bad.write_text("def f():\n    from sensor_msgs.msg import Image\n    import rclpy.node\n")
    assert {m for m in imports(bad) if ROS_IMPORT.match(m)} >= {"sensor_msgs.msg", "rclpy.node"}


@pytest.mark.parametrize("path", LIBRARIES, ids=lambda p: module_name(p))
def test_library_imports_no_ros(path):
    ros = sorted(m for m in imports(path) if ROS_IMPORT.match(m))
    assert not ros, f"{module_name(path)} is a library (see the module docstring) but imports {ros}"


@pytest.mark.parametrize("package", ["actions", "planning"])
def test_learning_code_reads_data_not_robots(package):
    for path in sorted((PKG / package).rglob("*.py")):
        robots = sorted(m for m in imports(path) if m.startswith("plan_stack.embodiments"))
        assert not robots, f"{module_name(path)} imports {robots}: read recorded data through plan_stack.data"


def test_data_uses_only_the_camera_geometry_of_embodiments():
    for path in sorted((PKG / "data").rglob("*.py")):
        robots = {m for m in imports(path) if m.startswith("plan_stack.embodiments")}
        assert robots <= {"plan_stack.embodiments.camera", "plan_stack.embodiments.camera.CameraModel",
                          "plan_stack.embodiments.camera.project_points",
                          "plan_stack.embodiments.camera.world_to_camera"}, (module_name(path), robots)
