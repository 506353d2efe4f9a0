"""Configuration of the `planner` node (the model, where it runs, how often it plans); the library's own
settings are `planning.runtime.RuntimeConfig`."""
from __future__ import annotations

import dataclasses

from plan_stack.config import param, validate
from plan_stack.device import BACKENDS, DEVICES, DTYPES

__all__ = ["PlannerNodeConfig"]


@dataclasses.dataclass(frozen=True)
class PlannerNodeConfig:
    model_dir: str = param("planner model directory (target/, drafter/, manifest.json): a path, or a name under "
                           "the package's models/ folder (aloha, franka, drive)", read_only=True)
    replan_period_s: float = param("least time between the stamps of observations planned from (s); 0: plan "
                                   "whenever the worker is free", 0.0, min=0.0)
    max_observation_age_s: float = param("observations older than this by the node clock are not planned from (s)",
                                         1.0, min=0.0)
    request_timeout_s: float = param("longest a plan_request goal waits for its plan (s)", 30.0, min=0.1)
    torch_threads: int = param("torch CPU threads for the model (0 = leave torch's default)", 1, min=0)
    device: str = param("cpu, cuda, or auto (cuda when torch sees a GPU): where the target and drafter run",
                        "cpu", choices=DEVICES, read_only=True)
    dtype: str = param("auto (float32 on cpu, bf16/fp16 on cuda) or an explicit dtype", "auto", choices=DTYPES,
                       read_only=True)
    backend: str = param("what runs the drafter pass and the vision encoder: torch, onnx (onnxruntime) or "
                         "tensorrt; the target's KV-cached forward is always PyTorch", "torch", choices=BACKENDS,
                         read_only=True)
    engine_dir: str = param("exported models (`plan-stack export`) for backend onnx/tensorrt; empty: export the "
                            "model at start-up into a temporary directory", "", read_only=True)
    diagnostics_period_s: float = param("diagnostics republish period (s)", 1.0, min=0.01)
    stats_window: int = param("plans the latency percentiles and plans/s are computed over", 100, min=1)

    def __post_init__(self) -> None:
        validate(self)
