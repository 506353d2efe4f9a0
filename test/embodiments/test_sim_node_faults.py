"""Simulator nodes (node_common.SimNode) under faults, over real DDS: headless start, a dead physics
thread, malformed trajectories, run-time parameter sets."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.clock import Clock as RosClock  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from plan_stack.embodiments.aloha.sim_node import AlohaSimNode  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402

SIM_ONLY = """
common: {use_sim_time: false}
nodes:
  aloha_sim:
    executable: aloha_sim
    parameters: {camera_width: 32, camera_height: 24, camera_rate_hz: 5.0, cameras: [cam_high],
                 real_time_factor: 1.0, ground_truth_rate_hz: 0.0}
"""


def _set_remote(probe, ex, node_name, **values):
    from rcl_interfaces.srv import SetParameters

    client = probe.create_client(SetParameters, f"/{node_name}/set_parameters")
    assert spin_until(ex, client.service_is_ready, 20.0)
    future = client.call_async(SetParameters.Request(
        parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]))
    assert spin_until(ex, future.done, 20.0)
    return future.result().results


def test_sim_keeps_rclpys_clock_and_reports_a_malformed_trajectory_as_an_error():
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[Parameter("camera_rate_hz", value=0.0)])
        probe = Node("probe", context=ctx)
        errors = []
        probe.create_subscription(
            DiagnosticArray, "/diagnostics",
            lambda m: errors.extend(s for s in m.status if s.level == DiagnosticStatus.ERROR), DIAGNOSTICS_QOS)
        states = []
        probe.create_subscription(JointState, "joint_states", states.append, SENSOR_QOS)
        pub = probe.create_publisher(JointTrajectory, "left_arm_controller/joint_trajectory", RELIABLE_QOS)
        assert isinstance(sim.get_clock(), RosClock)  # was the /clock publisher (Node._clock shadowed)
        with executor_with(ctx, sim, probe, threads=2) as ex:
            assert spin_until(ex, lambda: pub.get_subscription_count() > 0 and states, 30.0)
            bad = JointTrajectory(joint_names=["left_waist"], points=[JointTrajectoryPoint(positions=[0.1, 0.2])])
            pub.publish(bad)
            assert spin_until(ex, lambda: any("rejected trajectory" in s.message for s in errors), 20.0)
            # run-time parameters: the pace is settable and validated, the task is not
            ok = _set_remote(probe, ex, "aloha_sim", real_time_factor=2.0)
            assert ok[0].successful and sim.cfg.real_time_factor == 2.0 and sim._real_time_factor == 2.0
            refused = _set_remote(probe, ex, "aloha_sim", real_time_factor=-1.0)
            assert not refused[0].successful and sim.cfg.real_time_factor == 2.0
            read_only = _set_remote(probe, ex, "aloha_sim", task="insertion")
            assert not read_only[0].successful and "read-only" in read_only[0].reason.lower()


def _headless_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL",
                                                          "PYOPENGL_PLATFORM")}
    env.update(extra)
    return env


def _up(tmp_path, env):
    path = tmp_path / "sim.yaml"
    path.write_text(SIM_ONLY)
    return subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_headless_sim_without_mujoco_gl_picks_an_offscreen_backend_and_renders(tmp_path):
    proc = _up(tmp_path, _headless_env())
    try:
        with ros_context() as ctx:
            probe = Node("camera_probe", context=ctx)
            images = []
            probe.create_subscription(Image, "cameras/cam_high/image_raw", images.append, SENSOR_QOS)
            with executor_with(ctx, probe) as ex:
                got = spin_until(ex, lambda: len(images) >= 2 or proc.poll() is not None, 90.0, step_s=0.05)
            assert got and images, proc.communicate(timeout=30)[0] if proc.poll() is not None else "no image"
            assert (images[-1].width, images[-1].height) == (32, 24)
    finally:
        proc.send_signal(2)
        proc.wait(timeout=30)


def test_a_sim_whose_physics_thread_dies_exits_non_zero_with_a_fatal_log(tmp_path):
    # GLFW without a display: the rendering thread dies on its first frame.
    proc = _up(tmp_path, _headless_env(MUJOCO_GL="glfw"))
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    assert "physics thread stopped" in out and "FATAL" in out
