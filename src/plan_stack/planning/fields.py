"""Primitive blocks <-> the fields of `plan_stack/msg/Primitive` (metres and pixels, `<oof>` <-> NaN)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError
from plan_stack.planning.grammar import TokenSets, check_block
from plan_stack.planning.layouts import KINDS, Layout
from plan_stack.planning.quantisation import RANGES, Ranges, dequantise, quantise


@dataclasses.dataclass(frozen=True)
class PrimitiveFields:
    """Exactly the fields of plan_stack/msg/Primitive; a node copies them 1:1.

    points: metric (x, y, z) in frame_id (driving: z = 0); uv: flattened pixel
    pairs, NaN pair = out of frame; boxes: uv = (u1, v1, u2, v2).
    """

    kind: str
    arm: str = ""
    frame_id: str = ""
    points: tuple[tuple[float, float, float], ...] = ()
    uv: tuple[float, ...] = ()
    horizon_s: float = 0.0
    block_size: int = 0
    accepted_direct: bool = False
    fallback_from: int = -1


def _pixel_scale(box: bool, width: int, height: int) -> tuple[float, float]:
    """Pixels per normalised unit*1000: boxes divide by W, H; trajectories by W-1, H-1."""
    return (float(width), float(height)) if box else (float(width - 1), float(height - 1))


def fields_to_tokens(vocab: V.Vocab, layout: Layout, prims: Sequence[PrimitiveFields],
                     image_size: tuple[int, int], ranges: Ranges | None = None) -> list[int]:
    """Quantise one layout's primitives (one per arm) into block tokens [B] (start token first).

    `ranges` are the model's metric ranges (default `RANGES`; see
    `merge_ranges`). Metric values outside the range saturate at the range ends; pixel values
    outside the image (or NaN) become an `<oof>` pair; box corners are clipped
    to the image and forced to u1 < u2, v1 < v2 after quantisation.
    """
    arms = layout.arms
    if len(prims) != arms:
        raise LayoutError(f"{layout.kind} needs {arms} primitive(s), got {len(prims)}")
    width, height = image_size
    per_arm = len(layout.parts) // arms
    out: list[int] = []
    for pi, part in enumerate(layout.parts):
        prim = prims[pi // per_arm]
        out.append(vocab[part.start])
        if part.box:
            if len(prim.uv) != 4:
                raise LayoutError(f"box needs uv = (u1, v1, u2, v2), got {len(prim.uv)} values")
            su, sv = _pixel_scale(True, width, height)
            ks = [quantise(min(max(prim.uv[i], 0.0), (su, sv)[i % 2]) * V.N_BINS / (su, sv)[i % 2], 0, V.N_BINS)
                  for i in range(4)]
            for a in (0, 1):
                ks[a] = min(ks[a], V.N_BINS - 1)
                ks[a + 2] = max(ks[a + 2], ks[a] + 1)
            out.extend(vocab[V.COORD_TOKENS[k]] for k in ks)
        elif part.space == "image":
            uv = prim.uv
            if len(uv) != 2 * layout.waypoints:
                raise LayoutError(f"{layout.kind} needs {2 * layout.waypoints} uv values, got {len(uv)}")
            su, sv = _pixel_scale(False, width, height)
            for w in range(layout.waypoints):
                u, v = uv[2 * w], uv[2 * w + 1]
                if not (math.isfinite(u) and math.isfinite(v)) or not (0 <= u <= su and 0 <= v <= sv):
                    out.extend([vocab[V.OOF]] * 2)
                else:
                    out.append(vocab[V.COORD_TOKENS[quantise(u * V.N_BINS / su, 0, V.N_BINS)]])
                    out.append(vocab[V.COORD_TOKENS[quantise(v * V.N_BINS / sv, 0, V.N_BINS)]])
        else:
            if len(prim.points) != layout.waypoints:
                raise LayoutError(f"{layout.kind} needs {layout.waypoints} points, got {len(prim.points)}")
            space = (ranges or RANGES)[part.space]
            for p in prim.points:
                for ai, axis in enumerate(part.axes):
                    lo, hi = space[axis]
                    out.append(vocab[V.COORD_TOKENS[quantise(float(p[ai]), lo, hi)]])
        out.append(vocab[part.end])
    if len(out) != layout.block_size:  # pragma: no cover - layout arithmetic guard
        raise LayoutError("internal: block length mismatch")
    return out


def tokens_to_fields(vocab: V.Vocab, layout: Layout, tokens: Sequence[int], image_size: tuple[int, int], *,
                     frame_id: str = "", horizon_s: float = 0.0, sets: TokenSets | None = None,
                     ranges: Ranges | None = None) -> list[PrimitiveFields]:
    """Dequantise a block [B] (start token first) into one PrimitiveFields per arm.

    The block must be valid (see `check_block`); `<oof>` pairs become NaN pairs.
    """
    tokens = [int(t) for t in tokens]
    if len(tokens) != layout.block_size or tokens[0] != vocab[layout.start_token]:
        raise LayoutError(f"{layout.kind} block needs {layout.block_size} tokens starting with {layout.start_token}")
    sets = sets or TokenSets(vocab)
    bad = check_block(sets, layout, tokens[1:])
    if bad:
        raise LayoutError(f"{layout.kind} block has an illegal token at position {bad}")
    width, height = image_size
    arms = layout.arms
    per_arm = len(layout.parts) // arms
    _, _, msg_kind = KINDS[layout.kind]
    uv: list[list[float]] = [[] for _ in range(arms)]
    pts: list[list[list[float]]] = [[] for _ in range(arms)]
    for slot, tok in zip(layout.slots, tokens):
        if slot.token is not None:
            continue
        arm = slot.part // per_arm
        part = layout.parts[slot.part]
        if slot.space == "image":
            k = vocab.coord_value(tok)
            su, sv = _pixel_scale(part.box, width, height)
            scale = su if slot.axis == "u" else sv
            uv[arm].append(float("nan") if k is None else k * scale / V.N_BINS)
        else:
            lo, hi = (ranges or RANGES)[slot.space][slot.axis]
            k = vocab.coord_value(tok)
            if k is None:  # pragma: no cover - check_block above admits only coordinates here
                raise LayoutError(f"{layout.kind} block has a non-coordinate token in a metric slot")
            value = dequantise(k, lo, hi)
            if slot.axis == part.axes[0]:
                pts[arm].append([])
            pts[arm][-1].append(value)
    names = ("left", "right") if arms == 2 else ("",)
    horizon = horizon_s if layout.kind.startswith("drive") else 0.0
    out = []
    for a in range(arms):
        points = tuple((p[0], p[1], p[2] if len(p) > 2 else 0.0) for p in pts[a])
        out.append(PrimitiveFields(kind=msg_kind, arm=names[a], frame_id=frame_id, points=points,
                                   uv=tuple(uv[a]), horizon_s=horizon, block_size=layout.block_size))
    return out
