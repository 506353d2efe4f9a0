"""package.xml and CMakeLists.txt say what a real ROS 2 install needs (the requirements files: test_requirements.py)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _deps(kind: str) -> set[str]:
    tree = ET.parse(ROOT / "package.xml")
    return {e.text for e in tree.getroot().iter(kind)}


def test_package_xml_declares_what_the_code_uses():
    build_and_run = _deps("depend")
    assert "action_msgs" in build_and_run  # the generated action code needs it at build time too
    assert "ament_cmake_python" in _deps("buildtool_depend")
    run = build_and_run | _deps("exec_depend")
    for pkg in ("rclpy", "rcl_interfaces", "diagnostic_msgs", "visualization_msgs", "rosgraph_msgs",
                "launch", "launch_ros"):
        assert pkg in run, pkg


def test_every_message_package_imported_by_the_code_is_declared():
    declared = _deps("depend") | _deps("exec_depend")
    imported = set()
    for path in (ROOT / "src" / "plan_stack").rglob("*.py"):
        imported |= set(re.findall(r"^from (\w+_msgs|\w+_interfaces)\.(?:msg|srv|action) import", path.read_text(),
                                   re.M))
    assert imported <= declared, sorted(imported - declared)


def test_cmake_asks_ament_where_python_goes():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "ament_get_python_install_dir(" in cmake
    assert "PYTHON_INSTALL_DIR}" not in cmake


def test_readme_install_recipe_uses_a_venv_that_sees_apt_ros():
    readme = (ROOT / "README.md").read_text()
    assert "venv --system-site-packages" in readme
    assert "download.pytorch.org/whl/cpu" in readme
    assert "requirements/ros-apt.txt -c" in readme
    assert "pip install -r src/plan_stack/requirements/runtime.txt" not in readme
