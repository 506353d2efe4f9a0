"""Second process for the interface tests: echoes every plan_stack message and
serves the two actions, so each type crosses a real DDS process boundary.

Run as a script; exits on SIGINT/SIGTERM. `echo/in/<Type>` -> `echo/out/<Type>`.
The ExecuteTrajectory server plays the goal's timeline against the wall
clock, publishing feedback, and honours cancel; PlanRequest answers with a
plan naming the instruction it got. Both exist only to test the interfaces.
"""
import sys
import time

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from plan_stack.action import ExecuteTrajectory, PlanRequest
from plan_stack.msg import ActionChunk, Observation, PlanFeatures, Primitive, TaskOutcome, VisualPlan
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.qos import RELIABLE_QOS

MESSAGES = {"Observation": Observation, "Primitive": Primitive, "VisualPlan": VisualPlan,
            "PlanFeatures": PlanFeatures, "ActionChunk": ActionChunk, "TaskOutcome": TaskOutcome}


class InterfacePeer(Node):
    executor_threads = 2  # an executing goal blocks its thread

    def __init__(self, **kwargs):
        super().__init__("interface_peer", **kwargs)
        self._pubs = {}
        for name, cls in MESSAGES.items():
            pub = self.create_publisher(cls, f"echo/out/{name}", RELIABLE_QOS)
            self.create_subscription(cls, f"echo/in/{name}", pub.publish, RELIABLE_QOS)
        group = ReentrantCallbackGroup()
        ActionServer(self, ExecuteTrajectory, "execute_trajectory", self._execute,
                     goal_callback=self._check_goal, cancel_callback=lambda _g: CancelResponse.ACCEPT,
                     callback_group=group)
        ActionServer(self, PlanRequest, "plan_request", self._plan, callback_group=group)

    def _check_goal(self, goal):
        return GoalResponse.ACCEPT if goal.trajectory.points else GoalResponse.REJECT

    def _execute(self, handle):
        points = handle.request.trajectory.points
        end = points[-1].time_from_start.sec + points[-1].time_from_start.nanosec * 1e-9
        start = time.monotonic()
        result = ExecuteTrajectory.Result()
        while (elapsed := time.monotonic() - start) < end:
            if handle.is_cancel_requested:
                handle.canceled()
                result.error_string = f"canceled at {elapsed:.3f} s"
                return result
            handle.publish_feedback(ExecuteTrajectory.Feedback(time_from_start=elapsed, max_tracking_error=0.0))
            time.sleep(0.02)
        handle.succeed()
        result.error_code = ExecuteTrajectory.Result.SUCCESSFUL
        return result

    def _plan(self, handle):
        handle.publish_feedback(PlanRequest.Feedback(partial_subtask="reach"))
        handle.succeed()
        plan = VisualPlan(instruction=handle.request.instruction, subtask="reach", decoder="ar")
        return PlanRequest.Result(plan=plan)


if __name__ == "__main__":
    sys.exit(node_main(InterfacePeer)())
