"""`franka_bridge`: the stack's 7-joint + gripper-width trajectories -> the Franka's controllers.

The shared arm bridge (`embodiments.arm_bridge_node`: ExecuteTrajectory
server on `execute_trajectory`, streamed `trajectory`, validation against
URDF position / velocity / acceleration / jerk limits, feedback, cancel,
watchdog) with the Franka mapping: the arm part goes to
`<arm_controller>/joint_trajectory` (joint_trajectory_controller), the
gripper channel as width/speed moves on `<gripper>/move`
(sensor_msgs/JointState: position[0] = width m, velocity[0] = speed m/s;
franka_gripper `move` semantics), sent whenever the bridge's reference width
leaves the last move goal. Tracking error and goal tolerance are measured
on the 7 arm joints against the present reference; a cancel decelerates from
the present reference. Run on the sim/robot clock.
"""
from __future__ import annotations

import numpy as np
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from plan_stack.embodiments.arm_bridge_node import ArmBridgeNode
from plan_stack.embodiments.franka.bridge import FrankaBridgeConfig, gripper_move
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.trajectory import trajectory_to_cdr
from plan_stack.trajectory.core import Trajectory

__all__ = ["FrankaBridgeNode", "main"]


class FrankaBridgeNode(ArmBridgeNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("franka_bridge", FrankaBridgeConfig, **kwargs)
        self._gripper_goal: float | None = None  # set from the first joint_states
        self.create_timer(1.0 / self.cfg.gripper_rate_hz, self._gripper_tick, callback_group=self._group)

    def _create_publishers(self, cfg: FrankaBridgeConfig) -> None:
        self._arm_pub = self.create_publisher(JointTrajectory, f"{cfg.arm_controller}/joint_trajectory",
                                              RELIABLE_QOS)
        self._grip_pub = self.create_publisher(JointState, f"{cfg.gripper}/move", RELIABLE_QOS)

    def _on_first_state(self, q: np.ndarray) -> None:
        self._gripper_goal = float(q[7])

    def _publish_command(self, traj: Trajectory) -> None:
        """The arm part only; the gripper follows the mirrored reference through `_gripper_tick`."""
        arm = Trajectory(self.cfg.arm_joints, traj.stamp_s, traj.times_s.copy(), traj.positions[:, :7],
                         None if traj.velocities is None else traj.velocities[:, :7],
                         None if traj.accelerations is None else traj.accelerations[:, :7])
        self._arm_pub.publish(trajectory_to_cdr(arm))

    def _gripper_tick(self) -> None:
        with self._lock:
            ref = self.bridge.reference(self._now())
            if ref is None:
                return
            move = gripper_move(ref.positions[7], ref.velocities[7], self._gripper_goal, self.cfg)
            if move is None:
                return
            self._gripper_goal = move[0]
        self._grip_pub.publish(JointState(name=[self.cfg.gripper_joint], position=[move[0]], velocity=[move[1]]))


main = node_main(FrankaBridgeNode)
