"""Moved to `plan_stack.ros.trajectory` (the one JointTrajectory converter) and `plan_stack.ros.time`.

Kept as an alias so code written against the old path keeps importing; new code imports those modules.
"""
from plan_stack.ros.time import duration_to_s, s_to_duration, s_to_stamp, stamp_to_s  # noqa: F401
from plan_stack.ros.trajectory import trajectory_from_msg, trajectory_to_msg  # noqa: F401

__all__ = ["stamp_to_s", "s_to_stamp", "duration_to_s", "s_to_duration", "trajectory_from_msg", "trajectory_to_msg"]
