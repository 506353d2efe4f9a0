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
        limits_from:        # optional (the stitcher): limit parameters derived from a bridge node's
          bridge: <node>    # limits (URDF + its parameters) by `trajectory.limits.LimitRule`;
          velocity_scale: 0.9   # the other keys are the rule's fields (defaults otherwise)

A config may extend another and say only what differs (the real robots' configs extend the simulated
ones, so the two cannot drift apart):

    extends: aloha          # a robot name, or a path relative to this file
    drop_nodes: [aloha_sim] # base nodes this stack does not run
    common: {use_sim_time: false}   # merged over the base's common
    nodes:                  # a base node: its parameters and remappings merged key by key, other keys
      ingest:               # replaced; a new node: appended
        parameters: {joint_qos: reliable}
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from plan_stack.config import ConfigError, field_kinds
from plan_stack.embodiments.registry import joint_limits, load
from plan_stack.executables import NODES
from plan_stack.paths import find_data
from plan_stack.robots import RobotProfile, profile_of_bridge

__all__ = ["NodeSpec", "RobotConfig", "config_dir", "load_robot_config", "resolve_config_path", "ros_parameter_files"]


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    name: str
    executable: str
    parameters: dict[str, Any]
    remappings: dict[str, str]
    #: `plan-stack up` (one process) runs this node in a process of its own: a long Python-bound
    #: computation (the planner's decoding) would otherwise wait on the other nodes for the GIL
    own_process: bool = False
    #: niceness added to the process that runs this node (0-19): best-effort nodes (the planner, the viewer, a
    #: simulator standing in for a robot's own computer) yield the CPU to the control path on a loaded machine
    nice: int = 0


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


def _numbers(value: Any) -> Any:
    """A list mixing integers and floats (`[1, 2.5]`) becomes all floats: ROS arrays have one type."""
    if isinstance(value, list) and any(isinstance(v, float) for v in value) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return value


def config_names() -> list[str]:
    """The names of the robot configs under config/ (`aloha`, `aloha_real`, ...), as `plan-stack up` takes them."""
    return sorted(p.stem for p in config_dir().glob("*.yaml"))


def resolve_config_path(robot_or_path: str | os.PathLike) -> Path:
    """config/<robot>.yaml for a robot name, or the path itself for a path."""
    text = str(robot_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) or os.sep in text else config_dir() / f"{text}.yaml"
    if not path.is_file():
        raise ConfigError(f"robot: no config {path} (known robots: {config_names()})")
    return path


def _read_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error becomes one line `file:line:column: problem`."""
    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error: {problem}") from None


_NODE_KEYS = {"executable", "parameters", "remappings", "limits_from", "own_process", "nice"}


def _checked_nodes(nodes: dict, path: Path) -> dict:
    """One file's own node entries, checked before any merge so that an error names the file it is in."""
    for name, body in nodes.items():
        body = _mapping(body, f"{path}: nodes.{name}")
        extra = sorted(set(body) - _NODE_KEYS)
        if extra:
            raise ConfigError(f"nodes.{name}.{extra[0]}: unknown key in {path}")
        exe = body.get("executable")
        if exe is not None and exe not in NODES:
            raise ConfigError(f"nodes.{name}.executable: unknown executable {exe!r} in {path} "
                              f"(known: {sorted(NODES)})")
        own = body.get("own_process", False)
        if not isinstance(own, bool):
            raise ConfigError(f"nodes.{name}.own_process: expected true or false, got {own!r} in {path}")
        nice = body.get("nice", 0)
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            raise ConfigError(f"nodes.{name}.nice: expected an integer 0-19, got {nice!r} in {path}")
        for key in ("parameters", "remappings", "limits_from"):
            _mapping(body.get(key), f"nodes.{name}.{key} in {path}")
    return nodes


