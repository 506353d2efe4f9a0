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

import dataclasses

import numpy as np
from trajectory_msgs.msg import JointTrajectory

from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits, split_for_controllers
from plan_stack.embodiments.aloha.model import JOINT_NAMES, gripper_from_joint
from plan_stack.embodiments.arm_bridge import ArmBridgeSettings
from plan_stack.embodiments.arm_bridge_node import ArmBridgeNode
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.trajectory import trajectory_to_cdr
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import Limits

__all__ = ["AlohaBridgeNode", "main"]

_ARM = np.array([not n.endswith("_gripper") for n in JOINT_NAMES])


class AlohaBridgeNode(ArmBridgeNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("aloha_bridge", AlohaBridgeConfig, **kwargs)

    def _configure(self, cfg: AlohaBridgeConfig) -> tuple[tuple[str, ...], Limits]:
        self.state_joint_names = JOINT_NAMES
        self._pubs = {key: self.create_publisher(JointTrajectory, f"{name}/joint_trajectory", RELIABLE_QOS)
                      for key, name in cfg.controllers.items()}
        return JOINT_NAMES, load_limits(cfg)

    def _goal_checks(self, cfg: AlohaBridgeConfig) -> tuple[np.ndarray, np.ndarray]:
        return _ARM, np.where(_ARM, cfg.goal_tolerance, cfg.gripper_goal_tolerance)

    def _joint_to_stack(self, q: np.ndarray) -> np.ndarray:
        q[~_ARM] = gripper_from_joint(q[~_ARM])
        return q

    def _publish_command(self, traj: Trajectory) -> None:
        for key, part in split_for_controllers(traj).items():
            self._pubs[key].publish(trajectory_to_cdr(part))

    def _settings(self, cfg: AlohaBridgeConfig) -> ArmBridgeSettings:
        """A cancel decelerates from where the reference will be `command_latency_s` from now."""
        return dataclasses.replace(super()._settings(cfg), stop_lead_s=cfg.command_latency_s)


main = node_main(AlohaBridgeNode)
