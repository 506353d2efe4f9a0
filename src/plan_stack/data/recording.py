"""Demonstration recording pieces every embodiment's recorder (`aloha.recording`, `franka.recording`,
`drive.recording`) uses the same way, without ROS: recorder options, image-size check, bag paths and
rate dividers. Bags are written with `data.bags.BagWriter`; bag time is sim time (episode start = 0 s).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

__all__ = ["RecordOptions", "check_image_size", "new_bag_path", "every_steps"]


def check_image_size(width: int, height: int) -> None:
    """Rendered images are at least 16 x 16 px (ValueError naming the fields otherwise)."""
    if width < 16 or height < 16:
        raise ValueError(f"width/height: at least 16 px, got {width}x{height}")


@dataclasses.dataclass(frozen=True)
class RecordOptions:
    """Options of the arm recorders (ALOHA, Franka): image size, camera rate, keyframe period,
    waypoints per annotated path, control period."""

    width: int = 320
    height: int = 240
    camera_rate_hz: float = 10.0
    keyframe_period_s: float = 0.5
    waypoints: int = 10
    dt_s: float = 0.02

    def __post_init__(self) -> None:
        check_image_size(self.width, self.height)
        if self.camera_rate_hz <= 0 or self.keyframe_period_s <= 0:
            raise ValueError("camera_rate_hz/keyframe_period_s: must be positive")
        if self.waypoints < 2:
            raise ValueError(f"waypoints: at least 2, got {self.waypoints}")


def new_bag_path(out_dir: str | os.PathLike, stem: str) -> Path:
    """`out_dir/stem` for a new rosbag2 folder (creating `out_dir`); FileExistsError if it exists."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bag_path = out_dir / stem
    if bag_path.exists():
        raise FileExistsError(f"out: {bag_path} already exists (rosbag2 refuses to overwrite)")
    return bag_path


def every_steps(dt_s: float, *, rate_hz: float | None = None, period_s: float | None = None) -> int:
    """Steps of `dt_s` per period (`1 / rate_hz` or `period_s`), at least 1: the divider of a rate on a
    fixed-step loop."""
    if rate_hz is None and period_s is None:
        raise ValueError("every_steps: give rate_hz or period_s")
    n = 1.0 / (rate_hz * dt_s) if rate_hz is not None else period_s / dt_s  # type: ignore[operator]
    return max(1, int(round(n)))
