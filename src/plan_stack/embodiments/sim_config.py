"""The parameters every simulator node shares (no ROS): its seed, its pace, its clock and its cameras.

Each robot's simulator config (`AlohaSimConfig`, `FrankaSimConfig`, `DriveSimConfig`) extends `SimConfig`
with its own scene, joints and topics, and overrides a field where its text or range is the robot's own (a
driving scene steps at 100 Hz, so its clock cannot be published faster). `SimNode` reads these fields: the
physics thread's pace, the pacing gates, `real_time_factor` settable at run time.
"""
from __future__ import annotations

import dataclasses

from plan_stack.config import param, validate
from plan_stack.embodiments.pacing import PacingConfig

__all__ = ["SimConfig"]


@dataclasses.dataclass(frozen=True)
class SimConfig(PacingConfig):
    """A simulator's seed, real-time factor, /clock rate and camera output, with its pacing to the stack."""

    seed: int = param("seed of the scene's object placement", 0, min=0, read_only=True)
    real_time_factor: float = param("sim seconds per wall second; 0 = as fast as possible", 1.0, min=0.0, max=100.0)
    clock_rate_hz: float = param("/clock publish rate (sim time)", 250.0, min=1.0, max=500.0)
    camera_rate_hz: float = param("camera publish rate (sim time); 0 disables rendering", 10.0, min=0.0, max=60.0)
    camera_width: int = param("rendered image width (px)", 320, min=16, max=1920, read_only=True)
    camera_height: int = param("rendered image height (px)", 240, min=16, max=1080, read_only=True)

    def __post_init__(self) -> None:
        validate(self)
