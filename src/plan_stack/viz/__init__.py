"""Pictures of plans: RViz markers as plain data, overlays on camera images, offline renders.

No ROS imports here or in the library modules (`plan`, `markers`, `overlay`,
`plot`, `bag`); `node` is the thin rclpy shell and `render` the
`plan-stack render` command.
"""
