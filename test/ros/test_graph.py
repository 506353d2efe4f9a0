"""What the graph says about a topic: the nodes publishing it, by full name."""
from __future__ import annotations

import pytest
from rclpy.node import Node
from sensor_msgs.msg import JointState

from plan_stack.ros.graph import publisher_nodes
from plan_stack.ros.qos import SENSOR_QOS
from plan_stack.ros.testing import executor_with, ros_context, spin_until

pytestmark = pytest.mark.ros


def test_the_nodes_publishing_a_topic_are_named_in_order():
    with ros_context() as ctx:
        watcher = Node("watcher", context=ctx)
        second = Node("sim", namespace="/robot_b", context=ctx)
        first = Node("sim", namespace="/robot_a", context=ctx)
        try:
            with executor_with(ctx, watcher, first, second) as ex:
                topic = watcher.resolve_topic_name("joint_states")
                assert publisher_nodes(watcher, topic) == []
                first.create_publisher(JointState, "/joint_states", SENSOR_QOS)
                second.create_publisher(JointState, "/joint_states", SENSOR_QOS)
                assert spin_until(ex, lambda: len(publisher_nodes(watcher, topic)) == 2, 10.0)
                assert publisher_nodes(watcher, topic) == ["/robot_a/sim", "/robot_b/sim"]
        finally:
            for node in (watcher, first, second):
                node.destroy_node()
