"""A multi-threaded executor that does not hand out the same queued callback again and again.

rclpy's MultiThreadedExecutor (9.1.x, the wheels installed here; ros2/rclpy#1452, fixed upstream in
#1547) submits each ready callback to its thread pool and looks for work again at once. A callback
that a worker has not started yet still counts as ready work, so it is yielded and submitted again,
the wait returns without waiting, and the spinning thread keeps the GIL in a tight loop: the
queue grows by thousands of no-op copies, the workers barely get to run, and every other thread of
the process (a simulator's physics, a bridge's goal monitor) slows down with them. Measured here:
aloha_sim + aloha_bridge in one process ran at 0.02-0.06 x real time instead of 1.0.

`ThreadedExecutor` keeps rclpy's scheduling and adds one rule: a callback handed to the pool is not
handed out again until a worker has picked it up; meanwhile the spinning thread waits (GIL released)
for that, so an idle or saturated pool costs no CPU.

Shutdown: rclpy 9.1's `Executor.shutdown` destroys the executor's guard condition without waiting for
the callbacks in flight (its wait tests the flag it has just set), and `MultiThreadedExecutor` drains its
pool only afterwards. A callback a worker runs after that triggers the destroyed guard condition, its task
ends with `InvalidHandle`, and nobody retrieves it: "The following exception was never retrieved: cannot
use Destroyable because destruction was requested" on stderr when the task is collected (`make demo` at
exit). `ThreadedExecutor.shutdown` drains the pool first, with the guard condition alive, then releases the
executor; what a callback raised after the last spin is kept in `late_errors` (retrieved, not lost).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

from rclpy.context import Context
from rclpy.executors import (
    ConditionReachedException,
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    SingleThreadedExecutor,
    TimeoutException,
    TimeoutObject,
)
from rclpy.task import Task

#: How long one spin waits at most for a worker to pick up what it submitted before it looks again
#: (a shutdown or a spin timeout is noticed within this).
PICKUP_WAIT_S = 0.05


def _pickup_wait_s(timeout_sec: float | TimeoutObject | None) -> float:
    """PICKUP_WAIT_S, or less when the spin's own timeout (seconds or rclpy's TimeoutObject) is shorter."""
    timeout = cast("float | None", getattr(timeout_sec, "timeout", timeout_sec))
    if timeout is None or timeout < 0:
        return PICKUP_WAIT_S
    return min(PICKUP_WAIT_S, float(timeout))


class ThreadedExecutor(MultiThreadedExecutor):
    """MultiThreadedExecutor without the resubmission storm (module docstring)."""

    def __init__(self, num_threads: int | None = None, *, context: Context | None = None) -> None:
        super().__init__(num_threads=num_threads, context=context)
        self._queued: dict[Any, threading.Event] = {}
        self._queued_lock = threading.Lock()
        #: what callbacks that finished after the last spin raised, retrieved by `shutdown`
        self.late_errors: list[BaseException] = []

    def _run_queued(self, handler: Task[None], picked_up: threading.Event) -> None:
        with self._queued_lock:
            self._queued.pop(handler, None)
        picked_up.set()
        handler()

    def _spin_once_impl(self, timeout_sec: float | TimeoutObject | None = None,
                        wait_condition: Callable[[], bool] = lambda: False) -> None:
        try:
            handler, _entity, _node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        with self._queued_lock:
            picked_up = self._queued.get(handler)
            fresh = picked_up is None
            if picked_up is None:
                picked_up = self._queued[handler] = threading.Event()
        if fresh:
            try:
                self._executor.submit(self._run_queued, handler, picked_up)
            except RuntimeError:  # the pool was shut down under a spinning thread: the callback is not run
                if self._is_shutdown:
                    return
                raise
            self._futures.append(handler)
        picked_up.wait(_pickup_wait_s(timeout_sec))
        for future in list(self._futures):  # finished callbacks: re-raise what they raised, as rclpy does
            if future.done():
                self._futures.remove(future)
                future.result()


    def shutdown(self, timeout_sec: float | None = None, *, wait_for_threads: bool = True) -> bool:
        """Stop spinning, let every callback handed to the pool finish, then release the executor.

        A spinning thread returns (ShutdownException); the pool runs what it was handed while the guard
        condition those callbacks trigger still exists, and only then does rclpy destroy it (module
        docstring). Exceptions of callbacks that finished after the last spin go to `late_errors`.
        With `wait_for_threads=False` the pool is not waited for, as in rclpy.
        """
        with self._shutdown_lock:
            if not self._is_shutdown:
                self._is_shutdown = True
                if self._guard is not None:
                    self._guard.trigger()
        self._executor.shutdown(wait=wait_for_threads)
        done = super().shutdown(timeout_sec, wait_for_threads=wait_for_threads)
        for future in list(self._futures):
            if future.done():
                self._futures.remove(future)
                error = future.exception()
                if error is not None:
                    self.late_errors.append(error)
        return done


def executor_with_threads(context: Context, threads: int) -> Executor:
    """SingleThreadedExecutor for one thread (cheapest per callback), else a ThreadedExecutor."""
    if threads <= 1:
        return SingleThreadedExecutor(context=context)
    return ThreadedExecutor(num_threads=threads, context=context)
