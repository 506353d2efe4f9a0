"""ThreadedExecutor: a ready callback goes to the thread pool once (rclpy's own executor submits it again and again)."""
from __future__ import annotations

import collections
import threading
import time

import pytest
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Int64

from plan_stack.ros.executors import ThreadedExecutor
from plan_stack.ros.lifecycle import executor_for
from plan_stack.ros.testing import ros_context, spin_until

pytestmark = pytest.mark.ros


class Chatter(Node):
    """Publishes at 1 kHz on a wall timer and counts what its reentrant subscription receives."""

    executor_threads = 3

    def __init__(self, context) -> None:
        super().__init__("chatter", context=context)
        group = ReentrantCallbackGroup()
        self.received = 0
        self._pub = self.create_publisher(Int64, "chatter", 100)
        self.create_subscription(Int64, "chatter", self._on_msg, 100, callback_group=group)
        self.create_timer(0.001, lambda: self._pub.publish(Int64(data=1)), callback_group=group)

    def _on_msg(self, _msg) -> None:
        self.received += 1


def _submissions(executor, spin_s: float) -> tuple[collections.Counter, int]:
    """Spin `executor` for `spin_s` with spin_once beside a paced background thread (a simulator's
    physics loop, which competes for the GIL); count how often each callback task went to the pool."""
    counts: collections.Counter = collections.Counter()
    pool_submit = executor._executor.submit

    def counting_submit(fn, *args):
        counts[args[0] if args else fn] += 1  # the task itself (ids of collected tasks get reused)
        return pool_submit(fn, *args)

    executor._executor.submit = counting_submit
    stop = threading.Event()

    def physics() -> None:
        while not stop.is_set():
            sum(range(200))  # a little Python work per step, then a 1 ms pause, as a paced simulator does
            time.sleep(0.001)

    worker = threading.Thread(target=physics, daemon=True)
    worker.start()
    spin_until(executor, lambda: False, spin_s)
    stop.set()
    worker.join()
    return counts, len(executor._futures)


def _spun(executor_cls, spin_s: float = 1.5):
    with ros_context() as ctx:
        node = Chatter(ctx)
        ex = executor_cls(num_threads=3, context=ctx)
        ex.add_node(node)
        try:
            counts, pending = _submissions(ex, spin_s)
            return counts, pending, node.received
        finally:
            ex.remove_node(node)
            ex.shutdown(timeout_sec=2.0)
            node.destroy_node()


def test_each_ready_callback_is_submitted_once():
    counts, pending, received = _spun(ThreadedExecutor)
    assert received > 300  # the callbacks ran
    assert max(counts.values()) == 1, counts.most_common(3)  # plain callbacks: one submission each
    assert pending <= 3


def test_rclpy_multithreaded_executor_resubmits_queued_callbacks():
    """The defect ThreadedExecutor exists for: if this rclpy ever stops resubmitting, drop our executor."""
    counts, *_ = _spun(MultiThreadedExecutor)
    assert max(counts.values()) > 1


def test_executor_for_picks_threaded_executor_for_multi_threaded_nodes():
    with ros_context() as ctx:
        node = Chatter(ctx)
        try:
            assert isinstance(executor_for(node), ThreadedExecutor)
        finally:
            node.destroy_node()