def _document(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """The file's `common` and `nodes`, with what it extends merged underneath (module docstring)."""
    if path in chain:
        raise ConfigError(f"{path}: extends itself ({' -> '.join(str(p) for p in chain + (path,))})")
    data = _mapping(_read_yaml(path) or {}, str(path))
    unknown = sorted(set(data) - {"common", "nodes", "extends", "drop_nodes"})
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown top-level key in {path} (expected common, nodes, extends, "
                          "drop_nodes)")
    common = _mapping(data.get("common"), f"{path}: common")
    nodes = _checked_nodes(_mapping(data.get("nodes"), f"{path}: nodes"), path)
    base_name = data.get("extends")
    drop = data.get("drop_nodes", [])
    if base_name is None:
        if drop:
            raise ConfigError(f"drop_nodes: only a config that extends another drops nodes ({path})")
        return {"common": common, "nodes": nodes}
    if not isinstance(base_name, str) or not base_name:
        raise ConfigError(f"extends: expected a robot name or a path, got {base_name!r} in {path}")
    relative = path.parent / base_name
    base_path = relative if base_name.endswith((".yaml", ".yml")) and relative.is_file() \
        else resolve_config_path(base_name)
    base = _document(base_path, chain + (path,))
    if not isinstance(drop, list) or not all(isinstance(n, str) for n in drop):
        raise ConfigError(f"drop_nodes: expected a list of node names, got {drop!r} in {path}")
    missing = sorted(set(drop) - set(base["nodes"]))
    if missing:
        raise ConfigError(f"drop_nodes: {missing[0]!r} is not a node of {base_path}")
    merged = {name: body for name, body in base["nodes"].items() if name not in drop}
    for name, body in nodes.items():
        body = _mapping(body, f"{path}: nodes.{name}")
        if name in drop:
            raise ConfigError(f"nodes.{name}: dropped by drop_nodes and configured in {path}")
        old = _mapping(merged.get(name), f"nodes.{name}")
        new = {**old, **body}
        for key in ("parameters", "remappings"):  # merged key by key
            if key in old or key in body:
                new[key] = {**_mapping(old.get(key), f"nodes.{name}.{key}"),
                            **_mapping(body.get(key), f"nodes.{name}.{key} in {path}")}
        merged[name] = new
    return {"common": {**base["common"], **common}, "nodes": merged}


def load_robot_config(robot_or_path: str | os.PathLike, use_sim_time: bool | None = None) -> RobotConfig:
    """Load and check a robot config by name (`aloha`) or by path.

    Every node must name a known executable; parameters are passed through
    (each node validates its own and refuses names it does not declare), with
    `common` merged underneath, and what the file extends under that.
    `use_sim_time` overrides the file's value for every node.
    """
    path = resolve_config_path(robot_or_path)
    data = _document(path)
    common = data["common"]
    specs = []
    derived = []
    for name, body in data["nodes"].items():  # each file's own entries were checked by _document
        params = {**common, **_mapping(body.get("parameters"), f"nodes.{name}.parameters")}
        if use_sim_time is not None:
            params["use_sim_time"] = bool(use_sim_time)
        params = {str(k): _numbers(v) for k, v in params.items()}
        remaps = {str(k): str(v) for k, v in _mapping(body.get("remappings"), f"nodes.{name}.remappings").items()}
        exe = body.get("executable", name)
        if exe not in NODES:  # no file names an executable: the node's name is taken for one
            raise ConfigError(f"nodes.{name}: no executable given and {name!r} is not one (known: {sorted(NODES)}; "
                              f"{path})")
        own, nice = body.get("own_process", False), body.get("nice", 0)
        specs.append(NodeSpec(name=str(name), executable=exe, parameters=params, remappings=remaps,
                              own_process=own, nice=nice))
        if body.get("limits_from") is not None:
            derived.append((specs[-1], _mapping(body["limits_from"], f"nodes.{name}.limits_from")))
    for spec, rule in derived:
        _derive_limits(spec, rule, {s.name: s for s in specs})
    return RobotConfig(path=path, nodes=tuple(specs))


def _derive_limits(spec: NodeSpec, rule: dict, nodes: dict[str, NodeSpec]) -> None:
    """Fill a stitcher's limit parameters from its bridge's limits (docs/trajectory.md, "Limits from the bridge")."""
    from plan_stack.trajectory.limits import LimitRule

    where = f"nodes.{spec.name}.limits_from"
    rule = dict(rule)
    bridge_name = rule.pop("bridge", None)
    bridge = nodes.get(str(bridge_name))
    if bridge is None:
        raise ConfigError(f"{where}.bridge: no node {bridge_name!r} in this config (known: {sorted(nodes)})")
    robot = profile_of_bridge(bridge.executable)
    if robot is None or robot.parts.bridge_limits is None:
        raise ConfigError(f"{where}.bridge: {bridge_name} ({bridge.executable}) is not a joint-space bridge")
    known = {f.name for f in dataclasses.fields(LimitRule)}
    unknown = sorted(set(rule) - known)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: bridge, {', '.join(sorted(known))})")
    try:
        bridge_limits = joint_limits(robot, bridge.parameters)
    except ValueError as exc:  # the bridge's own entry is wrong: name it, not the stitcher that reads it
        raise ConfigError(f"{_bridge_parameter_error(bridge, robot, str(exc))} (read by {where})") from None
    try:
        derived = LimitRule(**rule).stitcher_limits(bridge_limits, spec.parameters.get("joint_names", ()),
                                                    spec.parameters.get("discrete_joints", ()))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    twice = sorted(set(derived) & set(spec.parameters))
    if twice:
        raise ConfigError(f"nodes.{spec.name}.parameters.{twice[0]}: derived from {bridge_name} by limits_from; "
                          "remove it from parameters")
    spec.parameters.update({k: list(v) for k, v in derived.items()})


def _bridge_parameter_error(bridge: NodeSpec, robot: RobotProfile, message: str) -> str:
    """`nodes.<bridge>.parameters.<param>: problem` from a message of the bridge's config or limits
    (`<param>: problem`); `nodes.<bridge>.parameters: message` when it names no parameter of the bridge."""
    field, sep, _ = message.partition(":")
    if sep and field in field_kinds(load(robot, robot.parts.bridge_config)):
        return f"nodes.{bridge.name}.parameters.{message}"
    return f"nodes.{bridge.name}.parameters: {message}"


def ros_parameter_files(cfg: RobotConfig, out_dir: str | os.PathLike) -> list[Path]:
    """Write one standard ROS 2 parameter file per node (`/<node>: ros__parameters: {...}`).

    For `ros2 run plan_stack <executable> --ros-args --params-file <file>` and
    launch files that take parameter files. Returns the paths written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in cfg.nodes:
        path = out / f"{spec.name}.yaml"
        body = {f"/{spec.name}": {"ros__parameters": dict(spec.parameters)}}
        header = (f"# {spec.name} ({spec.executable}) from {cfg.path.name}: "
                  f"ros2 run plan_stack {spec.executable} --ros-args -r __node:={spec.name} "
                  f"--params-file {path.name}\n")
        path.write_text(header + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120))
        written.append(path)
    return written
