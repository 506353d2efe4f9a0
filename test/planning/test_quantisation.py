"""Quantisation: bin round trip, the formula, model coordinate ranges."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_stack.planning import layouts as L
from plan_stack.planning.errors import LayoutError
from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens, tokens_to_fields
from plan_stack.planning.quantisation import RANGES, dequantise, merge_ranges, quantise

IMAGE = (640, 480)


@settings(max_examples=300, deadline=None)
@given(space_axis=st.sampled_from([(s, a) for s, axes in RANGES.items() for a in axes]),
       frac=st.floats(0.0, 1.0))
def test_quantise_round_trip_within_half_step(space_axis, frac):
    lo, hi = RANGES[space_axis[0]][space_axis[1]]
    q = lo + frac * (hi - lo)
    k = quantise(q, lo, hi)
    assert 0 <= k <= 1000
    assert abs(dequantise(k, lo, hi) - q) <= 0.5 * (hi - lo) / 1000 + 1e-9


def test_quantise_formula_and_errors():
    assert quantise(0.0, -5, 5) == 500
    assert quantise(0.004999, -5, 5) == 500 and quantise(0.0051, -5, 5) == 501
    assert quantise(99.0, -5, 5) == 1000 and quantise(-99.0, -5, 5) == 0  # saturates
    with pytest.raises(LayoutError, match="non-finite"):
        quantise(float("nan"), 0, 1)
    with pytest.raises(LayoutError, match="outside"):
        dequantise(1001, 0, 1)


def test_model_ranges_quantise_finer_and_validate(vocab):
    ranges = merge_ranges({"robot": {"x": [-0.5, 0.5]}})
    assert ranges["robot"]["x"] == (-0.5, 0.5) and ranges["robot"]["z"] == RANGES["robot"]["z"]
    layout = L.make_layout("robot_3d", 2)
    prim = PrimitiveFields("robot_3d", points=((0.1234, 0.0, 1.0), (-0.2, 0.3, 1.5)))
    default = tokens_to_fields(vocab, layout, fields_to_tokens(vocab, layout, [prim], (8, 8)), (8, 8))
    fine = tokens_to_fields(vocab, layout, fields_to_tokens(vocab, layout, [prim], (8, 8), ranges), (8, 8),
                              ranges=ranges)
    assert abs(default[0].points[0][0] - 0.1234) > 0.003  # 1 cm bins
    assert abs(fine[0].points[0][0] - 0.1234) <= 0.0005  # 1 mm bins
    for bad in ({"image": {"u": [0, 1]}}, {"robot": {"w": [0, 1]}}, {"robot": {"x": [1, 1]}},
                {"robot": {"x": [0, float("inf")]}}):
        with pytest.raises(LayoutError):
            merge_ranges(bad)
