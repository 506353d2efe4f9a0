"""Keyframe -> planner sample: prompt (images + instruction) and response tokens.

Response, the text a target learns to write and the drafter learns to fill:

    "<sub-task>. " [<tool_call>{"name":"atomic_decoding","arguments":{"block_size":B}}</tool_call> <block>]... <eos>

one tool call + block per primitive: ALOHA one `dual_3d` block (both arms,
metres), Franka the cube's `box` then a `robot_2d3d` block,
driving one `drive_2d3d` block. The prompt is built only by
`PlannerModel.encode`, so training sees exactly what the planner feeds.
Metric coordinates are quantised with the model's own ranges (`fit_ranges`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from plan_stack.data.episodes import Keyframe
from plan_stack.planning import layouts as L
from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens
from plan_stack.planning.quantisation import Ranges
from plan_stack.planning.tool_call import tool_call_text
from plan_stack.robots import LearningSpec

__all__ = ["primitives_of", "response_tokens", "make_sample", "KeyframeSamples", "fit_ranges", "mirrored", "SPACE"]

#: metric space and axes of each robot kind's 3D part
SPACE = {"dual_3d": ("robot", ("x", "y", "z")), "dual_2d3d": ("robot", ("x", "y", "z")),
         "robot_2d3d": ("robot", ("x", "y", "z")), "drive_2d3d": ("drive", ("x", "y"))}


def mirrored(kf: Keyframe) -> Keyframe:
    """The keyframe mirrored left to right: images flipped, lateral offsets (y) negated, pixel columns u ->
    W - 1 - u (a camera centred on the ego's axis, principal point at (W - 1) / 2). For ground paths only:
    the road is symmetric about its centre line and so is the expert, so the mirrored scene is one the
    expert could have driven; an arm scene is not symmetric."""
    if any(p.shape[1] != 3 or np.any(p[:, 2] != 0) for p in kf.points):
        raise ValueError(f"{kf.episode} keyframe {kf.index}: mirroring is for ground paths (z = 0)")
    w = kf.camera_size[0]
    return Keyframe(
        f"{kf.episode}:mirrored", kf.seed, kf.index, kf.t_s, kf.instruction, kf.subtask,
        [np.ascontiguousarray(im[:, ::-1]) for im in kf.images],
        [p * np.array([1.0, -1.0, 1.0]) for p in kf.points],
        [np.stack([(w - 1) - uv[:, 0], uv[:, 1]], axis=1) for uv in kf.uv],
        {name: ((w - 1) - b[2], b[1], (w - 1) - b[0], b[3]) for name, b in kf.boxes.items()},
        kf.camera_size)


def primitives_of(kf: Keyframe, spec: LearningSpec) -> list[tuple[L.Layout, list[PrimitiveFields]]]:
    """The ground-truth primitives of a keyframe in response order (layout, one field set per arm)."""
    out: list[tuple[L.Layout, list[PrimitiveFields]]] = []
    for obj in spec.box_objects:
        box = kf.boxes.get(obj)
        if box is not None:
            out.append((L.make_layout("box"), [PrimitiveFields("box", uv=tuple(box))]))
    p = len(kf.points[0])
    layout = L.make_layout(spec.kind, p)
    prims = [PrimitiveFields(L.KINDS[spec.kind][2], arm=arm, points=tuple(map(tuple, pts.tolist())),
                               uv=tuple(uv.reshape(-1).tolist()))
             for arm, pts, uv in zip(spec.arms, kf.points, kf.uv)]
    out.append((layout, prims))
    return out


def response_tokens(target: Any, kf: Keyframe, spec: LearningSpec,
                    ranges: Ranges | None = None) -> tuple[list[int], list[tuple[int, L.Layout]]]:
    """Response ids (ending in EOS) and the (start index, layout) of every primitive block."""
    tok = target.tokenizer
    ids = tok.encode(f"{kf.subtask.strip()}. ", add_special_tokens=False)
    spans: list[tuple[int, L.Layout]] = []
    for layout, prims in primitives_of(kf, spec):
        ids += tok.encode(tool_call_text(layout.block_size), add_special_tokens=False)
        spans.append((len(ids), layout))
        ids += fields_to_tokens(target.vocab, layout, prims, kf.camera_size, ranges)
    ids.append(tok.eos_token_id)
    return ids, spans


def make_sample(model: Any, kf: Keyframe, spec: LearningSpec, images: Sequence[np.ndarray] | None = None):
    """A `planning.training.drafter.Sample` of `kf` for a `PlannerModel` (its manifest's ranges and prompt)."""
    from plan_stack.planning.training.drafter import Sample

    frames = [list(kf.images if images is None else images)]
    prompt = model.encode(kf.instruction, frames)
    response, spans = response_tokens(model.target, kf, spec, model.ranges)
    return Sample(prompt, response, spans)


class KeyframeSamples(Sequence):
    """`make_sample` of each keyframe, built when a training batch reads it and then dropped.

    A built sample holds its images as the processor's float patches, 8 times their uint8 pixels (301 KB a
    112 px driving frame): the 57k keyframes of the driving drafter's last on-policy round, built up front,
    would need 17 GB of this machine's 23 (that round swapped). Building is deterministic, so a sample read
    twice is the same sample.
    """

    def __init__(self, model: Any, keyframes: Sequence[Keyframe], spec: LearningSpec):
        self.model, self.keyframes, self.spec = model, keyframes, spec

    def __len__(self) -> int:
        return len(self.keyframes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return make_sample(self.model, self.keyframes[i], self.spec)


def fit_ranges(keyframes: Sequence[Keyframe], spec: LearningSpec, margin: float = 0.05,
               grid: float = 0.05) -> tuple[dict, dict]:
    """(coordinate_ranges, workspace) of a robot from its training keyframes.

    workspace: per axis the observed [min, max] widened by `margin`; ranges:
    the workspace widened by another `margin` and rounded outward to `grid`
    (the quantiser's 1000 bins then cover the reachable space only, e.g. ~1 mm
    bins instead of 1 cm over the fixed +-5 m).
    """
    space, axes = SPACE[spec.kind]
    pts = np.concatenate([p for kf in keyframes for p in kf.points])
    ranges: dict[str, dict[str, list[float]]] = {space: {}}
    workspace: dict[str, dict[str, list[float]]] = {space: {}}
    for i, axis in enumerate(axes):
        lo, hi = float(pts[:, i].min()) - margin, float(pts[:, i].max()) + margin
        workspace[space][axis] = [round(lo, 4), round(hi, 4)]
        ranges[space][axis] = [math.floor((lo - margin) / grid) * grid, math.ceil((hi + margin) / grid) * grid]
        ranges[space][axis] = [round(v, 4) for v in ranges[space][axis]]
    return ranges, workspace
