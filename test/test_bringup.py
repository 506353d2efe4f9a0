"""`plan-stack up`: real nodes from a robot YAML, in one process or one per node."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from rcl_interfaces.srv import GetParameters
from rclpy.node import Node

from plan_stack.ros.testing import executor_with, ros_context, spin_until

pytestmark = pytest.mark.ros

CONFIG = """
common:
  use_sim_time: false
nodes:
  left_stitcher:
    executable: stitcher
    parameters:
      joint_names: [a, b]
      backend: ruckig
    remappings:
      action_chunk: left/action_chunk
  right_stitcher:
    executable: stitcher
    parameters:
      joint_names: [c]
      dt: {dt}
"""


def _start(tmp_path, *extra, dt="0.01"):
    path = tmp_path / "robot.yaml"
    path.write_text(CONFIG.format(dt=dt))
    return subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", str(path), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _parameter(probe, ex, node, name):
    client = probe.create_client(GetParameters, f"/{node}/get_parameters")
    assert spin_until(ex, client.service_is_ready, 20.0)
    fut = client.call_async(GetParameters.Request(names=[name]))
    assert spin_until(ex, fut.done, 10.0)
    return fut.result().values[0]


@pytest.mark.parametrize("mode", [[], ["--processes"]], ids=["one_process", "processes"])
def test_up_starts_configured_nodes_with_their_parameters_and_stops_on_sigint(tmp_path, mode):
    proc = _start(tmp_path, *mode)
    try:
        with ros_context() as ctx:
            probe = Node("bringup_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                up = spin_until(ex, lambda: {"left_stitcher", "right_stitcher"} <= set(probe.get_node_names()),
                                60.0, step_s=0.05)
                assert up, proc.stdout.read() if proc.poll() is not None else "nodes did not appear"
                assert _parameter(probe, ex, "left_stitcher", "backend").string_value == "ruckig"
                assert _parameter(probe, ex, "right_stitcher", "dt").double_value == pytest.approx(0.01)
                assert list(_parameter(probe, ex, "right_stitcher", "joint_names").string_array_value) == ["c"]
                topics = dict(probe.get_topic_names_and_types())
                assert spin_until(ex, lambda: "/left/action_chunk" in dict(probe.get_topic_names_and_types()),
                                  10.0), sorted(topics)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "Traceback" not in out


@pytest.mark.parametrize("mode", [[], ["--processes"]], ids=["one_process", "processes"])
def test_up_stops_with_status_2_naming_a_bad_parameter(tmp_path, mode):
    proc = _start(tmp_path, *mode, dt="fast")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "dt:" in out and "right_stitcher" in out
    assert "Traceback" not in out
