"""Configs of the ingest stage: the sync policy (library) and the node's I/O.

Two dataclasses so that the ROS-free `Synchronizer` takes only what it uses;
the node declares both (flat parameter names the launch files and robot configs use: `camera_names`,
`output_size`, `max_spread`, `max_age`, `queue_size`).
"""
from __future__ import annotations

import dataclasses

from plan_stack.config import ConfigError, param, validate

__all__ = ["SyncConfig", "IngestConfig", "POLICIES", "REFERENCES", "JOINT_MODES", "RESIZE_MODES"]

#: `approximate`: the ROS C++ message_filters ApproximateTime policy;
#: `latest`: naive "latest frame of each stream" baseline (benchmarks only).
POLICIES = ("approximate", "latest")
#: Which stamp of a set is its reference time (Observation.header.stamp).
REFERENCES = ("newest", "oldest", "mean")
#: How the joint state at the reference stamp is obtained.
JOINT_MODES = ("interpolate", "nearest", "none")
#: How a frame is brought to `output_size`.
RESIZE_MODES = ("crop", "stretch", "pad")


@dataclasses.dataclass(frozen=True)
class SyncConfig:
    """Matching rules for N camera streams plus one joint-state stream."""

    camera_names: tuple[str, ...] = param(
        "camera names, in Observation order (topics cameras/<name>/image_raw)", read_only=True)
    max_spread: float = param(
        "largest allowed spread (newest - oldest stamp) of the frames in one set, s", 0.015, min=0.0, max=10.0)
    max_age: float = param(
        "a set never contains a frame older than this relative to the newest camera frame, s",
        0.25, min=0.001, max=60.0)
    queue_size: int = param("frames kept per camera stream while waiting for partners", 10, min=1, max=1000,
                            read_only=True)
    min_interval: float | tuple[float, ...] = param(
        "lower bound on the stamp interval between two frames of a camera (scalar or per camera), s; "
        "lets a set be published as soon as it is provably the best one instead of waiting for the next "
        "frame (0: wait; message_filters' inter_message_lower_bound)", 0.0, min=0.0, max=10.0)
    policy: str = param("matching policy", "approximate", choices=POLICIES)
    reference: str = param("which stamp of a set is its reference time", "mean", choices=REFERENCES)
    joint_mode: str = param("joint state at the reference stamp: interpolated, nearest sample, or none",
                            "interpolate", choices=JOINT_MODES)
    joint_names: tuple[str, ...] = param(
        "joints to report, in this order (empty: the names of the first valid joint state)", ())
    joint_tolerance: float = param(
        "joint samples used for a set must lie within this distance of its reference stamp, s",
        0.02, min=0.0, max=10.0)
    joint_buffer_size: int = param("joint-state samples kept for interpolation", 400, min=2, max=100000,
                                   read_only=True)
    max_stamp_offset: float = param(
        "inputs stamped further than this from the node clock (future or past) are dropped, s "
        "(checked only while the clock runs)", 2.0, min=0.001, max=1.0e6)
    clock_jump_threshold: float = param(
        "a stamp this much older than its stream's newest (or a clock going back this much) is a "
        "clock reset: all state is cleared, s", 1.0, min=0.001, max=1.0e6)

    def __post_init__(self) -> None:
        validate(self)
        n = len(self.camera_names)
        if not 1 <= n <= 8:
            raise ConfigError(f"camera_names: need 1 to 8 cameras, got {n}")
        if len(set(self.camera_names)) != n or any(not c for c in self.camera_names):
            raise ConfigError(f"camera_names: names must be unique and non-empty, got {list(self.camera_names)}")
        if isinstance(self.min_interval, tuple) and len(self.min_interval) != n:
            raise ConfigError(
                f"min_interval: {len(self.min_interval)} values for {n} cameras (give one or one per camera)")
        if len(set(self.joint_names)) != len(self.joint_names) or any(not j for j in self.joint_names):
            raise ConfigError(f"joint_names: names must be unique and non-empty, got {list(self.joint_names)}")
        if self.max_spread > self.max_age:
            raise ConfigError(f"max_spread: {self.max_spread} exceeds max_age {self.max_age}")
        if self.clock_jump_threshold < self.max_age:
            raise ConfigError(
                f"clock_jump_threshold: {self.clock_jump_threshold} is below max_age {self.max_age} "
                "(late frames within max_age would look like clock resets)")

    def min_interval_of(self, index: int) -> float:
        """Stamp interval lower bound of camera `index`, s."""
        mi = self.min_interval
        return mi[index] if isinstance(mi, tuple) else mi


@dataclasses.dataclass(frozen=True)
class IngestConfig:
    """What the ingest node does around the sync policy: I/O, decoding, health."""

    output_size: tuple[int, ...] = param("model input size [width, height], px", (224, 224), min=1, max=8192,
                                         read_only=True)
    resize_mode: str = param(
        "crop: centre-crop to the output aspect then resize; stretch: resize only; pad: letterbox",
        "crop", choices=RESIZE_MODES)
    compressed: bool = param(
        "subscribe sensor_msgs/CompressedImage (jpeg/png) on cameras/<name>/image_raw/compressed instead",
        False, read_only=True)
    image_qos: str = param("QoS profile of the camera subscriptions", "sensor",
                           choices=("sensor", "sensor_data", "reliable"), read_only=True)
    joint_qos: str = param("QoS profile of the joint_states subscription", "sensor",
                           choices=("sensor", "sensor_data", "reliable"), read_only=True)
    joint_queue_depth: int = param(
        "history depth of the joint_states subscription: absorbs bursts of joint states while a frame is "
        "processed; deeper only adds lag when the node cannot keep up", 10, min=1, max=10000, read_only=True)
    observation_qos: str = param("QoS profile of the observation publisher", "reliable",
                                 choices=("reliable", "sensor", "latched"), read_only=True)
    instruction: str = param("instruction copied into each Observation until one arrives on `instruction`", "")
    instruction_qos: str = param("QoS profile of the instruction (std_msgs/String) subscription", "latched",
                                 choices=("latched", "reliable"), read_only=True)
    camera_timeout: float | tuple[float, ...] = param(
        "a camera silent longer than this is an ERROR and stops Observation output (scalar or per camera), s",
        1.0, min=0.001, max=3600.0)
    joint_timeout: float = param(
        "joint_states silent longer than this is an ERROR and stops Observation output, s",
        0.5, min=0.001, max=3600.0)
    diagnostics_period: float = param("period of the /diagnostics summary, s", 1.0, min=0.01, max=60.0,
                                      read_only=True)

    def __post_init__(self) -> None:
        validate(self)
        if len(self.output_size) != 2:
            raise ConfigError(f"output_size: expected [width, height], got {list(self.output_size)}")

    def camera_timeout_of(self, index: int, n_cameras: int) -> float:
        """Silence timeout of camera `index`, s (checks the per-camera list length)."""
        ct = self.camera_timeout
        if isinstance(ct, tuple):
            if len(ct) != n_cameras:
                raise ConfigError(f"camera_timeout: {len(ct)} values for {n_cameras} cameras")
            return ct[index]
        return ct
