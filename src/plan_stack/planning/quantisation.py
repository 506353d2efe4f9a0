"""Coordinate quantisation: metric and image values <-> the 1001 coordinate bins.

One range (lo, hi) per coordinate space and axis; a model may lay its own
ranges over the defaults (`merge_ranges`), and decoding must use the same.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError

#: value ranges (lower, upper) per coordinate space and axis
RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "robot": {"x": (-5.0, 5.0), "y": (-5.0, 5.0), "z": (0.0, 10.0)},  # camera optical frame, m
    "drive": {"x": (-10.0, 200.0), "y": (-50.0, 50.0)},  # ego frame, m
    "image": {"u": (0.0, 1000.0), "v": (0.0, 1000.0)},  # normalised image coordinates
}


Ranges = Mapping[str, Mapping[str, Sequence[float]]]


def merge_ranges(overrides: Ranges | None) -> dict[str, dict[str, tuple[float, float]]]:
    """`RANGES` with a model's own ranges (e.g. manifest `coordinate_ranges`) laid over it.

    A model trained with tighter ranges (same token layout) spends its 1000
    bins on the space its robot reaches; decoding must use the same ranges.
    Raises LayoutError for unknown spaces/axes or lo >= hi.
    """
    out = {space: dict(axes) for space, axes in RANGES.items()}
    for space, axes in (overrides or {}).items():
        if space not in out or space == "image":
            raise LayoutError(f"coordinate range space must be one of robot, drive; got {space!r}")
        for axis, pair in axes.items():
            if axis not in out[space]:
                raise LayoutError(f"{space} has no axis {axis!r} (axes: {sorted(out[space])})")
            lo, hi = (float(v) for v in pair)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise LayoutError(f"{space}.{axis} range must have finite lo < hi, got {pair!r}")
            out[space][axis] = (lo, hi)
    return out


def quantise(q: float, lo: float, hi: float) -> int:
    """k = floor(1000 (q - lo)/(hi - lo) + 1/2), clipped to [0, 1000] (out-of-range values saturate)."""
    if not math.isfinite(q):
        raise LayoutError(f"cannot quantise non-finite value {q!r}")
    k = math.floor(V.N_BINS * (q - lo) / (hi - lo) + 0.5)
    return min(max(k, 0), V.N_BINS)


def dequantise(k: int, lo: float, hi: float) -> float:
    """q = lo + k (hi - lo)/1000."""
    if not 0 <= k <= V.N_BINS:
        raise LayoutError(f"coordinate bin {k} outside 0..{V.N_BINS}")
    return lo + k * (hi - lo) / V.N_BINS
