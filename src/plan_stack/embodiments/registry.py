"""A robot's profile -> its embodiment's code: the functions that load the parts a profile names, typed.

Which robots exist and what their parts are called is data (`plan_stack.robots`); this module turns
those `module:attribute` references into the classes and functions of `plan_stack.embodiments.<robot>`,
typed by the protocols of `embodiments.base`. No ROS imports, and nothing heavy at import time: every part
is imported on first use, so listing robots (argument parsers, config checks) does not load MuJoCo or
torch. Every robot folder (`embodiments/<robot>/`) uses the same module names:

* `sim` (the simulator class), `expert` (the scripted expert, with one
  uniform entry point `demonstrate(task, seed, sim=None) -> Demonstration`), `recording`
  (`record_episode` and, through `recorder`, one uniform entry point for
  `plan-stack record-demos`), `bridge` (the bridge's config class and, for
  joint-space robots, `load_limits`), `sim_node` / `bridge_node` (ROS shells).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from plan_stack.config import ConfigError
from plan_stack.embodiments.base import Demonstration, Expert, Recorder, RecorderFactory, Simulator
from plan_stack.robots import RobotProfile

if TYPE_CHECKING:
    from plan_stack.trajectory.limits import Limits

__all__ = ["load", "simulator_class", "expert", "demonstrate", "recorder", "record_options_class",
           "bridge_config", "joint_limits"]


def load(robot: RobotProfile, ref: str) -> Any:
    """The attribute `module:attribute` of the robot's package, imported now."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(f"{robot.package}.{module}"), attr)


def simulator_class(robot: RobotProfile) -> type[Simulator]:
    return load(robot, robot.parts.sim)


def expert(robot: RobotProfile) -> Expert:
    """`demonstrate(task, seed, sim=None) -> Demonstration` of the robot's scripted expert."""
    return load(robot, robot.parts.expert)


def demonstrate(robot: RobotProfile, task: str, seed: int, sim: Simulator | None = None) -> Demonstration:
    """One scripted demonstration of `task` (on `sim`, or a fresh simulator)."""
    return expert(robot)(task, seed, sim)


def recorder(robot: RobotProfile, task: str, out_dir: str, width: int, height: int) -> Recorder:
    """`(seed, options) -> annotation` recording one demonstration of `task` (one simulator reused)."""
    factory: RecorderFactory = load(robot, robot.parts.recorder)
    return factory(task, out_dir, width, height)


def record_options_class(robot: RobotProfile) -> type:
    """The recorder's options dataclass (what `Recorder` takes as `options`)."""
    return load(robot, robot.parts.recorder_options)


def bridge_config(robot: RobotProfile, parameters: dict[str, Any]) -> Any:
    """The bridge's config from a node's parameter mapping (keys the config does not declare are ignored)."""
    from plan_stack.config import field_kinds, from_mapping

    cls = load(robot, robot.parts.bridge_config)
    known = field_kinds(cls)
    return from_mapping(cls, {k: v for k, v in parameters.items() if k in known})


def joint_limits(robot: RobotProfile, bridge_parameters: dict[str, Any]) -> Limits:
    """The bridge's per-joint `Limits` for these bridge parameters (URDF + config)."""
    if robot.parts.bridge_limits is None:
        raise ConfigError(f"robot: {robot.name} has no joint limits (its bridge is not joint space)")
    return load(robot, robot.parts.bridge_limits)(bridge_config(robot, bridge_parameters))
