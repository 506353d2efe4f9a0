"""One helper for every action call: wait for the server, send, wait, cancel.

Used by nodes that command others (stitcher -> bridge) and by tools and
tests, so no caller repeats the wait-send-check dance. Every wait has a
timeout and failures raise `ActionCallError` subclasses naming the action.
Call from a thread other than the one spinning the node's executor (the
futures complete in executor callbacks).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rclpy.action import ActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.task import Future

__all__ = ["ActionCallError", "ServerUnavailable", "GoalRejected", "ActionTimeout", "ActionCall"]


class ActionCallError(RuntimeError):
    """An action call could not be completed."""


class ServerUnavailable(ActionCallError):
    pass


class GoalRejected(ActionCallError):
    pass


class ActionTimeout(ActionCallError):
    pass


def _wait(future: Future[Any], timeout_s: float) -> bool:
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    return done.wait(timeout_s)


class ActionCall:
    """Client side of one action (`action_type` at `name`), reusable across goals."""

    def __init__(self, node: Node, action_type: Any, name: str, callback_group: CallbackGroup | None = None) -> None:
        self.name = name
        self._client: ActionClient = ActionClient(node, action_type, name, callback_group=callback_group)

    def send(self, goal: Any, *, server_timeout_s: float = 5.0, accept_timeout_s: float = 5.0,
             feedback: Callable[[Any], None] | None = None) -> ClientGoalHandle[Any, Any, Any]:
        """Send a goal and return its accepted handle; raises on no server or rejection."""
        deadline = time.monotonic() + server_timeout_s
        while not self._client.server_is_ready():
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"{self.name}: no action server after {server_timeout_s} s")
            time.sleep(0.01)
        fut = self._client.send_goal_async(
            goal, feedback_callback=(lambda m: feedback(m.feedback)) if feedback else None)
        if not _wait(fut, accept_timeout_s):
            raise ActionTimeout(f"{self.name}: goal not answered within {accept_timeout_s} s")
        handle = fut.result()
        if handle is None or not handle.accepted:
            raise GoalRejected(f"{self.name}: goal rejected")
        return handle

    def result(self, handle: ClientGoalHandle[Any, Any, Any], timeout_s: float) -> tuple[int, Any]:
        """Wait for the goal's result; returns (status, result)."""
        fut = handle.get_result_async()
        if not _wait(fut, timeout_s):
            raise ActionTimeout(f"{self.name}: no result within {timeout_s} s")
        res: Any = fut.result()  # done, so not None
        return res.status, res.result

    def call(self, goal: Any, timeout_s: float, **send_kwargs: Any) -> tuple[int, Any]:
        """Send and wait for the result; returns (status, result)."""
        return self.result(self.send(goal, **send_kwargs), timeout_s)

    def cancel(self, handle: ClientGoalHandle[Any, Any, Any], timeout_s: float = 5.0) -> bool:
        """Request cancellation; True when the server accepted it."""
        fut = handle.cancel_goal_async()
        if not _wait(fut, timeout_s):
            raise ActionTimeout(f"{self.name}: cancel not answered within {timeout_s} s")
        response: Any = fut.result()  # done, so not None
        return len(response.goals_canceling) > 0

    def destroy(self) -> None:
        self._client.destroy()
