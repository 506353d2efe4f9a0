"""Configuration of the `chunker` node: the action head it runs, where, on which joints in which units."""
from __future__ import annotations

import dataclasses

from plan_stack.config import ConfigError, param, validate
from plan_stack.device import BACKENDS, DEVICES, DTYPES

__all__ = ["ChunkerConfig"]


@dataclasses.dataclass(frozen=True)
class ChunkerConfig:
    """Parameters of the `chunker` node (the RTC schedule's are `actions.rtc.runtime.RtcConfig`)."""

    checkpoint: str = param("trained action head directory (config.json + model.safetensors): a path, or a "
                            "name under the package's models/ folder such as aloha/action_head/rtc",
                            read_only=True)
    joint_names: tuple[str, ...] = param("joints of each chunk row, in the head's action order", read_only=True)
    # The head's state is in its training units (the stack's, e.g. a Franka gripper width in m) while the
    # Observation carries the robot's joint_states (the two finger joints): read each channel from one
    # measured joint and map it, q_head = (q - state_offset) * state_scale, as the stitcher does.
    state_joint_names: tuple[str, ...] = param(
        "the Observation joint each joint_names channel is read from, one per channel (empty = joint_names)",
        (), read_only=True)
    state_offset: tuple[float, ...] = param(
        "Observation joint units -> head state units: q = (q_measured - state_offset) * state_scale, one value "
        "per channel (empty = identity)", (), read_only=True)
    state_scale: tuple[float, ...] = param("see state_offset (empty = identity)", (), read_only=True)
    max_plan_age_s: float = param("plan features older than this (vs. the observation stamp) are stale (s)",
                                  2.0, min=0.0)
    num_steps: int = param("Euler steps per chunk (0 = the checkpoint's)", 0, min=0)
    fast: bool = param("run the head as a frozen TorchScript trace (backend torch on the CPU; not used by "
                       "test_time_vjp)", True)
    backend: str = param("what runs the flow step: torch (eager or traced), onnx (onnxruntime) or tensorrt",
                         "torch", choices=BACKENDS, read_only=True)
    device: str = param("cpu, cuda, or auto (cuda when torch sees a GPU)", "cpu", choices=DEVICES, read_only=True)
    dtype: str = param("auto (float32 on cpu, bf16/fp16 on cuda) or an explicit dtype", "auto", choices=DTYPES,
                       read_only=True)
    engine_dir: str = param("exported models (`plan-stack export`) for backend onnx/tensorrt; empty: export the "
                            "checkpoint at start-up into a temporary directory", "", read_only=True)
    torch_threads: int = param("torch CPU threads for inference (0 = leave torch's default)", 1, min=0)
    seed: int = param("seed of the sampling noise", 0, min=0)
    noise_scale: float = param("scale of the flow's start noise: 1 samples the head's distribution, 0 gives one "
                               "deterministic chunk per state and plan (near its mode)", 1.0, min=0.0, max=1.0,
                               read_only=True)
    observation_qos: str = param("QoS of `observation` (depth forced to 1: only the latest matters)",
                                 "reliable", choices=["reliable", "sensor", "sensor_data"])
    diagnostics_period_s: float = param("diagnostics republish period (s)", 1.0, min=0.01)

    def __post_init__(self) -> None:
        validate(self)
        if not self.joint_names:
            raise ConfigError("joint_names: at least one joint is needed")
        n = len(self.joint_names)
        for name in ("state_joint_names", "state_offset", "state_scale"):
            if len(getattr(self, name)) not in (0, n):
                raise ConfigError(f"{name}: {len(getattr(self, name))} values for {n} joint_names (give one per "
                                  "joint, or none)")
        if len(self.state_offset) != len(self.state_scale):
            raise ConfigError("state_offset/state_scale: give both with one value per joint, or neither")
