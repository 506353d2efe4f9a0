"""A planner model directory: the frozen target, its drafter and a manifest.

This is the one contract between training (`plan-stack train`), the planner
node, evaluation and benchmarks. Layout of `models/<robot>/` (or any local
directory in the same format, e.g. a user's own fine-tuned Qwen3-VL):

    target/          transformers Qwen3-VL directory (config, safetensors, tokenizer
                     with the primitive tokens, image processor): `save_target`
    drafter/         config.json + model.safetensors: `save_drafter` (optional:
                     without it only the `ar` decoder is available)
    action_head/     plain/ and rtc/ heads of the chunker (arms only)
    manifest.json    what the model expects and how it was made (keys below)

Manifest keys read here (everything else is provenance: data seeds, counts,
configs, steps, git commit, metrics at save time):

    cameras          Observation camera names fed to the model, in prompt order
    image_size       [width, height] of each image given to the model
    history_frames   observations per prompt the model was trained with (K)
    instruction      default instruction
    primitive_kinds  layout kinds the model emits (planning.layouts kinds)
    budget           output token budget per plan
    coordinate_ranges  the model's metric quantisation ranges, {space: {axis: [lo, hi]}}
                     laid over `quantisation.RANGES` (absent: the fixed defaults)
    workspace        {space: {axis: [lo, hi]}}: where a plausible 3D waypoint lies
                     (the VFlash gate's geometric check; absent: no box check)
    gate_max_step_m  the gate's bound between consecutive 3D waypoints (absent/0: none)
    gate_max_step_change_m  the gate's bound on the change between consecutive steps
                     (|second difference| of the 3D waypoints; absent/0: none)
    text_block       the DFlash text block the decoder uses (absent/0: the drafter's trained block);
                     lossless, chosen for speed on validation keyframes

The prompt is, in time order, each observation's images (cameras in manifest
order) followed by `prompt_text(instruction)`; training and the planner both
build it with `PlannerModel.encode`, so they cannot disagree.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plan_stack.config import ConfigError
from plan_stack.manifests import read_json_manifest
from plan_stack.planning.decoders import DecoderConfig, Decoding
from plan_stack.planning.errors import PlanningError

__all__ = ["MANIFEST", "PlannerModel", "prompt_text", "load_planner_model", "save_planner_model",
           "read_manifest"]

MANIFEST = "manifest.json"
TARGET_DIR = "target"
DRAFTER_DIR = "drafter"
#: manifest keys the planner needs, with their defaults when a key is absent
_DEFAULTS: dict[str, Any] = {
    "cameras": [],
    "image_size": None,
    "history_frames": 1,
    "instruction": "",
    "primitive_kinds": [],
    "budget": 256,
    "coordinate_ranges": {},
    "workspace": {},
    "gate_max_step_m": 0.0,
    "gate_max_step_change_m": 0.0,
    "text_block": 0,
}


def prompt_text(instruction: str) -> str:
    """The text part of a prompt (after the images)."""
    return f"{instruction.strip()}\n"


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """manifest.json of a model directory, with defaults filled in; raises PlanningError naming the problem."""
    file = Path(path) / MANIFEST
    raw = read_json_manifest(path, MANIFEST, PlanningError, "not a planner model directory")
    manifest = {**_DEFAULTS, **raw}
    size = manifest["image_size"]
    if size is not None and (not isinstance(size, list) or len(size) != 2
                             or not all(isinstance(v, int) and v > 0 for v in size)):
        raise PlanningError(f"{file}: image_size must be [width, height] in pixels, got {size!r}")
    if not isinstance(manifest["history_frames"], int) or manifest["history_frames"] < 1:
        raise PlanningError(f"{file}: history_frames must be an integer >= 1")
    from plan_stack.planning.errors import LayoutError
    from plan_stack.planning.quantisation import merge_ranges

    for key in ("coordinate_ranges", "workspace"):
        try:
            merge_ranges(manifest[key] or {})
        except (LayoutError, TypeError, ValueError, AttributeError) as exc:
            raise PlanningError(f"{file}: {key}: {exc}") from None
    return manifest


@dataclasses.dataclass
class PlannerModel:
    """A loaded model directory (one request at a time, like its TargetAdapter)."""

    path: Path
    target: Any  # planning.target.TargetAdapter
    drafter: Any  # planning.drafter.Drafter | None
    manifest: dict[str, Any]

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self.manifest["cameras"])

    @property
    def image_size(self) -> tuple[int, int] | None:
        size = self.manifest["image_size"]
        return None if size is None else (int(size[0]), int(size[1]))

    def required_image_size(self) -> tuple[int, int]:
        """The images' (width, height); PlanningError for a model without one (it reads no images)."""
        size = self.image_size
        if size is None:
            raise PlanningError(f"{self.path}: the manifest has no image_size (the model reads no images)")
        return size

    @property
    def ranges(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Coordinate ranges the model was trained with (`quantisation.RANGES` + manifest overrides)."""
        from plan_stack.planning.quantisation import merge_ranges

        return merge_ranges(self.manifest.get("coordinate_ranges") or {})

    def decoder(self, config: DecoderConfig | None = None, decodings: Sequence[str] | None = None) -> Any:
        """A `planning.decoding.Decoder` over this target and drafter, decoding with the model's
        coordinate ranges, plausibility gate and text block (the manifest's `gate_max_step_m`,
        `gate_max_step_change_m` and `text_block` apply where `config` leaves them at 0).

        `config` None: the manifest's budget, and VFlash (AR when the directory has no drafter).
        `decodings`: the decodings its `generate` will be asked for (default: the config's). This is where
        the drafter requirement is checked: a decoding that needs a drafter, from a directory without
        drafter/, is a ConfigError naming `decoder`."""
        import dataclasses as dc

        from plan_stack.planning.decoding import ALGORITHMS, Decoder

        m = {**_DEFAULTS, **self.manifest}  # an in-memory manifest (training) may leave keys out
        if config is None:
            config = DecoderConfig(decoder=Decoding.AR if self.drafter is None else Decoding.VFLASH,
                                   budget=int(m["budget"]))
        if self.drafter is None:
            for name in (config.decoder,) if decodings is None else decodings:
                decoding = Decoding(name)
                if ALGORITHMS[decoding].drafts:
                    raise ConfigError(f"decoder: {decoding.value!r} needs a drafter, and the model directory has "
                                      "none (use ar)")
        for key in ("gate_max_step_m", "gate_max_step_change_m", "text_block"):
            value = m[key] or 0
            if value > 0 and getattr(config, key) == 0:
                config = dc.replace(config, **{key: type(getattr(config, key))(value)})
        return Decoder(self.target, self.drafter, config, ranges=m["coordinate_ranges"] or None,
                       workspace=m["workspace"] or None)

    def encode(self, instruction: str, frames: Sequence[Sequence[np.ndarray]] = ()) -> Any:
        """Prompt for `frames` ([K][cameras] HxWx3 uint8, oldest first) and an instruction."""
        images = [im for frame in frames for im in frame]
        return self.target.encode_prompt(prompt_text(instruction), images)


def load_planner_model(path: str | os.PathLike, *, dtype: Any = None) -> PlannerModel:
    """Load target (+ drafter when present) and manifest from a local directory, offline."""
    from plan_stack.planning.drafter import load_drafter
    from plan_stack.planning.target_build import load_target

    root = Path(path)
    if not root.is_dir():
        raise PlanningError(f"{path}: model directory does not exist")
    manifest = read_manifest(root)
    target = load_target(root / TARGET_DIR, dtype=dtype)
    drafter = load_drafter(root / DRAFTER_DIR, target) if (root / DRAFTER_DIR).is_dir() else None
    return PlannerModel(root, target, drafter, manifest)


def save_planner_model(path: str | os.PathLike, target: Any, drafter: Any, manifest: dict[str, Any]) -> Path:
    """Write target/, drafter/ (when given) and manifest.json; returns the directory."""
    from plan_stack.planning.drafter import save_drafter
    from plan_stack.planning.target_build import save_target

    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    save_target(target, root / TARGET_DIR)
    if drafter is not None:
        save_drafter(drafter, root / DRAFTER_DIR)
    (root / MANIFEST).write_text(json.dumps({**_DEFAULTS, **manifest}, indent=1, sort_keys=True) + "\n")
    read_manifest(root)  # what was written must read back
    return root
