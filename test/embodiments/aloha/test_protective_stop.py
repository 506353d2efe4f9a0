"""aloha_bridge's protective stop over real DDS: an arm driven into the table is held, not pushed on.

The goal is inside every limit the bridge checks (the right shoulder forward at 0.5 rad/s); the simulated
table stops the gripper, the servo falls behind its reference, and the bridge's collision check (the shipped
`collision_tracking_error`) must stop the arm, refuse commands until `~/reset_protective_stop`, and accept
them again after it.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from plan_stack.action import ExecuteTrajectory  # noqa: E402
from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode  # noqa: E402
from plan_stack.embodiments.aloha.model import JOINT_NAMES, gripper_from_joint  # noqa: E402
from plan_stack.embodiments.aloha.sim_node import AlohaSimNode  # noqa: E402
from plan_stack.ros.diagnostics import ERROR, OK  # noqa: E402
from plan_stack.ros.qos import SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

R_SHOULDER = JOINT_NAMES.index("right_shoulder")
ARMS = np.array([not n.endswith("_gripper") for n in JOINT_NAMES])


class Probe(Node):
    def __init__(self, context) -> None:
        super().__init__("probe", context=context, parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.states: list[tuple[float, np.ndarray]] = []
        self.diag: list = []
        self.create_subscription(JointState, "joint_states", self._js, SENSOR_QOS)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diag.extend(m.status), 50)
        self.client = ActionClient(self, ExecuteTrajectory, "execute_trajectory")
        self.reset = self.create_client(Trigger, "aloha_bridge/reset_protective_stop")

    def _js(self, msg: JointState) -> None:
        q = np.array(msg.position)
        q[[6, 13]] = gripper_from_joint(q[[6, 13]])
        self.states.append((msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, q))

    def stop_reports(self, level) -> list:
        return [s for s in self.diag if s.name == "aloha_bridge: protective_stop" and s.level == level]


@pytest.fixture(scope="module")
def graph():
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_rate_hz", value=0.0), Parameter("real_time_factor", value=1.0),
            Parameter("ground_truth_rate_hz", value=0.0)])
        bridge = AlohaBridgeNode(context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True)])
        probe = Probe(ctx)
        with executor_with(ctx, sim, bridge, probe) as ex:
            assert spin_until(ex, lambda: len(probe.states) > 5 and bridge.ready, 15.0)
            assert probe.client.wait_for_server(timeout_sec=5.0)
            assert probe.reset.wait_for_service(timeout_sec=5.0)
            yield ex, probe, bridge


def _reset(ex, probe) -> Trigger.Response:
    fut = probe.reset.call_async(Trigger.Request())
    assert spin_until(ex, fut.done, 10.0)
    return fut.result()


def test_an_arm_pushed_into_the_table_is_stopped_and_held_until_reset(graph, arm_goals):
    ex, probe, bridge = graph
    arm = arm_goals(JOINT_NAMES, probe.client, lambda predicate, timeout_s: spin_until(ex, predicate, timeout_s))
    assert not _reset(ex, probe).success  # nothing to clear yet
    start = probe.states[-1][1].copy()
    into_table = start.copy()
    into_table[R_SHOULDER] = 0.3  # from -0.96: the gripper meets the table near 0 rad

    result = arm.result_of(arm.send(arm.rest_goal(into_table, 3.0)))
    assert result.error_code == ExecuteTrajectory.Result.PATH_TOLERANCE_VIOLATED, result.error_string
    assert "protective stop" in result.error_string and "collision" in result.error_string
    stop = bridge.bridge.protective_stop
    assert stop is not None and stop.joint.startswith("right_")
    assert spin_until(ex, lambda: bool(probe.stop_reports(ERROR)), 5.0)

    # Held where it was measured: no pushing on, no rebound.
    n0 = len(probe.states)
    assert spin_until(ex, lambda: len(probe.states) > n0 + 50, 10.0)  # 1 s of joint states at 50 Hz
    held = np.array([q for _, q in probe.states[n0:]])[:, ARMS]
    assert np.ptp(held, axis=0).max() < 0.05, np.ptp(held, axis=0)
    assert probe.states[-1][1][R_SHOULDER] < 0.15  # stopped short of the 0.3 rad commanded

    # Every command is refused while the stop holds ...
    back = arm.make_goal([2.0], start[None, :], np.zeros((1, 14)), np.zeros((1, 14)))
    refused = arm.result_of(arm.send(back))
    assert refused.error_code == ExecuteTrajectory.Result.INVALID_GOAL and "protective stop" in refused.error_string

    # ... and accepted again once an operator clears it.
    cleared = _reset(ex, probe)
    assert cleared.success and "collision" in cleared.message and bridge.bridge.protective_stop is None
    assert spin_until(ex, lambda: bool(probe.stop_reports(OK)), 5.0)
    result = arm.result_of(arm.send(back))
    assert result.error_code == ExecuteTrajectory.Result.SUCCESSFUL, result.error_string
    assert np.abs(probe.states[-1][1][ARMS] - start[ARMS]).max() < 0.05
