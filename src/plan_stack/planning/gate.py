"""The geometric part of the VFlash gate: is a schema-valid drafted primitive a plausible path?

The schema part (`grammar.check_block`) knows only tokens; a drafter that never learnt a scene can fill
every slot legally and still throw a waypoint metres off the path. This check reads the drafted 3D
coordinates back into metres (the model's quantisation ranges) and bounds where they lie and how they
move; a draft that fails it is regenerated with constrained AR like one that fails the schema.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.quantisation import Ranges

__all__ = ["PlausibilityGate"]


class PlausibilityGate:
    """Bounds on a drafted primitive's 3D waypoints; `plausible(layout, block)` applies them.

    `ranges`: the model's coordinate ranges (`quantisation.merge_ranges`); `workspace`: per space and axis the
    box a plausible waypoint lies in (empty: none); `max_step_m` / `max_step_change_m`: bounds on consecutive
    waypoints and on consecutive steps (0 disables each).
    """

    def __init__(self, vocab: V.Vocab, ranges: Ranges, workspace: dict[str, dict[str, tuple[float, float]]],
                 max_step_m: float, max_step_change_m: float):
        self.vocab, self.ranges, self.workspace = vocab, ranges, workspace
        self.max_step_m, self.max_step_change_m = max_step_m, max_step_change_m
        self._geometry_cache: dict[tuple[str, int], list] = {}  # `_geometry` per layout

    def plausible(self, layout: L.Layout, block: Sequence[int]) -> bool:
        """Every 3D waypoint of a (schema-valid) block [B] inside the workspace box, consecutive waypoints at
        most `max_step_m` apart, and consecutive steps differing by at most `max_step_change_m` (a waypoint
        thrown metres ahead and the next one back on the path: each step alone can be a plausible length).
        A coordinate slot holding another token is never plausible, even with every bound off."""
        max_step, max_change = self.max_step_m, self.max_step_change_m
        tokens = np.asarray(block, dtype=np.int64)
        for positions, lo, step, box in self._geometry(layout):
            bins = self.vocab.coord_bins(tokens[positions])
            if bins is None:
                return False  # not schema-valid: a coordinate slot holds another token
            vals = lo + step * bins.reshape(-1, len(lo))  # [waypoints, axes]
            for ai, (b_lo, b_hi) in box:
                if not bool(((vals[:, ai] >= b_lo) & (vals[:, ai] <= b_hi)).all()):
                    return False
            d1 = np.diff(vals, axis=0)
            if max_step > 0 and len(d1) and float(np.linalg.norm(d1, axis=1).max()) > max_step:
                return False
            if max_change > 0 and len(d1) > 1 and float(np.linalg.norm(np.diff(d1, axis=0), axis=1).max()) > max_change:
                return False
        return True

    def _geometry(self, layout: L.Layout) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, list]]:
        """Per 3D part of a layout (cached): block positions of its coordinates, per axis the range's low
        end and bin width, and the workspace bounds as (axis index, (low, high))."""
        key = (layout.kind, layout.waypoints)
        cached = self._geometry_cache.get(key)
        if cached is not None:
            return cached
        out = []
        for pi, part in enumerate(layout.parts):
            if part.space == "image":
                continue
            rng = self.ranges[part.space]
            positions = np.array([j for j, s in enumerate(layout.slots) if s.part == pi and s.token is None],
                                 dtype=np.int64)
            lo = np.array([rng[a][0] for a in part.axes])
            step = np.array([(rng[a][1] - rng[a][0]) / V.N_BINS for a in part.axes])
            space_box = self.workspace.get(part.space, {})
            box = [(ai, space_box[a]) for ai, a in enumerate(part.axes) if a in space_box]
            out.append((positions, lo, step, box))
        self._geometry_cache[key] = out
        return out
