"""Node conventions: parameters from config dataclasses, diagnostics, shutdown."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.parameter import Parameter

from plan_stack.config import param, validate
from plan_stack.ros import conventions
from plan_stack.ros.conventions import Diagnostics, ParameterError, declare_config
from plan_stack.ros.testing import executor_with, ros_context, spin_until


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
    def __init__(self, **kwargs):
        super().__init__("toy", **kwargs)
        self.cfg = declare_config(self, ToyConfig)


def _make(ctx, **overrides):
    return ToyNode(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])


def test_parameters_are_declared_with_descriptors_and_build_the_config():
    with ros_context() as ctx:
        node = _make(ctx, joint_names=["a", "b"], dt=0.01, v_max=[1.0, 2.0])
        try:
            assert node.cfg == ToyConfig(joint_names=("a", "b"), dt=0.01, v_max=(1.0, 2.0))
            desc = node.describe_parameter("dt")
            assert desc.description == "period (s)"
            assert desc.floating_point_range[0].from_value == pytest.approx(1e-4)
            assert node.describe_parameter("horizon").read_only
            assert node.describe_parameter("v_max").dynamic_typing
        finally:
            node.destroy_node()


def test_empty_list_defaults_are_typed_settable_and_default_when_unset():
    with ros_context() as ctx:
        unset = _make(ctx, joint_names=["a"])
        assert unset.cfg.gains == ()
        unset.destroy_node()
        node = _make(ctx, joint_names=["a"], gains=[0.5, 2.0])
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
def test_bad_parameters_fail_at_start_naming_the_parameter(overrides, match):
    with ros_context() as ctx:
        with pytest.raises(ParameterError, match=match) as info:
            _make(ctx, **overrides)
        assert "node '/toy'" in str(info.value)


def test_diagnostics_publish_on_absolute_topic():
    with ros_context() as ctx:
        node = Node("diag_src", namespace="/robot", context=ctx)
        listener = Node("diag_listener", context=ctx)
        got = []
        listener.create_subscription(DiagnosticArray, "/diagnostics", got.append, 10)
        diag = Diagnostics(node, period_s=0.05, hardware_id="sim")
        diag.report("camera", conventions.WARN, "stale frame", age_s=1.5)
        with executor_with(ctx, node, listener) as ex:
            assert spin_until(ex, lambda: bool(got), 5.0)
        status = got[-1].status[0]
        assert status.name == "diag_src: camera" and status.message == "stale frame"
        assert status.level == conventions.WARN and status.hardware_id == "sim"
        assert [(kv.key, kv.value) for kv in status.values] == [("age_s", "1.5")]
        assert diag.level("camera") == conventions.WARN and diag.level("other") is None


def test_qos_by_name_rejects_unknown_profiles():
    assert conventions.qos_by_name("sensor") is conventions.SENSOR_QOS
    with pytest.raises(conventions.ConfigError, match="qos: unknown profile 'fastest'"):
        conventions.qos_by_name("fastest")


# A node process built with the conventions, as every lib/plan_stack executable is.
_PROCESS = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from test_conventions import ToyNode
    from plan_stack.ros.conventions import node_main
    sys.exit(node_main(ToyNode)())
""")


