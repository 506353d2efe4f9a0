"""Clock resets: a callback when a node's ROS time jumps backwards (a simulator reset or restart)."""
from __future__ import annotations

from collections.abc import Callable

from rclpy.node import Node

#: A backward jump of ROS time by more than this (s) is a clock reset (a simulator reset or restart).
CLOCK_RESET_S = 1e-3


def on_clock_reset(node: Node, callback: Callable[[], None]) -> None:
    """Call `callback()` (no arguments, must not block) whenever the node's ROS time jumps backwards.

    With sim time, a restarted or reset simulator starts /clock again from 0: state kept from before
    (references, measured states, chunks) would be replayed against a different world.
    """
    from rclpy.clock import JumpThreshold
    from rclpy.duration import Duration

    threshold = JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-int(CLOCK_RESET_S * 1e9)),
                              on_clock_change=False)
    handle = node.get_clock().create_jump_callback(threshold, post_callback=lambda _jump: callback())
    handles = getattr(node, "_plan_stack_jump_handles", [])
    handles.append(handle)  # the handle must outlive the node's use of it
    node._plan_stack_jump_handles = handles  # type: ignore[attr-defined]  # kept alive with the node
