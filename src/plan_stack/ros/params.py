"""Node parameters from config dataclasses.

A node declares the fields of its component's config dataclass (`declare_config`), with
descriptors built from the fields' `param(...)` metadata; the values come from
`config/<robot>.yaml` (bring-up, launch files or `--params-file`). A wrong type, out-of-range or
missing required value, or a value for a parameter the config has removed (`REMOVED_PARAMS`: the
message names its replacement), raises `ParameterError` naming the parameter, and `lifecycle.run_nodes`
turns that into a one-line fatal log and exit status 2 at start-up; so does a parameter given to a
node that does not declare it (a misspelled name, `check_overrides`). An integer is accepted where
a float is expected. At run time (`ros2 param set`, `set_parameters`) a node that passes
`on_change` accepts changes of its non-read-only fields, validated by the same dataclass (a bad
value is refused with the dataclass's message) and applied through `on_change(new_config)`; every
other parameter is read-only and refused.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType, SetParametersResult
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterUninitializedException,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from plan_stack.config import ConfigError, FieldKind, field_kinds, info_of, removed_error, removed_params

C = TypeVar("C")


class ParameterError(ConfigError):
    """A node parameter is missing, mistyped or out of range (names it)."""


_ARRAY_TYPES = {
    bool: ParameterType.PARAMETER_BOOL_ARRAY,
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
    str: ParameterType.PARAMETER_STRING_ARRAY,
}
_SCALAR_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}


def _ros_type(kind: FieldKind) -> Any:
    """The ROS parameter type of a field that is not dynamically typed."""
    if kind.scalar is not None:
        return _SCALAR_TYPES[kind.scalar]
    assert kind.item is not None  # config.field_kinds: a field is a scalar, a sequence or dynamic
    return _ARRAY_TYPES[kind.item]


def _descriptor(name: str, f: dataclasses.Field, kind: FieldKind, read_only: bool) -> ParameterDescriptor:
    info = info_of(f)
    desc = ParameterDescriptor(name=name, description=info.description, read_only=read_only)
    if kind.dynamic:
        desc.dynamic_typing = True
        desc.type = ParameterType.PARAMETER_NOT_SET
        return desc
    desc.type = _ros_type(kind)
    if info.choices is not None:
        desc.additional_constraints = f"one of {list(info.choices)}"
    elif kind.enum is not None:
        desc.additional_constraints = f"one of {[member.value for member in kind.enum]}"
    # rclpy enforces ranges only on scalars; sequences are checked by the config.
    if kind.scalar is float and (info.min is not None or info.max is not None):
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(info.min if info.min is not None else -sys.float_info.max),
            to_value=float(info.max if info.max is not None else sys.float_info.max),
            step=0.0,
        )]
    elif kind.scalar is int and (info.min is not None or info.max is not None):
        desc.integer_range = [IntegerRange(
            from_value=int(info.min if info.min is not None else -(2**63)),
            to_value=int(info.max if info.max is not None else 2**63 - 1),
            step=0,
        )]
    return desc


_REQUIRED = object()


def _declaration(f: dataclasses.Field, kind: FieldKind) -> tuple[Any, Any]:
    """(value to declare with, value to use when the parameter stays unset).

    Required fields and empty-list defaults are declared statically typed but
    uninitialised (rclpy cannot infer an element type from `[]`); an unset
    required field is an error, an unset empty list keeps its default.
    """
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        default = _REQUIRED
    empty_list = isinstance(default, (tuple, list)) and not default
    if default is _REQUIRED or (empty_list and not kind.dynamic):
        if kind.dynamic:
            return None, default
        ros_type = _ros_type(kind)
        return Parameter.Type(ros_type), default
    return (list(default) if isinstance(default, tuple) else default), default


def _accept_int_for_float(node: Node, pname: str, kind: FieldKind) -> None:
    """An integer override (YAML `10`) of a float parameter becomes 10.0 (rclpy would refuse the type)."""
    override = node._parameter_overrides.get(pname)
    if override is None or kind.dynamic:
        return
    if kind.scalar is float and override.type_ == Parameter.Type.INTEGER:
        node._parameter_overrides[pname] = Parameter(pname, Parameter.Type.DOUBLE, float(override.value))
    elif kind.item is float and override.type_ == Parameter.Type.INTEGER_ARRAY:
        node._parameter_overrides[pname] = Parameter(pname, Parameter.Type.DOUBLE_ARRAY,
                                                     [float(v) for v in override.value])


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):  # array.array / numpy arrays from rclpy
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


def declare_config(node: Node, cls: type[C], prefix: str = "", on_change: Callable[[C], None] | None = None,
                   runtime: Iterable[str] | None = None, **fixed: Any) -> C:
    """Declare every field of `cls` as a parameter and build the config.

    `prefix` namespaces the parameters (`prefix.field`). Fields named in
    `fixed` are not declared (the node supplies them). Raises ParameterError
    naming the parameter when a value is missing, mistyped or out of range.

    Without `on_change` every parameter is read-only at run time (a set is
    refused with a reason). With it, fields not marked `read_only` may be set
    at run time: the new config is built by `dataclasses.replace` (so the
    dataclass validates it; a refusal carries its message) and handed to
    `on_change` once rclpy has stored the values. `runtime` narrows the
    settable fields to those named (the ones `on_change` really applies).
    """
    settable = None if runtime is None else set(runtime)
    for name, replacement in removed_params(cls).items():  # a value for one: say what replaced it
        pname = f"{prefix}.{name}" if prefix else name
        if pname in node._parameter_overrides:
            raise _param_error(node, str(removed_error(pname, replacement)))
    values: dict[str, Any] = dict(fixed)
    names: dict[str, str] = {}  # parameter name -> field name
    for name, (f, kind) in field_kinds(cls).items():
        if name in fixed:
            continue
        pname = f"{prefix}.{name}" if prefix else name
        names[pname] = name
        declared, unset = _declaration(f, kind)
        _accept_int_for_float(node, pname, kind)
        read_only = on_change is None or info_of(f).read_only or (settable is not None and name not in settable)
        try:
            node.declare_parameter(pname, declared, _descriptor(pname, f, kind, read_only))
            value = node.get_parameter(pname).value
        except ParameterUninitializedException:
            value = None
        except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
            raise _param_error(node, f"{pname}: {exc}") from None
        if value is None:
            if unset is _REQUIRED:
                raise _param_error(node, f"{pname}: required parameter is missing")
            value = unset
        values[name] = _plain(value)
    try:
        cfg = cls(**values)
    except ConfigError as exc:
        raise _param_error(node, f"{prefix + '.' if prefix else ''}{exc}") from None
    if on_change is not None:
        _watch_changes(node, cfg, names, prefix, on_change)
    return cfg


def _watch_changes(node: Node, cfg: Any, names: dict[str, str], prefix: str, on_change: Callable) -> None:
    """Validate run-time sets of this config's parameters with the dataclass; apply accepted ones."""
    state = {"cfg": cfg, "pending": None}

    def candidate(params: list[Parameter]) -> Any:
        changes = {names[p.name]: _plain(p.value) for p in params if p.name in names}
        return dataclasses.replace(state["cfg"], **changes) if changes else None

    def on_set(params: list[Parameter]) -> SetParametersResult:
        try:
            state["pending"] = candidate(params)
        except ConfigError as exc:
            return SetParametersResult(successful=False, reason=f"{prefix + '.' if prefix else ''}{exc}")
        return SetParametersResult(successful=True)

    def post_set(params: list[Parameter]) -> None:
        new, state["pending"] = state["pending"], None
        if new is None:
            return
        state["cfg"] = new
        try:
            on_change(new)
        except Exception as exc:  # the values are stored; say loudly that applying them failed
            node.get_logger().error(f"applying parameter change failed: {exc!r}")
        else:
            node.get_logger().info("parameters changed: " + ", ".join(
                f"{p.name}={_plain(p.value)!r}" for p in params if p.name in names))

    node.add_on_set_parameters_callback(on_set)
    node.add_post_set_parameters_callback(post_set)


def check_overrides(node: Node) -> None:
    """Refuse parameters given to a node that it never declared (a misspelled name in the config).

    rclpy silently ignores such overrides; a robot would then run on a default
    the operator thought they had changed.
    """
    unknown = sorted(n for n in node._parameter_overrides if not node.has_parameter(n))
    if unknown:
        known = sorted(n for n in node._parameters if n != "start_type_description_service")
        raise _param_error(node, f"{unknown[0]}: unknown parameter (declared: {known})")


def _param_error(node: Node, message: str) -> ParameterError:
    return ParameterError(f"{message} (node '{node.get_fully_qualified_name()}')")
