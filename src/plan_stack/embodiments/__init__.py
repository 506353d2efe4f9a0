"""Embodiments: simulators, bridges and scripted experts (aloha/, franka/, drive/).

Shared pieces live at this level, so every embodiment follows the same rules:

* ROS-free: joint-trajectory interpolation (`joint_trajectory`), trajectory
  validation, URDF limits and the stop profile (`validation`), pinhole
  cameras, projection and segmentation (`camera`); recording, annotation and
  bag I/O live in `plan_stack.data`;
* node side: the simulator node's physics thread, rate dividers, clock and
  camera publishing and pose/camera_info messages (`node_common`), the arm
  bridge node (`arm_bridge_node`), JointTrajectory conversion
  (`trajectory_convert`);
* `plan-stack record-demos --robot {aloha,franka,drive}` (`record_demos`).
"""
