"""`config/<robot>.yaml`: which nodes make up a robot's stack, with their parameters.

Read by `plan-stack up` (in-process or one process per node) and by the
launch files on real ROS 2 installs, so both start the same graph. No ROS
imports. Format:

    common:                 # parameters given to every node (e.g. use_sim_time)
      use_sim_time: true
    nodes:
      <node name>:
        executable: <name in plan_stack.executables.NODES>
        parameters: {...}   # the node's own parameters
        remappings: {from: to}
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from plan_stack.config import ConfigError
from plan_stack.executables import NODES
from plan_stack.paths import find_data

__all__ = ["NodeSpec", "RobotConfig", "config_dir", "load_robot_config"]


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    name: str
    executable: str
    parameters: dict[str, Any]
    remappings: dict[str, str]


@dataclasses.dataclass(frozen=True)
class RobotConfig:
    path: Path
    nodes: tuple[NodeSpec, ...]


def config_dir() -> Path:
    """Directory holding the robot YAML files (see plan_stack.paths)."""
    try:
        return find_data("config")
    except FileNotFoundError as exc:
        raise ConfigError(f"config: {exc}") from None


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def load_robot_config(robot_or_path: str | os.PathLike) -> RobotConfig:
    """Load and check a robot config by name (`aloha`) or by path.

    Every node must name a known executable; parameters are passed through
    unchanged (each node validates its own), with `common` merged underneath.
    """
    text = str(robot_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) or os.sep in text else config_dir() / f"{text}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in config_dir().glob("*.yaml"))
        raise ConfigError(f"robot: no config {path} (known robots: {known})")
    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    data = _mapping(data, str(path))
    unknown = sorted(set(data) - {"common", "nodes"})
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown top-level key in {path} (expected common, nodes)")
    common = _mapping(data.get("common"), f"{path}: common")
    specs = []
    for name, body in _mapping(data.get("nodes"), f"{path}: nodes").items():
        body = _mapping(body, f"{path}: nodes.{name}")
        extra = sorted(set(body) - {"executable", "parameters", "remappings"})
        if extra:
            raise ConfigError(f"nodes.{name}.{extra[0]}: unknown key in {path}")
        params = {**common, **_mapping(body.get("parameters"), f"nodes.{name}.parameters")}
        remaps = {str(k): str(v) for k, v in _mapping(body.get("remappings"), f"nodes.{name}.remappings").items()}
        exe = body.get("executable", name)
        if exe not in NODES:
            raise ConfigError(f"nodes.{name}.executable: unknown executable {exe!r} (known: {sorted(NODES)})")
        specs.append(NodeSpec(name=str(name), executable=exe, parameters=params, remappings=remaps))
    return RobotConfig(path=path, nodes=tuple(specs))
