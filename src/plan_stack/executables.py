"""The one table of executables: node name -> `module:function`.

setup.py turns it into console entry points (pip install), CMakeLists.txt into
wrapper scripts in lib/plan_stack (`ros2 run plan_stack <node>`) and bin/, and
the bring-up into node classes. The robots' own nodes (simulator, bridge) come
from their profiles (`plan_stack.robots`, plain data, standard library only), so
this file imports nothing else from plan_stack: CMake runs it as a script
(`--cmake` prints the table) and setup.py with runpy, before anything is
installed, and both find the package beside this file.

A node's module provides `main()` (standalone process) and the class named in
NODE_CLASSES (bring-up in one process). Its file is named after the executable:
`<package>/<executable>_node.py` (`ingest` -> `ingest/ingest_node.py`), and a
robot's `<robot>_<role>` executables live in `embodiments/<robot>/<role>_node.py`
(the folder names the robot, so every robot folder has the same file names).
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # a script (CMake) or runpy (setup.py): the package is not importable yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plan_stack.robots import PROFILES  # noqa: E402 - after the path above

# Node executables, installed to lib/plan_stack.  Add a node here only when it
# exists and works: `plan-stack up` and the launch files start what is listed
# in config/<robot>.yaml and check it against this table.
NODES: dict[str, str] = {
    **{e.name: f"{p.package}.{e.main}" for _, p in sorted(PROFILES.items()) for e in p.executables()},
    "ingest": "plan_stack.ingest.ingest_node:main",
    "stitcher": "plan_stack.trajectory.stitcher_node:main",
    "chunker": "plan_stack.actions.chunker_node:main",
    "planner": "plan_stack.planning.planner_node:main",
    "viz": "plan_stack.viz.viz_node:main",
}

# Node classes for in-process bring-up, keyed like NODES: the class in the module of the node's NODES entry.
_CLASS_NAMES: dict[str, str] = {
    **{e.name: e.node_class for p in PROFILES.values() for e in p.executables()},
    "ingest": "IngestNode",
    "stitcher": "StitcherNode",
    "chunker": "ChunkerNode",
    "planner": "PlannerNode",
    "viz": "VizNode",
}
NODE_CLASSES: dict[str, str] = {name: f"{target.partition(':')[0]}:{_CLASS_NAMES[name]}"
                                for name, target in NODES.items()}

# Commands installed to bin/.
COMMANDS: dict[str, str] = {
    "plan-stack": "plan_stack.cli:main",
}


def _cmake_lines() -> list[str]:
    lines = []
    for name, target in NODES.items():
        module, func = target.split(":")
        lines.append(f"{name}=lib/plan_stack={module}={func}")
    for name, target in COMMANDS.items():
        module, func = target.split(":")
        lines.append(f"{name}=bin={module}={func}")
    return lines


if __name__ == "__main__":
    if sys.argv[1:] != ["--cmake"]:
        sys.exit("usage: executables.py --cmake")
    print(";".join(_cmake_lines()))
