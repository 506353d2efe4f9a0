"""A toy node built with the node conventions (the params and lifecycle tests use it, the lifecycle
tests also in a child process: `from conftest import ToyNode` with this folder on sys.path)."""
from __future__ import annotations

import dataclasses

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter

from plan_stack.config import param, validate
from plan_stack.ros.params import declare_config


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    joint_names: tuple[str, ...] = param("joint order")
    dt: float = param("period (s)", 0.02, min=1e-4, max=1.0)
    horizon: int = param("steps", 50, min=1, max=500, read_only=True)
    backend: str = param("solver", "mpc", choices=("mpc", "ruckig"))
    v_max: float | tuple[float, ...] = param("limit, scalar or per joint", 5.0, min=0.0)
    gains: tuple[float, ...] = param("optional gains", ())

    def __post_init__(self):
        validate(self)


class ToyNode(Node):
    """Declares `ToyConfig` as its parameters (node name `toy`)."""

    def __init__(self, **kwargs):
        super().__init__("toy", **kwargs)
        self.cfg = declare_config(self, ToyConfig)


@pytest.fixture(scope="session")
def make_toy():
    """`make_toy(ctx, **parameter_overrides)` -> a `ToyNode` in `ctx`."""

    def make(ctx, **overrides):
        return ToyNode(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])

    return make


@pytest.fixture(scope="session")
def toy_config():
    return ToyConfig


@pytest.fixture(scope="session")
def toy_node():
    return ToyNode
