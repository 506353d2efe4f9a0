"""Fields <-> tokens: every layout round-trips, errors, box order."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError
from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens, tokens_to_fields
from plan_stack.planning.grammar import check_block
from plan_stack.planning.quantisation import RANGES

IMAGE = (640, 480)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(L.KINDS)), p=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_every_layout_round_trips(vocab, sets, kind, p, seed, random_fields):
    import random
    rng = random.Random(seed)
    lay = L.make_layout(kind, p)
    fields = random_fields(kind, lay.waypoints, rng)
    tokens = fields_to_tokens(vocab, lay, fields, IMAGE)
    assert len(tokens) == lay.block_size
    assert check_block(sets, lay, tokens[1:]) == 0
    back = tokens_to_fields(vocab, lay, tokens, IMAGE, frame_id="cam", horizon_s=4.0, sets=sets)
    assert len(back) == lay.arms
    if lay.arms == 2:
        assert [b.arm for b in back] == ["left", "right"]
    for f, b in zip(fields, back):
        assert b.kind == f.kind and b.block_size == lay.block_size and b.frame_id == "cam"
        assert b.horizon_s == (4.0 if kind.startswith("drive") else 0.0)
        for pf, pb in zip(f.points, b.points):
            space = "drive" if kind.startswith("drive") else "robot"
            for ax, (x, y) in zip("xyz", zip(pf, pb)):
                if ax in RANGES[space]:
                    lo, hi = RANGES[space][ax]
                    assert abs(x - y) <= 0.5 * (hi - lo) / 1000 + 1e-9
        assert len(f.uv) == len(b.uv)
        for i, (x, y) in enumerate(zip(f.uv, b.uv)):
            if math.isnan(x):
                assert math.isnan(y) and math.isnan(b.uv[i ^ 1])  # NaN comes back as a pair
            else:
                scale = (IMAGE[0] if i % 2 == 0 else IMAGE[1]) - (0 if kind == "box" else 1)
                assert abs(x - y) <= 0.5 * scale / 1000 + 1e-6
        # re-encoding the decoded fields gives the same tokens
    assert fields_to_tokens(vocab, lay, back, IMAGE) == tokens


def test_fields_errors(vocab):
    lay = L.make_layout("robot_3d", 3)
    with pytest.raises(LayoutError, match="needs 3 points"):
        fields_to_tokens(vocab, lay, [PrimitiveFields("robot_3d", points=((0, 0, 1),))], IMAGE)
    with pytest.raises(LayoutError, match="needs 2 primitive"):
        fields_to_tokens(vocab, L.make_layout("dual_3d", 3), [PrimitiveFields("robot_3d")], IMAGE)
    good = fields_to_tokens(vocab, lay, [PrimitiveFields("robot_3d", points=((0, 0, 1),) * 3)], IMAGE)
    bad = list(good)
    bad[-1] = vocab[V.BOX_END]
    with pytest.raises(LayoutError, match="illegal token at position 10"):
        tokens_to_fields(vocab, lay, bad, IMAGE)


def test_box_encoding_enforces_order(vocab, sets):
    lay = L.make_layout("box")
    toks = fields_to_tokens(vocab, lay, [PrimitiveFields("box", uv=(100.0, 50.0, 100.0, 50.0))], IMAGE)
    k = [vocab.coord_value(t) for t in toks[1:5]]
    assert k[2] > k[0] and k[3] > k[1]
    assert check_block(sets, lay, toks[1:]) == 0
