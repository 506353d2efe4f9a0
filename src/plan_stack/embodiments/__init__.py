"""Embodiments: simulators, bridges and scripted experts (aloha/, franka/, drive/).

Every robot folder has the same modules (`sim`, `expert`, `recording`, `bridge`,
`sim_node`, `bridge_node`) and is found through `registry` (robot name -> its
parts), never through `if robot == ...` chains. Shared pieces at this level:

* ROS-free: the arm bridges' decisions (`arm_bridge.ArmBridge`), trajectory
  validation, URDF limits and the stop profile (`validation`), pinhole
  cameras, projection and segmentation (`camera`), annotation pieces
  (`annotation`), the rosbag2 writer and recorder options (`recording`);
  joint trajectories, their interpolation and limits live in
  `plan_stack.trajectory.core` / `.limits`;
* node side: the simulator node's physics thread, rate dividers, clock and
  camera publishing and pose/camera_info messages (`node_common`), the arm
  bridge node (`arm_bridge_node`, wiring only); JointTrajectory conversion is
  `plan_stack.ros.trajectory`;
* `plan-stack record-demos --robot {aloha,franka,drive}` (`record_demos`).
"""
