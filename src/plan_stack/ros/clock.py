"""Clock resets: a callback when a node's ROS time jumps backwards (a simulator reset or restart), and
`ClockResets`, which also remembers where the time before the last reset ended."""
from __future__ import annotations

import threading
from collections.abc import Callable

from rclpy.node import Node

from plan_stack.ros.time import clock_s
from plan_stack.stamps import ns_to_s

__all__ = ["CLOCK_RESET_S", "ClockResets", "on_clock_reset"]

#: A backward jump of ROS time by more than this (s) is a clock reset (a simulator reset or restart).
CLOCK_RESET_S = 1e-3


def _on_jump_back(node: Node, callback: Callable[[float], None]) -> None:
    """`callback(delta_s)` (the jump, negative) whenever the node's ROS time jumps backwards."""
    from rclpy.clock import JumpThreshold
    from rclpy.duration import Duration

    threshold = JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-int(CLOCK_RESET_S * 1e9)),
                              on_clock_change=False)
    handle = node.get_clock().create_jump_callback(
        threshold, post_callback=lambda jump: callback(ns_to_s(jump.delta.nanoseconds)))
    handles = getattr(node, "_plan_stack_jump_handles", [])
    handles.append(handle)  # the handle must outlive the node's use of it
    node._plan_stack_jump_handles = handles  # type: ignore[attr-defined]  # kept alive with the node


def on_clock_reset(node: Node, callback: Callable[[], None]) -> None:
    """Call `callback()` (no arguments, must not block) whenever the node's ROS time jumps backwards.

    With sim time, a restarted or reset simulator starts /clock again from 0: state kept from before
    (references, measured states, chunks) would be replayed against a different world.
    """
    _on_jump_back(node, lambda _delta_s: callback())


class ClockResets:
    """A node's clock resets: how many, and the node time just before the last one.

    A message stamped in the time before a reset (sent before it, delivered after) lies in the future of the
    reset clock; `from_before(stamp_s, now_s, lead_s)` tells such a message from one stamped ahead by a
    wrong clock. `callback()` (optional, must not block) runs at each reset, after the bookkeeping.
    Thread-safe.
    """

    def __init__(self, node: Node, callback: Callable[[], None] | None = None) -> None:
        self._node = node
        self._callback = callback
        self._lock = threading.Lock()
        self.count = 0
        self.before_s: float | None = None  # node time (s) just before the last reset
        _on_jump_back(node, self._on_jump)

    def _on_jump(self, delta_s: float) -> None:
        now_s = clock_s(self._node)
        with self._lock:
            self.count += 1
            self.before_s = now_s - delta_s
        if self._callback is not None:
            self._callback()

    def from_before(self, stamp_s: float, now_s: float, lead_s: float) -> bool:
        """`stamp_s` is more than `lead_s` ahead of `now_s` but no later than `lead_s` after the time the clock
        showed before the last reset: stamped in the time before it."""
        with self._lock:
            before = self.before_s
        return before is not None and now_s + lead_s < stamp_s <= before + lead_s
