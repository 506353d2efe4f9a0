"""`aloha_bridge`: the stack's 14-DoF trajectories -> the ALOHA's four controllers.

The shared arm bridge (`embodiments.arm_bridge_node`: ExecuteTrajectory
server on `execute_trajectory`, streamed `trajectory`, validation, feedback,
cancel, watchdog) with the ALOHA mapping: valid commands are split into
`<controller>/joint_trajectory` messages for the two arm and two gripper
joint_trajectory_controllers (grippers normalised 0..1 in the stack, finger
metres on the robot), all with the same resolved header stamp. Tracking
error is measured on the arm joints against the reference at each
joint_states message's own stamp; goals end within `goal_tolerance` (arms)
and `gripper_goal_tolerance` (grippers). A cancel stops from where the
reference will be `command_latency_s` from now. Must run on the sim/robot
clock (`use_sim_time: true` with the simulator).
"""
from __future__ import annotations

from trajectory_msgs.msg import JointTrajectory

from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, split_for_controllers
from plan_stack.embodiments.arm_bridge_node import ArmBridgeNode
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.trajectory import trajectory_to_cdr
from plan_stack.trajectory.core import Trajectory

__all__ = ["AlohaBridgeNode", "main"]


class AlohaBridgeNode(ArmBridgeNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("aloha_bridge", AlohaBridgeConfig, **kwargs)

    def _create_publishers(self, cfg: AlohaBridgeConfig) -> None:
        self._pubs = {key: self.create_publisher(JointTrajectory, f"{name}/joint_trajectory", RELIABLE_QOS)
                      for key, name in cfg.controllers.items()}

    def _publish_command(self, traj: Trajectory) -> None:
        for key, part in split_for_controllers(traj).items():
            self._pubs[key].publish(trajectory_to_cdr(part))


main = node_main(AlohaBridgeNode)
