"""Moved to `plan_stack.trajectory.core` (one trajectory type and evaluation for the whole stack).

Kept as an alias so code written against the old path keeps importing; new code imports the core.
"""
from plan_stack.trajectory.core import (  # noqa: F401
    Reference,
    Spline,
    Trajectory,
    TrajectoryError,
    TrajectoryFollower,
    interpolation_of,
    spline_from,
)

__all__ = ["TrajectoryError", "Trajectory", "Spline", "Reference", "TrajectoryFollower", "interpolation_of",
           "spline_from"]
