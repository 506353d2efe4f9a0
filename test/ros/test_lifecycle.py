"""Node lifecycle: exit statuses, signals, failing callbacks and workers, rclpy.init on every distribution."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter

from plan_stack.ros.lifecycle import fail, run_nodes
from plan_stack.ros.testing import executor_with, ros_context, spin_until

# A node process built with the conventions, as every lib/plan_stack executable is.
_PROCESS = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from conftest import ToyNode
    from plan_stack.ros.lifecycle import node_main
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


@pytest.mark.ros
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
        status = run_nodes([_FailingNode], stop=stop)
    finally:
        timer.cancel()
    assert status == 1 and not stop.is_set()
    assert "node /failing: a callback raised RuntimeError: broken callback" in capfd.readouterr().err


class _StopAfterStart(Node):
    def __init__(self, stop, fault=None, **kwargs):
        super().__init__("lifecycle_toy", **kwargs)
        self.create_timer(0.05, lambda: fail(self, fault) if fault else stop.set())


def _run_in_thread(factories, **kwargs):
    import threading

    result = {}
    runner = threading.Thread(target=lambda: result.setdefault("status", run_nodes(factories, **kwargs)))
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
def test_a_parameter_the_node_does_not_declare_is_refused_at_start(toy_node):
    import threading

    stop = threading.Event()
    make = lambda: toy_node(parameter_overrides=[Parameter("joint_names", value=["a"]),  # noqa: E731
                                                Parameter("dtt", value=0.1)])
    assert _run_in_thread([make], args=[], stop=stop) == 2


def test_no_module_uses_rclpy_init_as_a_context_manager():
    """Jazzy's rclpy.init returns None: `with rclpy.init()` fails there (use ros_session)."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    offenders = [f"{p.relative_to(root)}:{i + 1}" for folder in ("src", "bench", "scripts")
                 for p in (root / folder).rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines()) if re.search(r"with\s+rclpy\.init\(", line)]
    assert not offenders, offenders
