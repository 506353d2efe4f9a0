"""A paced simulator node over DDS: sim time waits for the stack's answers (plan_stack.embodiments.pacing)."""
from __future__ import annotations

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image

from plan_stack.embodiments.aloha.sim_node import AlohaSimNode
from plan_stack.msg import ActionChunk
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.testing import executor_with, ros_context, spin_until
from plan_stack.ros.time import s_to_stamp

pytestmark = pytest.mark.ros


def test_sim_time_waits_for_chunks():
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_width", value=32), Parameter("camera_height", value=24),
            Parameter("cameras", value=["cam_high"]), Parameter("camera_rate_hz", value=10.0),
            Parameter("real_time_factor", value=0.0), Parameter("pace_chunk_lead_s", value=0.3)])
        probe = Node("probe", context=ctx)
        clock: list[float] = []
        probe.create_subscription(Clock, "/clock", lambda m: clock.append(m.clock.sec + m.clock.nanosec * 1e-9),
                                  RELIABLE_QOS)
        probe.create_subscription(Image, "cameras/cam_high/image_raw", lambda m: None, SENSOR_QOS)
        with executor_with(ctx, sim, probe) as ex:
            # no chunk publisher yet: the clock has not started
            spin_until(ex, lambda: False, 0.5)
            assert not clock or clock[-1] == 0.0
            pub = probe.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
            # as fast as possible, yet held just below the lead
            assert spin_until(ex, lambda: clock and clock[-1] >= 0.29, 20.0), clock[-1:]
            spin_until(ex, lambda: False, 0.5)
            assert clock[-1] < 0.3 + 1e-6
            chunk = ActionChunk()
            chunk.header.stamp = s_to_stamp(1.0)
            pub.publish(chunk)
            assert spin_until(ex, lambda: clock[-1] >= 1.29, 20.0), clock[-1]
            spin_until(ex, lambda: False, 0.5)
            assert clock[-1] < 1.3 + 1e-6