def _spawn(*ros_args):
    code = _PROCESS.format(here=os.path.dirname(__file__))
    return subprocess.Popen([sys.executable, "-c", code, "--ros-args", *ros_args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_process_with_bad_parameter_exits_2_with_message():
    proc = _spawn("-p", "joint_names:=[a]", "-p", "dt:=7.0")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, out
    assert "invalid parameter dt:" in out and "node '/toy'" in out
    assert "Traceback" not in out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_process_stops_cleanly_on_signal(sig):
    proc = _spawn("-p", "joint_names:=[a]")
    with ros_context() as ctx:  # wait until the node is up (signal handlers installed)
        probe = Node("probe", context=ctx)
        with executor_with(ctx, probe) as ex:
            assert spin_until(ex, lambda: "toy" in probe.get_node_names(), 30.0, step_s=0.05)
    assert proc.poll() is None
    proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:  # never leave a hung node behind
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "Traceback" not in out


class _FailingNode(Node):
    """Its timer callback raises on the first tick."""

    def __init__(self, **kwargs):
        super().__init__("failing", **kwargs)
        self.create_timer(0.05, self._tick)

    def _tick(self):
        raise RuntimeError("broken callback")


def test_a_callback_that_raises_stops_the_process_with_status_1_and_a_fatal_log(capfd):
    import threading

    stop = threading.Event()
    timer = threading.Timer(30.0, stop.set)  # a hang would stop here and fail the status check
    timer.start()
    try:
        status = conventions.run_nodes([_FailingNode], stop=stop)
    finally:
        timer.cancel()
    assert status == 1 and not stop.is_set()
    assert "node /failing: a callback raised RuntimeError: broken callback" in capfd.readouterr().err
# --- run-time parameter sets (`ros2 param set`), over DDS ---------------------------------


class LiveToyNode(Node):
    """Opts in to run-time changes of `dt` and `backend` only; applies them to `self.cfg`."""

    def __init__(self, **kwargs):
        super().__init__("live_toy", **kwargs)
        self.applied = []
        self.cfg = declare_config(self, ToyConfig, on_change=self._apply, runtime=("dt", "backend"))

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
def test_runtime_sets_are_validated_by_the_config_and_applied_or_refused_with_a_reason():
    with ros_context() as ctx:
        node = LiveToyNode(context=ctx, parameter_overrides=[Parameter("joint_names", value=["a"])])
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
    from plan_stack.trajectory.node import StitcherNode

    with ros_context() as ctx:
        node = StitcherNode(context=ctx, parameter_overrides=[Parameter("joint_names", value=["a", "b"])])
        probe = Node("param_probe", context=ctx)
        with executor_with(ctx, node, probe, threads=2) as ex:
            before = node.get_parameter("v_max").value
            result = set_remote(probe, ex, "stitcher", v_max=-1.0)
            assert not result[0].successful and result[0].reason
            assert node.get_parameter("v_max").value == before


def test_an_integer_is_accepted_for_a_float_parameter():
    with ros_context() as ctx:
        node = _make(ctx, joint_names=["a"], dt=1, v_max=2)
        try:
            assert node.cfg.dt == 1.0 and isinstance(node.cfg.dt, float) and node.cfg.v_max == 2.0
        finally:
            node.destroy_node()


class _StopAfterStart(Node):
    def __init__(self, stop, fault=None, **kwargs):
        super().__init__("lifecycle_toy", **kwargs)
        self.create_timer(0.05, lambda: conventions.fail(self, fault) if fault else stop.set())


def _run_in_thread(factories, **kwargs):
    import threading

    result = {}
    runner = threading.Thread(target=lambda: result.setdefault("status", conventions.run_nodes(factories, **kwargs)))
    runner.start()
    runner.join(timeout=60.0)
    assert not runner.is_alive(), "run_nodes did not return"
    return result["status"]


@pytest.mark.ros
def test_run_nodes_works_where_rclpy_init_is_no_context_manager(monkeypatch):
    """Jazzy's rclpy.init returns None; run_nodes must not use it as a context manager."""
    import threading

    import rclpy

    real_init = rclpy.init
    calls = []

    def jazzy_init(*args, **kwargs):
        calls.append(kwargs)
        real_init(*args, **kwargs)
        return None

    monkeypatch.setattr(rclpy, "init", jazzy_init)
    stop = threading.Event()
    assert _run_in_thread([lambda: _StopAfterStart(stop)], args=[], stop=stop) == 0
    assert calls and not rclpy.ok()


@pytest.mark.ros
def test_a_failed_worker_makes_the_process_exit_non_zero():
    import threading

    stop = threading.Event()
    assert _run_in_thread([lambda: _StopAfterStart(stop, fault="worker died")], args=[], stop=stop) == 1


@pytest.mark.ros
def test_a_parameter_the_node_does_not_declare_is_refused_at_start():
    import threading

    stop = threading.Event()
    make = lambda: ToyNode(parameter_overrides=[Parameter("joint_names", value=["a"]),  # noqa: E731
                                                Parameter("dtt", value=0.1)])
    assert _run_in_thread([make], args=[], stop=stop) == 2


def test_no_module_uses_rclpy_init_as_a_context_manager():
    """Jazzy's rclpy.init returns None: `with rclpy.init()` fails there (use conventions.ros_session)."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    offenders = [f"{p.relative_to(root)}:{i + 1}" for folder in ("src", "bench", "scripts")
                 for p in (root / folder).rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines()) if re.search(r"with\s+rclpy\.init\(", line)]
    assert not offenders, offenders


def test_enum_parameters_are_strings_naming_their_members():
    """A StrEnum config field is a string parameter; its descriptor lists the members; the config holds the member."""
    from rclpy.parameter import Parameter as _P

    from plan_stack.ros.conventions import declare_config as _declare
    from plan_stack.ros.testing import ros_context as _ctx
    from plan_stack.trajectory.config import StitchMode, StitcherConfig

    from rclpy.node import Node as _Node

    with _ctx() as ctx:
        node = _Node("enum_params", context=ctx, parameter_overrides=[_P("joint_names", value=["a"]),
                                                                       _P("mode", value="settle")])
        try:
            cfg = _declare(node, StitcherConfig)
            assert cfg.mode is StitchMode.SETTLE
            assert node.get_parameter("mode").type_ == _P.Type.STRING
            desc = node.describe_parameter("mode")
            assert desc.additional_constraints == "one of ['tracking', 'settle']"
        finally:
            node.destroy_node()
