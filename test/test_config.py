"""Config dataclasses validate themselves and name the bad field."""
from __future__ import annotations

import dataclasses

import pytest

from plan_stack.config import ConfigError, field_kinds, from_mapping, param, validate


@dataclasses.dataclass(frozen=True)
class Demo:
    joint_names: tuple[str, ...] = param("joint order")
    dt: float = param("period (s)", 0.02, min=1e-4, max=1.0)
    horizon: int = param("steps", 50, min=1)
    backend: str = param("solver", "mpc", choices=("mpc", "ruckig"))
    enabled: bool = param("on/off", True)
    v_max: float | tuple[float, ...] = param("velocity limit", 5.0, min=0.0)

    def __post_init__(self):
        validate(self)


def test_valid_config_is_canonicalised():
    cfg = Demo(joint_names=["a", "b"], dt=1, v_max=[1, 2])
    assert cfg.joint_names == ("a", "b") and cfg.dt == 1.0 and isinstance(cfg.dt, float)
    assert cfg.v_max == (1.0, 2.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"dt": "fast"}, r"^dt: expected a number, got 'fast'"),
    ({"dt": 0.0}, r"^dt: 0.0 is below the minimum 0.0001"),
    ({"dt": 2.0}, r"^dt: 2.0 is above the maximum 1.0"),
    ({"dt": float("nan")}, r"^dt: must be finite"),
    ({"horizon": 1.5}, r"^horizon: expected an integer"),
    ({"horizon": True}, r"^horizon: expected an integer"),
    ({"backend": "lqr"}, r"^backend: 'lqr' is not one of \['mpc', 'ruckig'\]"),
    ({"enabled": 1}, r"^enabled: expected true/false"),
    ({"joint_names": "a"}, r"^joint_names: expected a list"),
    ({"joint_names": ["a", 3]}, r"^joint_names\[1\]: expected a string"),
    ({"v_max": [1.0, -1.0]}, r"^v_max\[1\]: -1.0 is below the minimum 0.0"),
])
def test_bad_values_name_the_field(kwargs, match):
    base = {"joint_names": ("a",)}
    with pytest.raises(ConfigError, match=match):
        Demo(**{**base, **kwargs})


def test_from_mapping_reports_unknown_and_missing_keys():
    with pytest.raises(ConfigError, match=r"^dtt: unknown parameter for Demo"):
        from_mapping(Demo, {"joint_names": ["a"], "dtt": 0.1})
    with pytest.raises(ConfigError, match=r"^joint_names: required parameter is missing"):
        from_mapping(Demo, {})
    assert from_mapping(Demo, {"joint_names": ["a"]}).horizon == 50


# --- Enum fields (modes) ---------------------------------------------------------------

import enum as _enum  # noqa: E402


class _Mode(_enum.StrEnum):
    TRACKING = "tracking"
    SETTLE = "settle"


@dataclasses.dataclass(frozen=True)
class _WithMode:
    mode: _Mode = param("a mode", _Mode.TRACKING)
    legal: _Mode = param("a restricted mode", _Mode.TRACKING, choices=(_Mode.TRACKING,))

    def __post_init__(self) -> None:
        validate(self)


def test_enum_fields_take_the_member_or_its_string():
    assert _WithMode().mode is _Mode.TRACKING
    cfg = _WithMode(mode="settle")
    assert cfg.mode is _Mode.SETTLE and cfg.mode == "settle"  # a StrEnum still compares with its string
    assert from_mapping(_WithMode, {"mode": "settle"}).mode is _Mode.SETTLE
    with pytest.raises(ConfigError, match=r"^mode: 'stop' is not one of \['tracking', 'settle'\]"):
        _WithMode(mode="stop")
    with pytest.raises(ConfigError, match="^mode: expected a string"):
        _WithMode(mode=1)
    with pytest.raises(ConfigError, match=r"^legal: 'settle' is not one of \['tracking'\]"):
        _WithMode(legal="settle")


class _Code(_enum.IntEnum):
    OK = 0


@dataclasses.dataclass(frozen=True)
class _Bad:
    code: _Code = param("a code", _Code.OK)


def test_enum_fields_must_be_string_enums():
    with pytest.raises(TypeError, match="must be a StrEnum"):
        field_kinds(_Bad)
