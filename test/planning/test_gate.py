"""The VFlash gate's geometric check: workspace box, step bound, bound on the change between steps."""
from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.gate import PlausibilityGate
from plan_stack.planning.grammar import check_block
from plan_stack.planning.quantisation import merge_ranges


def test_the_gate_bounds_the_change_between_steps(vocab):
    """A waypoint thrown metres ahead and the next back on the path: every step is a plausible length,
    the change between two steps is not (the driving drafter's failure from standstill)."""
    from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens

    layout = L.make_layout("drive_2d3d", 8)
    ranges = {"drive": {"x": [0.0, 34.0], "y": [-3.0, 3.0]}}
    x = np.array([0.25, 1.0, 2.25, 4.0, 6.25, 9.0, 12.25, 16.0])  # from standstill at 2 m/s^2, 0.5 s apart

    def block(xs):
        pts = tuple((float(v), 0.0, 0.0) for v in xs)
        return fields_to_tokens(vocab, layout, [PrimitiveFields(L.KINDS["drive_2d3d"][2], arm="",
                                points=pts, uv=(0.0,) * 16)], (112, 112), ranges)

    thrown = x.copy()
    thrown[6] = 15.2  # steps 6.2 and 0.8 m against 3.25 and 3.75
    gate = PlausibilityGate(vocab, merge_ranges(ranges), {}, max_step_m=6.5, max_step_change_m=1.0)
    assert gate.plausible(layout, block(x))
    assert not gate.plausible(layout, block(thrown))
    steps_only = PlausibilityGate(vocab, merge_ranges(ranges), {}, max_step_m=6.5, max_step_change_m=0.0)
    assert steps_only.plausible(layout, block(thrown))  # what the step bound alone let through


def _plausible_by_waypoint(gate, layout, block):
    """The gate's geometry walked waypoint by waypoint (the reference for the vectorised `plausible`)."""
    for pi, part in enumerate(layout.parts):
        if part.space == "image":
            continue
        rng = gate.ranges[part.space]
        slots = [j for j, s in enumerate(layout.slots) if s.part == pi and s.token is None]
        pts = []
        for w in range(len(slots) // len(part.axes)):
            p = []
            for ai, axis in enumerate(part.axes):
                k = gate.vocab.coord_value(int(block[slots[w * len(part.axes) + ai]]))
                if k is None:
                    return False
                p.append(rng[axis][0] + (rng[axis][1] - rng[axis][0]) / V.N_BINS * k)
                lo_hi = gate.workspace.get(part.space, {}).get(axis)
                if lo_hi is not None and not lo_hi[0] <= p[-1] <= lo_hi[1]:
                    return False
            pts.append(np.array(p))
        steps = [b - a for a, b in zip(pts, pts[1:])]
        if gate.max_step_m > 0 and any(np.linalg.norm(s) > gate.max_step_m for s in steps):
            return False
        if gate.max_step_change_m > 0 and any(np.linalg.norm(b - a) > gate.max_step_change_m
                                              for a, b in zip(steps, steps[1:])):
            return False
    return True


@settings(max_examples=60, deadline=None)
@example(seed=0, spread=1, step=0.0, change=0.0, kind="robot_2d3d", spoil=True)  # every bound off
@given(seed=st.integers(0, 2**31 - 1), spread=st.integers(1, 400), step=st.floats(0.0, 0.4),
       change=st.floats(0.0, 0.4), kind=st.sampled_from(["robot_2d3d", "robot_3d", "drive_2d3d"]),
       spoil=st.booleans())
def test_vectorised_plausibility_agrees_with_a_waypoint_walk(vocab, sets, seed, spread, step, change, kind, spoil):
    """Random schema-valid blocks (bins around a random path), random bounds and workspace boxes; `spoil`
    puts a delimiter where a 3D coordinate belongs (not plausible)."""
    rng = np.random.default_rng(seed)
    layout = L.make_layout(kind, 6)
    ranges = {"robot": {"x": [-1.0, 1.0], "y": [-1.0, 1.0], "z": [0.0, 2.0]},
              "drive": {"x": [0.0, 34.0], "y": [-3.0, 3.0]}}
    workspace = {"robot": {"x": [-0.5, 0.6], "z": [0.2, 1.5]}, "drive": {"y": [-2.0, 2.0]}}
    gate = PlausibilityGate(vocab, merge_ranges(ranges), workspace if rng.random() < 0.5 else {}, step, change)
    coords = vocab.coord_ids()
    block = [vocab[layout.slots[0].token]]
    centre = int(rng.integers(0, V.N_BINS + 1))
    for s in layout.slots[1:]:
        if s.token is not None:
            block.append(vocab[s.token])
        else:
            block.append(coords[int(np.clip(centre + rng.integers(-spread, spread + 1), 0, V.N_BINS))])
    assert check_block(sets, layout, block[1:]) == 0
    if spoil:
        j = next(j for j, s in enumerate(layout.slots) if s.token is None and s.space != "image")
        block[j] = vocab[layout.slots[-1].token]
    assert gate.plausible(layout, block) == _plausible_by_waypoint(gate, layout, block)
    if spoil:
        assert not gate.plausible(layout, block)
