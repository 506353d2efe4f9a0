"""Node parameters from config dataclasses: descriptors, start-up validation, run-time sets."""
from __future__ import annotations

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter

from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.testing import executor_with, ros_context, spin_until


def test_parameters_are_declared_with_descriptors_and_build_the_config(make_toy, toy_config):
    with ros_context() as ctx:
        node = make_toy(ctx, joint_names=["a", "b"], dt=0.01, v_max=[1.0, 2.0])
        try:
            assert node.cfg == toy_config(joint_names=("a", "b"), dt=0.01, v_max=(1.0, 2.0))
            desc = node.describe_parameter("dt")
            assert desc.description == "period (s)"
            assert desc.floating_point_range[0].from_value == pytest.approx(1e-4)
            assert node.describe_parameter("horizon").read_only
            assert node.describe_parameter("v_max").dynamic_typing
        finally:
            node.destroy_node()


def test_empty_list_defaults_are_typed_settable_and_default_when_unset(make_toy):
    with ros_context() as ctx:
        unset = make_toy(ctx, joint_names=["a"])
        assert unset.cfg.gains == ()
        unset.destroy_node()
        node = make_toy(ctx, joint_names=["a"], gains=[0.5, 2.0])
        assert node.cfg.gains == (0.5, 2.0)
        node.destroy_node()


@pytest.mark.parametrize("overrides, match", [
    ({}, r"^joint_names: required parameter is missing"),
    ({"joint_names": ["a"], "dt": "fast"}, r"^dt: .*"),
    ({"joint_names": ["a"], "dt": 5.0}, r"^dt: .*"),
    ({"joint_names": ["a"], "horizon": 0}, r"^horizon: .*"),
    ({"joint_names": ["a"], "backend": "lqr"}, r"^backend: 'lqr' is not one of"),
    ({"joint_names": ["a"], "v_max": [1.0, -2.0]}, r"^v_max\[1\]: -2.0 is below the minimum"),
    ({"joint_names": ["a"], "gains": ["x"]}, r"^gains: .*"),
])
def test_bad_parameters_fail_at_start_naming_the_parameter(overrides, match, make_toy):
    with ros_context() as ctx:
        with pytest.raises(ParameterError, match=match) as info:
            make_toy(ctx, **overrides)
        assert "node '/toy'" in str(info.value)


def test_an_integer_is_accepted_for_a_float_parameter(make_toy):
    with ros_context() as ctx:
        node = make_toy(ctx, joint_names=["a"], dt=1, v_max=2)
        try:
            assert node.cfg.dt == 1.0 and isinstance(node.cfg.dt, float) and node.cfg.v_max == 2.0
        finally:
            node.destroy_node()


# --- run-time parameter sets (`ros2 param set`), over DDS ---------------------------------


class LiveToyNode(Node):
    """Opts in to run-time changes of `dt` and `backend` only; applies them to `self.cfg`."""

    def __init__(self, config_type, **kwargs):
        super().__init__("live_toy", **kwargs)
        self.applied = []
        self.cfg = declare_config(self, config_type, on_change=self._apply, runtime=("dt", "backend"))

    def _apply(self, cfg):
        self.cfg = cfg
        self.applied.append(cfg)


def set_remote(probe, ex, node_name, **values):
    """`ros2 param set` from another node: the SetParameters service over DDS; returns the results."""
    from rcl_interfaces.srv import SetParameters

    client = probe.create_client(SetParameters, f"/{node_name}/set_parameters")
    assert spin_until(ex, client.service_is_ready, 20.0), f"/{node_name}/set_parameters not found"
    request = SetParameters.Request(parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()])
    future = client.call_async(request)
    assert spin_until(ex, future.done, 20.0)
    return future.result().results


@pytest.mark.ros
def test_runtime_sets_are_validated_by_the_config_and_applied_or_refused_with_a_reason(toy_config):
    with ros_context() as ctx:
        node = LiveToyNode(toy_config, context=ctx, parameter_overrides=[Parameter("joint_names", value=["a"])])
        probe = Node("param_probe", context=ctx)
        with executor_with(ctx, node, probe, threads=2) as ex:
            ok = set_remote(probe, ex, "live_toy", dt=0.05)
            assert ok[0].successful and node.cfg.dt == 0.05 and node.applied[-1].dt == 0.05
            out_of_range = set_remote(probe, ex, "live_toy", backend="nonsense")
            assert not out_of_range[0].successful and "backend" in out_of_range[0].reason
            assert node.cfg.backend == "mpc" and node.get_parameter("backend").value == "mpc"
            not_runtime = set_remote(probe, ex, "live_toy", v_max=1.0)
            assert not not_runtime[0].successful and "read-only" in not_runtime[0].reason.lower()
            assert node.cfg.v_max == 5.0


@pytest.mark.ros
def test_stitcher_refuses_a_negative_velocity_limit_at_run_time():
    from plan_stack.trajectory.stitcher_node import StitcherNode

    with ros_context() as ctx:
        node = StitcherNode(context=ctx, parameter_overrides=[Parameter("joint_names", value=["a", "b"])])
        probe = Node("param_probe", context=ctx)
        with executor_with(ctx, node, probe, threads=2) as ex:
            before = node.get_parameter("v_max").value
            result = set_remote(probe, ex, "stitcher", v_max=-1.0)
            assert not result[0].successful and result[0].reason
            assert node.get_parameter("v_max").value == before


@pytest.mark.ros
def test_a_removed_stitcher_parameter_fails_at_start_naming_its_replacement():
    """`measured_start_lead_s` (a lead for trajectories started from the measured state only) was folded into
    `point_lead_s`, the one lead: a config still giving it stops the node with a message that says so, not
    "unknown parameter", and the library's loader says the same."""
    from plan_stack.config import ConfigError, from_mapping
    from plan_stack.trajectory.config import StitcherNodeConfig
    from plan_stack.trajectory.stitcher_node import StitcherNode

    with ros_context() as ctx:
        with pytest.raises(ParameterError, match=r"^measured_start_lead_s: removed parameter; point_lead_s is the "
                                                 r"one lead.*set point_lead_s \(node '/stitcher'\)$"):
            StitcherNode(context=ctx, parameter_overrides=[Parameter("joint_names", value=["a", "b"]),
                                                           Parameter("measured_start_lead_s", value=0.1)])
    with pytest.raises(ConfigError, match=r"^measured_start_lead_s: removed parameter; point_lead_s"):
        from_mapping(StitcherNodeConfig, {"measured_start_lead_s": 0.1})


def test_enum_parameters_are_strings_naming_their_members():
    """A StrEnum config field is a string parameter; its descriptor lists the members; the config holds the member."""
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from plan_stack.ros.params import declare_config
    from plan_stack.ros.testing import ros_context
    from plan_stack.trajectory.config import StitcherConfig, StitchMode

    with ros_context() as ctx:
        node = Node("enum_params", context=ctx, parameter_overrides=[Parameter("joint_names", value=["a"]),
                                                                     Parameter("mode", value="settle")])
        try:
            cfg = declare_config(node, StitcherConfig)
            assert cfg.mode is StitchMode.SETTLE
            assert node.get_parameter("mode").type_ == Parameter.Type.STRING
            desc = node.describe_parameter("mode")
            assert desc.additional_constraints == "one of ['tracking', 'settle']"
        finally:
            node.destroy_node()
