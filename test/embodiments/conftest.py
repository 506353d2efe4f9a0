"""Fixtures shared by the embodiment node tests (sims and bridges over DDS)."""
from __future__ import annotations

import time

import numpy as np
import pytest


def _wait_for(predicate, timeout_s: float, poll_s: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


@pytest.fixture(scope="session")
def wait_for():
    """`wait_for(predicate, timeout_s, poll_s=0.005)`: poll while an executor spins on its own thread (the
    sims stream faster than `spin_once` keeps up); True once the predicate holds, else its last value."""
    return _wait_for


class ArmGoals:
    """Goals for one arm bridge's `execute_trajectory` action, and the calls that send them.

    `wait(predicate, timeout_s)` is how the test lets the graph run: `spin_until` on the test's executor,
    or `wait_for` when the executor spins on its own thread.
    """

    def __init__(self, names, client, wait, result_timeout_s: float = 15.0) -> None:
        self.names, self.client, self.wait = tuple(names), client, wait
        self.result_timeout_s = result_timeout_s

    def make_goal(self, times, positions, velocities=None, accelerations=None, names=None):
        from plan_stack.action import ExecuteTrajectory
        from plan_stack.embodiments.joint_trajectory import Trajectory
        from plan_stack.embodiments.trajectory_convert import trajectory_to_msg

        traj = Trajectory(tuple(names or self.names), 0.0, times, positions, velocities, accelerations)
        return ExecuteTrajectory.Goal(trajectory=trajectory_to_msg(traj))

    def rest_goal(self, target, duration: float):
        """One quintic point at rest: the controller interpolates from the present reference."""
        z = np.zeros((1, len(self.names)))
        return self.make_goal([duration], np.asarray(target)[None, :], z, z)

    def send(self, goal, feedback=None, timeout: float = 15.0):
        """Send `goal` and return its handle, asserting that the bridge accepted it."""
        fut = self.client.send_goal_async(goal, feedback_callback=feedback)
        assert self.wait(fut.done, timeout)
        handle = fut.result()
        assert handle.accepted
        return handle

    def result_of(self, handle, timeout: float | None = None):
        fut = handle.get_result_async()
        assert self.wait(fut.done, self.result_timeout_s if timeout is None else timeout)
        return fut.result().result


@pytest.fixture(scope="session")
def arm_goals():
    """`arm_goals(joint_names, action_client, wait, result_timeout_s=15.0)` -> `ArmGoals`."""
    return ArmGoals
