"""Arm bridges on a clock that jumps back (simulator reset or restart): pre-reset state is dropped."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from builtin_interfaces.msg import Time  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode  # noqa: E402
from plan_stack.embodiments.aloha.model import JOINT_NAMES, START_ARM_POSE, START_GRIPPER_M  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402


def test_bridge_drops_reference_and_measured_state_when_time_goes_back():
    with ros_context() as ctx:
        bridge = AlohaBridgeNode(context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True)])
        probe = Node("clock_probe", context=ctx)
        clock = probe.create_publisher(Clock, "/clock", RELIABLE_QOS)
        states = probe.create_publisher(JointState, "joint_states", SENSOR_QOS)
        warnings = []
        probe.create_subscription(
            DiagnosticArray, "/diagnostics",
            lambda m: warnings.extend(s.message for s in m.status if s.level == DiagnosticStatus.WARN),
            DIAGNOSTICS_QOS)
        q = [*START_ARM_POSE, START_GRIPPER_M] * 2

        def tick(sec):
            clock.publish(Clock(clock=Time(sec=sec)))
            states.publish(JointState(name=list(JOINT_NAMES), position=list(q)))

        with executor_with(ctx, bridge, probe, threads=3) as ex:
            assert spin_until(ex, lambda: clock.get_subscription_count() > 0 and states.get_subscription_count() > 0,
                              20.0)
            assert spin_until(ex, lambda: (tick(100), bridge._follower is not None)[1], 20.0, step_s=0.05)
            assert bridge.get_clock().now().nanoseconds >= 100 * 10**9
            before = bridge._follower
            clock.publish(Clock(clock=Time(sec=1)))  # the simulator restarted
            assert spin_until(ex, lambda: any("clock jumped back" in w for w in warnings), 20.0)
            # dropped (a joint_states already in flight may have rebuilt it, but never the old one)
            assert bridge._follower is not before
            # joint_states after the reset rebuild the state from the new world
            assert spin_until(ex, lambda: (tick(2), bridge._follower is not None)[1], 20.0, step_s=0.05)
