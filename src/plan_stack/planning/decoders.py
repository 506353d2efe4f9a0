"""The decoding algorithms and their options, declared once (torch-free: configs and CLIs import it cheaply).

`Decoding` names the algorithms (`planning.decoding` says what each does and holds the table that runs
them); `DecoderConfig` is the decoder's options. The planner's `runtime.RuntimeConfig` carries the
choice as a node parameter: it shares the one declaration, `DecoderChoice`, with `DecoderConfig`
(a config field cannot hold another config, so the node's parameters stay flat). Command lines take
their choices from `DECODINGS`.
"""
from __future__ import annotations

import dataclasses
import enum

from plan_stack.config import ConfigError, param, validate

__all__ = ["Decoding", "DECODINGS", "DecoderChoice", "DecoderConfig", "DEFAULT_TEXT_BLOCK"]


class Decoding(enum.StrEnum):
    AR = "ar"  # one target forward per token
    DFLASH = "dflash"  # speculative text blocks from the drafter, verified by one target pass each
    VFLASH = "vflash"  # DFlash, plus whole primitives drafted in one pass and checked by a gate


#: the decodings' names, for argparse `choices` (its refusal quotes each choice's repr: the name, not the member)
DECODINGS = tuple(d.value for d in Decoding)
DEFAULT_TEXT_BLOCK = 16  #: text block of a drafter that does not say what it was trained with


@dataclasses.dataclass(frozen=True)
class DecoderChoice:
    """The decoding algorithm: the first field of `DecoderConfig` and of the planner's `RuntimeConfig`."""

    decoder: Decoding = param("decoding algorithm", Decoding.VFLASH)


@dataclasses.dataclass(frozen=True)
class DecoderConfig(DecoderChoice):
    """Decoding options shared by the planner node, the CLI and the benchmark."""

    budget: int = param("maximum number of output tokens per plan", 256, min=1, max=65536)
    text_block: int = param("DFlash text block size (1 anchor + proposals); 0: the model's (manifest text_block, "
                            "else the drafter's trained block)", 0, min=0, max=256)
    constrain_draft: bool = param("restrict drafted primitive positions to legal tokens", True)
    box_guard: float = param(
        "box confidence guard: min p_target(draft)/max p_target per coordinate; 0 disables", 0.0, min=0.0, max=1.0)
    robot_frame_id: str = param("frame of robot primitives (camera optical frame)", "camera_optical_frame")
    drive_frame_id: str = param("frame of driving primitives (ego frame)", "base_link")
    drive_horizon_s: float = param("time spanned by driving waypoints (s)", 4.0, min=0.0)
    gate_max_step_m: float = param(
        "plausibility gate: max distance between consecutive 3D waypoints of a drafted primitive (m); 0 disables",
        0.0, min=0.0)
    speculation_probe_every: int = param(
        "DFlash steps of a path (text, a primitive kind) whose speculative steps cost more per committed token than "
        "AR steps run as AR steps, speculating again after this many (doubling while it still does not pay); "
        "0: always speculate, as the DFlash paper", 8, min=0)
    gate_max_step_change_m: float = param(
        "plausibility gate: max change between consecutive steps (|second difference|) of a drafted primitive's "
        "3D waypoints (m); 0 disables", 0.0, min=0.0)

    def __post_init__(self) -> None:
        validate(self)
        if self.text_block == 1:
            raise ConfigError("text_block must be 0 (the model's) or >= 2 (an anchor and a proposal), got 1")
