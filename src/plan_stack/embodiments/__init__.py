"""Embodiments: simulators, bridges and scripted experts (aloha/, franka/, drive/).

Every robot folder has the same modules (`sim`, `expert`, `recording`, `bridge`,
`sim_node`, `bridge_node`); the robot's profile (`plan_stack.robots`) names its
parts and `registry` loads them, typed by the protocols of `base` (`Simulator`,
`Expert`, `Recorder`), never through `if robot == ...` chains. Shared pieces at
this level:

* ROS-free: the arm bridges' decisions and shared parameters
  (`arm_bridge.ArmBridge`, `arm_bridge.ArmBridgeConfig`), the simulators'
  shared parameters (`sim_config.SimConfig`) and pacing (`pacing`); trajectory
  checks and the stop profile live in `plan_stack.trajectory.checks`, URDF
  limits in `plan_stack.trajectory.limits`, pinhole cameras, projection and
  segmentation in `plan_stack.camera`, annotation pieces and the rosbag2
  writer in `plan_stack.data`;
* node side: the simulator node's physics thread, rate dividers, clock and
  camera publishing and pose/camera_info messages (`node_common`), the arm
  bridge node (`arm_bridge_node`, wiring only); JointTrajectory conversion is
  `plan_stack.ros.trajectory`;
* `plan-stack record-demos --robot {aloha,franka,drive}` (`record_demos`).
"""
