"""Layering: libraries import no ROS and no edge, and only packages to their left in the package order.

A module is a *ROS edge* when it is a node or talks to a running graph:
* a file named `*_node.py` or `node_common.py` (nodes and their shared base),
* anything under `plan_stack/ros/` (node conventions, message conversions, test helpers),
* a message converter `*convert.py`, a command-line shell `cli.py` / `*_cli.py`, `bringup.py`,
  a stand-alone publisher `*_publisher.py`, a demo script `demo.py` / `*_demo.py`,
* the modules in `EDGE_MODULES` (they run, record or replay a live graph).
Every other module under src/plan_stack is a *library*: it must not import rclpy, a ROS message
package (`*_msgs`, `*_interfaces`, `*_srvs`) or this package's generated `plan_stack.msg` /
`.action` / `.srv`, not even lazily inside a function (the whole syntax tree is walked), and it must
not import an edge module.

Libraries are ordered by meaning (`PACKAGE_ORDER`, left to right): a library module may import its own
package and packages to its left only. The edge may import any library.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "plan_stack"
ROS_IMPORT = re.compile(r"^(rclpy|[a-z0-9_]+_(msgs|interfaces|srvs)|plan_stack\.(msg|action|srv))(\.|$)")
EDGE_NAME = re.compile(r"^(.*_node|node_common|.*convert|cli|.*_cli|bringup|.*_publisher|demo|.*_demo)\.py$")
EDGE_MODULES = {
    "plan_stack.eval.bag_replay",  # replays a bag into a running graph
    "plan_stack.eval.episodes.episode",  # runs an episode's graph and monitors it over DDS
    "plan_stack.eval.episodes.gt_planner",  # the ground-truth-plan ablation's node, started by episode
    "plan_stack.eval.episodes.command_replay",  # a command that reads a bag's ROS trajectories
    "plan_stack.launch_support",  # the launch files' side of the bring-up
}

#: Library packages by meaning, left to right. Top-level modules not named here are base utilities.
PACKAGE_ORDER = ("base", "ingest", "trajectory", "data", "planning", "actions", "embodiments", "robot_config",
                 "engines", "viz", "eval", "recipes", "bringup")
BASE_PACKAGES = {"robots"}  # subpackages at the base level (plain data)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


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


def package_of(module: str) -> str:
    """The layer a plan_stack module belongs to: its subpackage, or `base` for a top-level utility module."""
    parts = module.split(".")
    if len(parts) < 2:
        return "base"
    top = parts[1]
    if (PKG / top).is_dir():
        return "base" if top in BASE_PACKAGES else top
    return top if top in PACKAGE_ORDER else "base"


def module_path(module: str) -> Path | None:
    """The source file of a plan_stack module (None for a name that is an attribute, not a module)."""
    rel = Path(*module.split(".")[1:])
    for candidate in (PKG / rel).with_suffix(".py"), PKG / rel / "__init__.py":
        if candidate.is_file():
            return candidate
    return None


def own_imports(path: Path) -> set[str]:
    """The plan_stack modules `path` imports (attribute names dropped; generated messages left out)."""
    out = set()
    for m in imports(path):
        if m.startswith("plan_stack.") and not ROS_IMPORT.match(m) and module_path(m) is not None:
            out.add(m)
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


def test_every_package_has_a_place_in_the_order():
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages - {"ros"} <= set(PACKAGE_ORDER) | BASE_PACKAGES


def test_the_order_catches_a_wrong_way_import():
    assert package_of("plan_stack.data.annotation") == "data"
    assert package_of("plan_stack.camera") == package_of("plan_stack.robots") == "base"
    assert PACKAGE_ORDER.index(package_of("plan_stack.planning.samples")) > PACKAGE_ORDER.index("data")
    assert module_path("plan_stack.trajectory.checks") == PKG / "trajectory" / "checks.py"
    assert module_path("plan_stack.trajectory.checks.check_trajectory") is None


@pytest.mark.parametrize("path", LIBRARIES, ids=lambda p: module_name(p))
def test_library_imports_no_ros(path):
    ros = sorted(m for m in imports(path) if ROS_IMPORT.match(m))
    assert not ros, f"{module_name(path)} is a library (see the module docstring) but imports {ros}"


#: Applications (recipes) compose other commands through the command table, `plan_stack.cli`.
COMMAND_TABLE = "plan_stack.cli"


@pytest.mark.parametrize("path", LIBRARIES, ids=lambda p: module_name(p))
def test_library_imports_no_edge(path):
    allowed = {COMMAND_TABLE} if package_of(module_name(path)) == "recipes" else set()
    edges = sorted(m for m in own_imports(path) - allowed if is_edge(module_path(m)))
    assert not edges, f"{module_name(path)} is a library but imports the edge modules {edges}"


@pytest.mark.parametrize("path", LIBRARIES, ids=lambda p: module_name(p))
def test_library_imports_only_packages_to_its_left(path):
    own = package_of(module_name(path))
    rank = PACKAGE_ORDER.index(own)
    wrong = sorted(m for m in own_imports(path)
                   if package_of(m) != own and PACKAGE_ORDER.index(package_of(m)) > rank)
    assert not wrong, (f"{module_name(path)} ({own}) imports {wrong}, to its right in the package order "
                       f"{' < '.join(PACKAGE_ORDER)}")


@pytest.mark.parametrize("package", ["actions", "planning"])
def test_learning_code_reads_data_not_robots(package):
    for path in sorted((PKG / package).rglob("*.py")):
        robots = sorted(m for m in imports(path) if m.startswith("plan_stack.embodiments"))
        assert not robots, f"{module_name(path)} imports {robots}: read recorded data through plan_stack.data"
