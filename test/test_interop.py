"""Names ROS tools find: the action the stitcher's help names is the one the bridge serves."""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.ros


def test_stitcher_help_names_the_action_the_bridge_serves():
    from rclpy.action import get_action_server_names_and_types_by_node
    from rclpy.node import Node

    from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode
    from plan_stack.ros.testing import executor_with, ros_context, spin_until
    from plan_stack.trajectory.config import StitcherNodeConfig

    help_text = next(f for f in dataclasses.fields(StitcherNodeConfig)
                     if f.name == "execute_action").metadata["plan_stack"].description
    with ros_context() as ctx:
        bridge = AlohaBridgeNode(context=ctx)
        probe = Node("interop_probe", context=ctx)
        with executor_with(ctx, bridge, probe, threads=3) as ex:
            served = lambda: [n for n, _ in get_action_server_names_and_types_by_node(probe, "aloha_bridge", "/")]  # noqa: E731
            assert spin_until(ex, lambda: served(), 20.0)
            names = served()
    assert names == ["/execute_trajectory"]
    assert "/execute_trajectory" in help_text and "/aloha_bridge/execute_trajectory" not in help_text
