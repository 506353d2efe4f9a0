"""How plans are drawn (`VizStyle`, shared by markers, overlays and renders) and the node's I/O (`VizConfig`).

Sizes of 3D markers are in metres of the primitive's frame, so a robot
(centimetre waypoints) and a car (metre waypoints) set their own in
config/<robot>.yaml. Colours are RGB in [0, 1]; one per arm.
"""
from __future__ import annotations

import dataclasses

from plan_stack.config import ConfigError, param, validate

__all__ = ["VizStyle", "VizConfig", "QOS_NAMES"]

QOS_NAMES = ("sensor", "sensor_data", "reliable", "latched")


def _colour(name: str, value: tuple[float, ...]) -> None:
    if len(value) != 3:
        raise ConfigError(f"{name}: an RGB colour needs 3 values in [0, 1], got {list(value)}")


@dataclasses.dataclass(frozen=True)
class VizStyle:
    """Colours and sizes of every drawing (markers, overlays, rendered plots)."""

    colour_left: tuple[float, ...] = param("RGB of left-arm primitives, 0..1", (0.12, 0.56, 1.0), min=0.0, max=1.0)
    colour_right: tuple[float, ...] = param("RGB of right-arm primitives, 0..1", (1.0, 0.45, 0.1), min=0.0, max=1.0)
    colour_single: tuple[float, ...] = param("RGB of single-arm and driving primitives, 0..1", (0.1, 0.85, 0.3),
                                             min=0.0, max=1.0)
    colour_box: tuple[float, ...] = param("RGB of boxes, 0..1", (1.0, 0.9, 0.1), min=0.0, max=1.0)
    colour_truth: tuple[float, ...] = param("RGB of ground-truth paths in renders, 0..1", (0.95, 0.95, 0.95),
                                            min=0.0, max=1.0)
    line_width_m: float = param("3D line strip width, m", 0.005, min=1e-4, max=10.0)
    waypoint_diameter_m: float = param("3D waypoint sphere diameter, m", 0.012, min=1e-4, max=10.0)
    endpoint_scale: float = param("start/end spheres are this many times a waypoint's diameter", 2.0,
                                  min=1.0, max=10.0)
    text_height_m: float = param("height of the 3D sub-task text, m", 0.03, min=1e-4, max=100.0)
    text_offset_m: float = param("the 3D sub-task text floats this far above (-y, image up) the first point, m",
                                 0.05, min=0.0, max=100.0)
    alpha: float = param("opacity of 3D markers", 1.0, min=0.05, max=1.0)
    line_px: int = param("overlay line thickness, px", 2, min=1, max=20)
    point_radius_px: int = param("overlay waypoint dot radius, px", 3, min=1, max=30)
    endpoint_radius_px: int = param("overlay start ring / end dot radius, px", 6, min=1, max=60)
    font_scale: float = param("overlay sub-task text scale (OpenCV Hershey simplex)", 0.45, min=0.1, max=5.0)

    def __post_init__(self) -> None:
        validate(self)
        for name in ("colour_left", "colour_right", "colour_single", "colour_box", "colour_truth"):
            _colour(name, getattr(self, name))
        if self.endpoint_radius_px <= self.point_radius_px:
            raise ConfigError(f"endpoint_radius_px: {self.endpoint_radius_px} must exceed point_radius_px "
                              f"{self.point_radius_px} (the start ring must not hide the dot)")

    def colour_of(self, arm: str) -> tuple[float, ...]:
        return {"left": self.colour_left, "right": self.colour_right}.get(arm, self.colour_single)

    def rgb8_of(self, arm: str) -> tuple[int, int, int]:
        """The arm colour as 8-bit RGB (what overlays paint)."""
        return to_rgb8(self.colour_of(arm))


def to_rgb8(colour: tuple[float, ...]) -> tuple[int, int, int]:
    return tuple(int(round(255 * c)) for c in colour)  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class VizConfig:
    """The viz node's inputs, buffers and outputs."""

    overlay_camera: str = param("Observation camera the 2D primitives are drawn on (its pixels are the uv); "
                                "empty: the first camera", "")
    observation_buffer: int = param("recent Observations kept to find the one a plan was made from", 10,
                                    min=1, max=1000, read_only=True)
    plan_qos: str = param("QoS profile of `plan`", "reliable", choices=QOS_NAMES)
    observation_qos: str = param("QoS profile of `observation`", "reliable", choices=QOS_NAMES)
    markers_qos: str = param("QoS profile of `viz/markers`", "reliable", choices=QOS_NAMES)
    overlay_qos: str = param("QoS profile of `viz/plan_overlay` (reliable also serves best-effort viewers)",
                             "reliable", choices=QOS_NAMES)
    diagnostics_period: float = param("period of the /diagnostics summary, s", 1.0, min=0.05, max=60.0)
    watcher_check_period: float = param(
        "how often the node checks whether anyone watches the overlay (it subscribes to `observation` only "
        "then), s", 0.5, min=0.01, max=60.0)

    def __post_init__(self) -> None:
        validate(self)
