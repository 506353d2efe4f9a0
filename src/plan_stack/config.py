"""Self-validating component configs, shared by libraries and nodes.

Every component (sync policy, MPC, bridge, ...) has a frozen dataclass whose
fields are declared with `param(...)`: a description, bounds, allowed choices
and whether the value sizes buffers (read-only). The same metadata drives

* `validate(cfg)`, called from the dataclass's `__post_init__`, so a bad value
  fails identically from Python, from a test and from `config/*.yaml`;
* the ROS parameter descriptors built by `plan_stack.ros.params`, so a
  node declares exactly its config's fields and fails at start-up with the
  dataclass's message naming the parameter.

Supported field types: bool, int, float, str, tuple[T, ...] of those,
`float | tuple[float, ...]` (a scalar or one value per joint), and
`enum.StrEnum` classes (modes: the parameter is the member's string, the
field holds the member, any other string is refused naming the members).
No ROS imports.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Sequence
from dataclasses import MISSING
from typing import Any

__all__ = ["ConfigError", "ParamInfo", "param", "validate", "field_kinds", "from_mapping"]


class ConfigError(ValueError):
    """A configuration value is missing, has the wrong type or breaks a rule.

    The message always starts with the field (parameter) name.
    """


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    description: str
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None
    read_only: bool = False


def param(
    description: str,
    default: Any = MISSING,
    *,
    min: float | None = None,  # noqa: A002 - mirrors the descriptor field name
    max: float | None = None,  # noqa: A002
    choices: Sequence[Any] | None = None,
    read_only: bool = False,
) -> Any:
    """Declare a config field. No default means the value is required.

    Lists are given as tuples (the dataclass is frozen); bounds apply to every
    element of a sequence.
    """
    info = ParamInfo(description, min, max, tuple(choices) if choices is not None else None, read_only)
    kwargs: dict[str, Any] = {"metadata": {"plan_stack": info}}
    if default is not MISSING:
        kwargs["default"] = default
    return dataclasses.field(**kwargs)


# --- field type analysis -------------------------------------------------------

_SCALARS = (bool, int, float, str)


@dataclasses.dataclass(frozen=True)
class FieldKind:
    """What a field accepts: a scalar, a sequence of scalars, or either."""

    scalar: type | None  # accepted scalar type, None if sequences only
    item: type | None  # element type of an accepted sequence, None if scalar only
    enum: type[enum.Enum] | None = None  # an Enum field: a string parameter holding one member's value

    @property
    def dynamic(self) -> bool:
        return self.scalar is not None and self.item is not None


def _kind_of(tp: Any, where: str) -> FieldKind:
    origin = typing.get_origin(tp)
    if tp in _SCALARS:
        return FieldKind(tp, None)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not issubclass(tp, str):
            raise TypeError(f"{where}: an Enum field must be a StrEnum (its parameter is a string)")
        return FieldKind(str, None, tp)
    if origin in (tuple, list):
        args = typing.get_args(tp)
        item = args[0] if args else None
        if item not in _SCALARS:
            raise TypeError(f"{where}: unsupported sequence element type {item!r}")
        return FieldKind(None, item)
    if origin in (typing.Union, types.UnionType):
        kinds = [_kind_of(a, where) for a in typing.get_args(tp) if a is not type(None)]
        scalar = next((k.scalar for k in kinds if k.scalar), None)
        item = next((k.item for k in kinds if k.item), None)
        return FieldKind(scalar, item)
    raise TypeError(f"{where}: unsupported config field type {tp!r}")


def field_kinds(cls: type) -> dict[str, tuple[dataclasses.Field, FieldKind]]:
    """Fields of a config dataclass with their accepted kinds, in order."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: (f, _kind_of(hints[f.name], f"{cls.__name__}.{f.name}"))
        for f in dataclasses.fields(cls)
        if f.init
    }


def info_of(f: dataclasses.Field) -> ParamInfo:
    return f.metadata.get("plan_stack") or ParamInfo(description=f.name)


# --- validation -----------------------------------------------------------------


def _check_scalar(name: str, value: Any, tp: type, info: ParamInfo) -> Any:
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{name}: must be finite, got {value!r}")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
    elif tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true/false, got {value!r}")
    elif tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
    if info.min is not None and value < info.min:
        raise ConfigError(f"{name}: {value!r} is below the minimum {info.min!r}")
    if info.max is not None and value > info.max:
        raise ConfigError(f"{name}: {value!r} is above the maximum {info.max!r}")
    if info.choices is not None and value not in info.choices:
        raise ConfigError(f"{name}: {value!r} is not one of {list(info.choices)!r}")
    return value


def _check_enum(name: str, value: Any, cls: type[enum.Enum], info: ParamInfo) -> enum.Enum:
    """A member of `cls`, given as the member or as its string value."""
    if isinstance(value, cls):
        member = value
    elif isinstance(value, str):
        try:
            member = cls(value)
        except ValueError:
            raise ConfigError(f"{name}: {value!r} is not one of {[m.value for m in cls]!r}") from None
    else:
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    if info.choices is not None and member not in info.choices:
        raise ConfigError(f"{name}: {member.value!r} is not one of {[cls(c).value for c in info.choices]!r}")
    return member


def normalise_value(name: str, value: Any, kind: FieldKind, info: ParamInfo) -> Any:
    """Type-check and canonicalise one value (ints to float, lists to tuples, strings to Enum members)."""
    if kind.enum is not None and not isinstance(value, (list, tuple)):
        return _check_enum(name, value, kind.enum, info)
    if isinstance(value, (list, tuple)):
        if kind.item is None:
            raise ConfigError(f"{name}: expected a single value, got a list {value!r}")
        return tuple(_check_scalar(f"{name}[{i}]", v, kind.item, info) for i, v in enumerate(value))
    if kind.scalar is None:
        raise ConfigError(f"{name}: expected a list, got {value!r}")
    return _check_scalar(name, value, kind.scalar, info)


def validate(cfg: Any) -> None:
    """Check every field of a frozen config dataclass; canonicalise in place.

    Call from `__post_init__`. Raises ConfigError naming the first bad field.
    """
    for name, (f, kind) in field_kinds(type(cfg)).items():
        value = getattr(cfg, name)
        clean = normalise_value(name, value, kind, info_of(f))
        if clean is not value:
            object.__setattr__(cfg, name, clean)


def removed_params(cls: type) -> dict[str, str]:
    """The parameters a config no longer has, each with what to set instead (its `REMOVED_PARAMS` class
    variable): given one, loading fails with that message rather than "unknown parameter"."""
    return dict(getattr(cls, "REMOVED_PARAMS", {}))


def removed_error(name: str, replacement: str) -> ConfigError:
    """The error for a removed parameter given a value: its name and what replaced it."""
    return ConfigError(f"{name}: removed parameter; {replacement}")


def from_mapping(cls: type, values: dict[str, Any]) -> Any:
    """Build a config from a plain mapping (e.g. a YAML block).

    Unknown keys and missing required fields raise ConfigError naming them; a removed parameter
    (`removed_params`) names what replaced it.
    """
    kinds = field_kinds(cls)
    removed = removed_params(cls)
    for name in values:
        if name in removed:
            raise removed_error(name, removed[name])
    unknown = sorted(set(values) - set(kinds))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown parameter for {cls.__name__} (known: {sorted(kinds)})")
    missing = [
        n for n, (f, _) in kinds.items()
        if n not in values and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ConfigError(f"{missing[0]}: required parameter is missing")
    return cls(**values)
