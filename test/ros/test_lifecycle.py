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


# A node process whose node takes a minute to build (a planner importing and loading its model): it prints
# "building" and then works in Python for 60 s, or, with `convert`, in a loop that turns every exception into a
# RuntimeError as torch's C++ loaders do.
_SLOW_START = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {here!r})
    from conftest import ToyNode
    from plan_stack.ros.lifecycle import node_main

    class SlowToyNode(ToyNode):
        def __init__(self, **kwargs):
            print("building", flush=True)
            end = time.monotonic() + 60.0
            while time.monotonic() < end:
                try:
                    sum(range(10000))
                except BaseException as exc:
                    if {convert!r}:
                        raise RuntimeError(f"could not load the model: {{exc!r}}") from None
                    raise
            super().__init__(**kwargs)

    sys.exit(node_main(SlowToyNode)())
""")


@pytest.mark.timing
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("convert", [False, True], ids=["raises_through", "converted_by_the_loader"])
def test_a_stop_signal_while_a_node_is_built_ends_the_process_at_once_with_status_0(sig, convert):
    """SIGINT/SIGTERM during a node's construction (a model load of 10-60 s) abandons it: status 0 within a
    second, one line saying so, no traceback. Before, the signal waited for the construction to finish, and
    launch escalated to SIGTERM and SIGKILL meanwhile. Where the loader turns the interruption into another
    error, that is not taken for a bad parameter (status 2 would stop the whole launch)."""
    import time

    code = _SLOW_START.format(here=os.path.dirname(__file__), convert=convert)
    proc = subprocess.Popen([sys.executable, "-c", code, "--ros-args", "-p", "joint_names:=[a]"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "building"
        time.sleep(0.5)  # inside the construction, signal handlers installed
        sent = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert f"{signal.Signals(sig).name} during start-up: stopping" in out, out
    assert "Traceback" not in out and "invalid parameter" not in out, out
    assert took < 2.0, f"{took:.2f} s to exit"


@pytest.mark.ros
def test_node_main_applies_the_niceness_of_the_environment():
    """A launch file passes a node's `nice` as PLAN_STACK_NICE; node_main applies it to its own process before
    the node starts, relative to the niceness it was started with (so it composes with a `nice` in a launch
    prefix)."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    code = _PROCESS.format(here=os.path.dirname(__file__))
    proc = subprocess.Popen(["nice", "-n", "1", sys.executable, "-c", code, "--ros-args", "-p", "joint_names:=[a]"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PLAN_STACK_NICE="7"))
    try:
        with ros_context() as ctx:
            probe = Node("nice_env_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: "toy" in probe.get_node_names() or proc.poll() is not None, 30.0,
                                  step_s=0.05)
        assert proc.poll() is None
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(base + 1 + 7, 19)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


def test_a_bad_niceness_in_the_environment_is_a_configuration_error():
    code = _PROCESS.format(here=os.path.dirname(__file__))
    done = subprocess.run([sys.executable, "-c", code, "--ros-args", "-p", "joint_names:=[a]"], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PLAN_STACK_NICE="high"))
    assert done.returncode == 2, done.stderr
    assert "PLAN_STACK_NICE: expected an integer 0-19, got 'high'" in done.stderr and "Traceback" not in done.stderr
