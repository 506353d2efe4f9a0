"""Helpers for tests and tools that drive real nodes over DDS in-process.

Each `ros_context()` is its own rclpy Context, so a test can start and stop
a graph without touching the global context; `spin_until` spins an executor
until a condition holds or a deadline passes (never sleeps blindly).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import rclpy
from rclpy.context import Context
from rclpy.executors import Executor
from rclpy.node import Node

from plan_stack.ros.executors import executor_with_threads


@contextmanager
def ros_context(args: list[str] | None = None) -> Iterator[Context]:
    """An initialised rclpy context, shut down on exit."""
    ctx = Context()
    rclpy.init(args=args, context=ctx)
    try:
        yield ctx
    finally:
        if ctx.ok():
            rclpy.shutdown(context=ctx)


@contextmanager
def executor_with(ctx: Context, *nodes: Node, threads: int | None = None) -> Iterator[Executor]:
    """An executor spinning `nodes`; nodes are destroyed (and closed) on exit.

    Single-threaded unless a node asks for threads (`executor_threads`, as in
    `lifecycle.executor_for`) or `threads` > 1 is given.
    """
    wanted = threads if threads is not None else max((getattr(n, "executor_threads", 1) for n in nodes), default=1)
    ex = executor_with_threads(ctx, wanted)
    for n in nodes:
        ex.add_node(n)
    try:
        yield ex
    finally:
        for n in nodes:
            ex.remove_node(n)
        ex.shutdown(timeout_sec=2.0)
        for n in nodes:
            close = getattr(n, "close", None)
            if callable(close):
                close()
            n.destroy_node()


def spin_until(executor: Executor, predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.01) -> bool:
    """Spin until `predicate()` is true; returns False when `timeout_s` elapses first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step_s)
    return predicate()
