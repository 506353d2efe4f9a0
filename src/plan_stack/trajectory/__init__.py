"""Trajectory post-processing: per-joint MPC (OSQP) and Ruckig backends, limit
checks and cross-chunk stitching. No ROS imports here; the
`stitcher` node lives in `plan_stack.trajectory.stitcher_node`."""
