"""The one table of executables: node name -> `module:function`.

setup.py turns it into console entry points (pip install), CMakeLists.txt into
wrapper scripts in lib/plan_stack (`ros2 run plan_stack <node>`) and bin/, and
the bring-up into node classes. Run as a script it prints the table for CMake,
so it must not import anything from plan_stack.

A node's module provides `main()` (standalone process) and the class named in
NODE_CLASSES (bring-up in one process). Its file is named after the executable:
`<package>/<executable>_node.py` (`ingest` -> `ingest/ingest_node.py`), and a
robot's `<robot>_<role>` executables live in `embodiments/<robot>/<role>_node.py`
(the folder names the robot, so every robot folder has the same file names).
"""
from __future__ import annotations

import sys

# Node executables, installed to lib/plan_stack.  Add a node here only when it
# exists and works: `plan-stack up` and the launch files start what is listed
# in config/<robot>.yaml and check it against this table.
NODES: dict[str, str] = {
    "aloha_sim": "plan_stack.embodiments.aloha.sim_node:main",
    "aloha_bridge": "plan_stack.embodiments.aloha.bridge_node:main",
    "drive_sim": "plan_stack.embodiments.drive.sim_node:main",
    "drive_bridge": "plan_stack.embodiments.drive.bridge_node:main",
    "franka_sim": "plan_stack.embodiments.franka.sim_node:main",
    "franka_bridge": "plan_stack.embodiments.franka.bridge_node:main",
    "ingest": "plan_stack.ingest.ingest_node:main",
    "stitcher": "plan_stack.trajectory.stitcher_node:main",
    "chunker": "plan_stack.actions.chunker_node:main",
    "planner": "plan_stack.planning.planner_node:main",
    "viz": "plan_stack.viz.viz_node:main",
}

# Node classes for in-process bring-up, keyed like NODES.
NODE_CLASSES: dict[str, str] = {
    "aloha_sim": "plan_stack.embodiments.aloha.sim_node:AlohaSimNode",
    "aloha_bridge": "plan_stack.embodiments.aloha.bridge_node:AlohaBridgeNode",
    "drive_sim": "plan_stack.embodiments.drive.sim_node:DriveSimNode",
    "drive_bridge": "plan_stack.embodiments.drive.bridge_node:DriveBridgeNode",
    "franka_sim": "plan_stack.embodiments.franka.sim_node:FrankaSimNode",
    "franka_bridge": "plan_stack.embodiments.franka.bridge_node:FrankaBridgeNode",
    "ingest": "plan_stack.ingest.ingest_node:IngestNode",
    "stitcher": "plan_stack.trajectory.stitcher_node:StitcherNode",
    "chunker": "plan_stack.actions.chunker_node:ChunkerNode",
    "planner": "plan_stack.planning.planner_node:PlannerNode",
    "viz": "plan_stack.viz.viz_node:VizNode",
}

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
