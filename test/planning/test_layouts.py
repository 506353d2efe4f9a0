"""Layouts, quantisation, tool calls, grammar masks, constrained selection, fields."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError, ToolCallError


@pytest.fixture(scope="module")
def tok():
    return V.build_tokenizer()


@pytest.fixture(scope="module")
def vocab(tok):
    return V.Vocab.from_tokenizer(tok)


@pytest.fixture(scope="module")
def sets(vocab):
    return L.TokenSets(vocab)


IMAGE = (640, 480)


# --- quantisation ---------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(space_axis=st.sampled_from([(s, a) for s, axes in L.RANGES.items() for a in axes]),
       frac=st.floats(0.0, 1.0))
def test_quantise_round_trip_within_half_step(space_axis, frac):
    lo, hi = L.RANGES[space_axis[0]][space_axis[1]]
    q = lo + frac * (hi - lo)
    k = L.quantise(q, lo, hi)
    assert 0 <= k <= 1000
    assert abs(L.dequantise(k, lo, hi) - q) <= 0.5 * (hi - lo) / 1000 + 1e-9


def test_quantise_formula_and_errors():
    assert L.quantise(0.0, -5, 5) == 500
    assert L.quantise(0.004999, -5, 5) == 500 and L.quantise(0.0051, -5, 5) == 501
    assert L.quantise(99.0, -5, 5) == 1000 and L.quantise(-99.0, -5, 5) == 0  # saturates
    with pytest.raises(LayoutError, match="non-finite"):
        L.quantise(float("nan"), 0, 1)
    with pytest.raises(LayoutError, match="outside"):
        L.dequantise(1001, 0, 1)


# --- layouts ------------------------------------------------------------------------

@pytest.mark.parametrize("kind,formula", [
    ("box", lambda p: 6), ("robot_3d", lambda p: 3 * p + 2), ("robot_2d3d", lambda p: 5 * p + 4),
    ("dual_3d", lambda p: 6 * p + 4), ("dual_2d3d", lambda p: 10 * p + 8),
    ("drive_3d", lambda p: 2 * p + 2), ("drive_2d3d", lambda p: 4 * p + 4)])
def test_block_sizes_match_design_table(kind, formula):
    for p in (1, 2, 8, 10, 20, 64):
        lay = L.make_layout(kind, p)
        assert lay.block_size == formula(p) == L.block_size_of(kind, p)
        found = L.layout_for(lay.start_token, lay.block_size)
        assert found is not None and found.kind == kind and found.waypoints == lay.waypoints


def test_layout_for_rejects_unmatched_sizes():
    assert L.layout_for(V.BOX, 7) is None
    assert L.layout_for(V.ROBOT_2D, 55) is None  # neither 5P+4 nor 10P+8
    assert L.layout_for(V.DRIVE, 3) is None
    assert L.layout_for(V.ROBOT, 0) is None
    assert L.layout_for(V.ROBOT, 3 * (L.MAX_WAYPOINTS + 1) + 2) is None
    with pytest.raises(LayoutError, match="unknown primitive kind"):
        L.make_layout("triangle", 2)


def test_dual_arm_is_left_block_then_right_block(vocab):
    lay = L.make_layout("dual_2d3d", 10)
    starts = [s.token for s in lay.slots if s.token in V.START_TOKENS]
    assert starts == [V.ROBOT_2D, V.ROBOT, V.ROBOT_2D, V.ROBOT]
    assert lay.block_size == 108


# --- tool calls -----------------------------------------------------------------------

def test_tool_call_round_trip_and_errors(tok):
    text = L.tool_call_text(54)
    assert text == '<tool_call>{"name":"atomic_decoding","arguments":{"block_size":54}}</tool_call>'
    body = text[len(V.TOOL_CALL_START):-len(V.TOOL_CALL_END)]
    assert L.parse_tool_call(body) == 54
    assert tok.decode(tok.encode(text)) == text
    for bad, match in [("{nope", "not JSON"), ('{"name":"other","arguments":{"block_size":6}}', "name"),
                       ('{"name":"atomic_decoding","arguments":{"block_size":-2}}', "positive"),
                       ('{"name":"atomic_decoding","arguments":{"block_size":true}}', "positive"),
                       ('{"name":"atomic_decoding","arguments":{}}', "positive")]:
        with pytest.raises(ToolCallError, match=match):
            L.parse_tool_call(bad)


# --- fields <-> tokens round trip ---------------------------------------------------------

def _random_fields(kind, p, rng):
    parts, arms, msg_kind = L.KINDS[kind]
    out = []
    for a in range(arms):
        has_2d = any(pt.space == "image" for pt in parts)
        uv, pts = (), ()
        if kind == "box":
            u1, u2 = sorted(rng.uniform(0, IMAGE[0]) for _ in range(2))
            v1, v2 = sorted(rng.uniform(0, IMAGE[1]) for _ in range(2))
            uv = (u1, v1, u2, v2)
        else:
            space = parts[-1].space
            rx, ry = L.RANGES[space]["x"], L.RANGES[space]["y"]
            rz = L.RANGES[space].get("z", (0.0, 0.0))
            pts = tuple((rng.uniform(*rx), rng.uniform(*ry), rng.uniform(*rz) if space == "robot" else 0.0)
                        for _ in range(p))
            if has_2d:
                vals = []
                for _ in range(p):
                    if rng.random() < 0.2:
                        vals += [float("nan"), float("nan")]
                    else:
                        vals += [rng.uniform(0, IMAGE[0] - 1), rng.uniform(0, IMAGE[1] - 1)]
                uv = tuple(vals)
        out.append(L.PrimitiveFields(kind=msg_kind, points=pts, uv=uv))
    return out


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(L.KINDS)), p=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_every_layout_round_trips(vocab, sets, kind, p, seed):
    import random
    rng = random.Random(seed)
    lay = L.make_layout(kind, p)
    fields = _random_fields(kind, lay.waypoints, rng)
    tokens = L.fields_to_tokens(vocab, lay, fields, IMAGE)
    assert len(tokens) == lay.block_size
    assert L.check_block(sets, lay, tokens[1:]) == 0
    back = L.tokens_to_fields(vocab, lay, tokens, IMAGE, frame_id="cam", horizon_s=4.0, sets=sets)
    assert len(back) == lay.arms
    if lay.arms == 2:
        assert [b.arm for b in back] == ["left", "right"]
    for f, b in zip(fields, back):
        assert b.kind == f.kind and b.block_size == lay.block_size and b.frame_id == "cam"
        assert b.horizon_s == (4.0 if kind.startswith("drive") else 0.0)
        for pf, pb in zip(f.points, b.points):
            space = "drive" if kind.startswith("drive") else "robot"
            for ax, (x, y) in zip("xyz", zip(pf, pb)):
                if ax in L.RANGES[space]:
                    lo, hi = L.RANGES[space][ax]
                    assert abs(x - y) <= 0.5 * (hi - lo) / 1000 + 1e-9
        assert len(f.uv) == len(b.uv)
        for i, (x, y) in enumerate(zip(f.uv, b.uv)):
            if math.isnan(x):
                assert math.isnan(y) and math.isnan(b.uv[i ^ 1])  # NaN comes back as a pair
            else:
                scale = (IMAGE[0] if i % 2 == 0 else IMAGE[1]) - (0 if kind == "box" else 1)
                assert abs(x - y) <= 0.5 * scale / 1000 + 1e-6
        # re-encoding the decoded fields gives the same tokens
    assert L.fields_to_tokens(vocab, lay, back, IMAGE) == tokens


def test_fields_errors(vocab):
    lay = L.make_layout("robot_3d", 3)
    with pytest.raises(LayoutError, match="needs 3 points"):
        L.fields_to_tokens(vocab, lay, [L.PrimitiveFields("robot_3d", points=((0, 0, 1),))], IMAGE)
    with pytest.raises(LayoutError, match="needs 2 primitive"):
        L.fields_to_tokens(vocab, L.make_layout("dual_3d", 3), [L.PrimitiveFields("robot_3d")], IMAGE)
    good = L.fields_to_tokens(vocab, lay, [L.PrimitiveFields("robot_3d", points=((0, 0, 1),) * 3)], IMAGE)
    bad = list(good)
    bad[-1] = vocab[V.BOX_END]
    with pytest.raises(LayoutError, match="illegal token at position 10"):
        L.tokens_to_fields(vocab, lay, bad, IMAGE)


def test_box_encoding_enforces_order(vocab, sets):
    lay = L.make_layout("box")
    toks = L.fields_to_tokens(vocab, lay, [L.PrimitiveFields("box", uv=(100.0, 50.0, 100.0, 50.0))], IMAGE)
    k = [vocab.coord_value(t) for t in toks[1:5]]
    assert k[2] > k[0] and k[3] > k[1]
    assert L.check_block(sets, lay, toks[1:]) == 0


# --- masks and grammar --------------------------------------------------------------------

def _legal_brute(vocab, lay, prefix, cand):
    """Plain-rule reference: is `cand` legal after `prefix` (block positions 1..)?"""
    slot = lay.slots[len(prefix) + 1]
    if slot.token is not None:
        return cand == vocab[slot.token]
    k = vocab.coord_value(cand)
    if cand == vocab[V.OOF]:
        if not slot.oof:
            return False
        return slot.axis == "u" or prefix[-1] == vocab[V.OOF]
    if k is None:
        return False
    if slot.box_index in (0, 1):
        return k < 1000
    if slot.box_index in (2, 3):
        return k > vocab.coord_value(prefix[-2])
    if slot.oof and slot.axis == "v":
        return prefix[-1] != vocab[V.OOF]
    return True


@pytest.mark.parametrize("kind", ["box", "robot_2d3d", "drive_2d3d"])
def test_masks_admit_exactly_the_legal_tokens(vocab, sets, kind):
    import random
    rng = random.Random(1)
    lay = L.make_layout(kind, 2)
    for trial in range(3):
        fields = _random_fields(kind, lay.waypoints, rng)
        tokens = L.fields_to_tokens(vocab, lay, fields, IMAGE)[1:]
        g = L.Grammar(sets, lay)
        for j, t in enumerate(tokens):
            allowed = set(g.allowed().tolist())
            brute = {c for c in range(vocab.size) if _legal_brute(vocab, lay, tokens[:j], c)}
            assert allowed == brute, (kind, j)
            g.advance(t)
        assert g.done
    mask = sets.layout_mask(lay)
    assert mask.shape == (lay.block_size - 1, vocab.size)
    for j, slot in enumerate(lay.slots[1:]):
        assert mask[j].sum() == (1 if slot.token else 1000 if slot.box_index >= 0 else 1002 if slot.oof else 1001)


def test_check_block_finds_each_invalid_class(vocab, sets):
    box = L.make_layout("box")
    c = lambda k: vocab[V.COORD_TOKENS[k]]  # noqa: E731
    good = [c(10), c(20), c(30), c(40), vocab[V.BOX_END]]
    assert L.check_block(sets, box, good) == 0
    assert L.check_block(sets, box, [c(10), c(20), c(30), c(40), vocab[V.ROBOT_END]]) == 5  # wrong delimiter
    assert L.check_block(sets, box, [c(30), c(20), c(10), c(40), vocab[V.BOX_END]]) == 3  # u2 < u1
    assert L.check_block(sets, box, [c(10), c(40), c(30), c(40), vocab[V.BOX_END]]) == 4  # v2 == v1
    assert L.check_block(sets, box, good[:4]) == 5  # truncated
    r2 = L.make_layout("robot_2d3d", 1)
    oof = vocab[V.OOF]
    ok = [oof, oof, vocab[V.ROBOT_END], vocab[V.ROBOT], c(1), c(2), c(3), vocab[V.ROBOT_END]]
    assert L.check_block(sets, r2, ok) == 0
    assert L.check_block(sets, r2, [oof, c(5)] + ok[2:]) == 2  # unpaired <oof>
    assert L.check_block(sets, r2, [c(5), oof] + ok[2:]) == 2
    assert L.check_block(sets, r2, ok[:4] + [oof] + ok[5:]) == 5  # <oof> in a 3D slot


def test_open_grammar_respects_budget(vocab, sets):
    c = vocab[V.COORD_TOKENS[7]]
    end = vocab[V.ROBOT_END]
    # robot_2d3d open: after k pairs, closing needs 1 + (3k + 2) more tokens
    g = L.Grammar(sets, kind="robot_2d3d", budget_left=13)
    assert g.min_length() == 8
    seq = []
    while not g.done:
        allowed = g.allowed()
        tok_ = c if c in allowed.tolist() else int(allowed[-1]) if end in allowed.tolist() else int(allowed[0])
        if tok_ == c and end in allowed.tolist() and len(seq) >= 2 and len(seq) % 2 == 0 and len(seq) < 4:
            tok_ = c
        g.advance(tok_)
        seq.append(tok_)
    assert len(seq) <= 13 and g.waypoints >= 1
    assert len(seq) == 5 * g.waypoints + 3
    # with budget for 1 waypoint only the end token is legal after the first pair
    g = L.Grammar(sets, kind="robot_2d3d", budget_left=8)
    g.advance(c)
    g.advance(c)
    assert g.allowed().tolist() == [end]
    with pytest.raises(LayoutError, match="illegal"):
        g.advance(c)


# --- constrained selection -----------------------------------------------------------------

def _brute_box(la, lb):
    best, arg = -float("inf"), None
    for i, j in itertools.combinations(range(len(la)), 2):
        if la[i] + lb[j] > best:
            best, arg = la[i] + lb[j], (i, j)
    return arg


def test_select_block_solves_box_order_exactly(vocab, sets):
    torch.manual_seed(0)
    lay = L.make_layout("box")
    for _ in range(5):
        logits = torch.randn(5, vocab.size)
        # make the unconstrained argmax violate the order on purpose
        logits[0, sets.coords[900]] += 10
        logits[2, sets.coords[100]] += 10
        toks = L.select_block(sets, lay, logits)
        assert L.check_block(sets, lay, toks.tolist()) == 0
        cl = logits[:, sets.coords]
        i, j = _brute_box(cl[0, :60].tolist() + cl[0, 60:].tolist(), cl[2].tolist())
        assert vocab.coord_value(int(toks[0])) == i and vocab.coord_value(int(toks[2])) == j


def test_select_block_pairs_oof_and_respects_masks(vocab, sets):
    torch.manual_seed(1)
    lay = L.make_layout("robot_2d3d", 3)
    logits = torch.randn(lay.block_size - 1, vocab.size)
    logits[0, sets.oof] += 50  # u of waypoint 0 wants <oof>, v does not -> pair decided by sum
    logits[2, sets.oof] += 1.0  # weak single <oof> vote: the coordinate pair must win
    logits[:, vocab[V.TEXT_MASK]] += 100  # illegal everywhere
    toks = L.select_block(sets, lay, logits).tolist()
    assert L.check_block(sets, lay, toks) == 0
    assert toks[0] == toks[1] == sets.oof
    assert toks[2] != sets.oof and toks[3] != sets.oof
    with pytest.raises(LayoutError, match="positions"):
        L.select_block(sets, lay, logits[:-1])


@pytest.mark.parametrize("kind", ["box", "robot_2d3d", "dual_3d", "drive_2d3d"])
def test_vectorised_check_agrees_with_the_grammar_walk(vocab, sets, kind):
    import random
    rng = random.Random(5)
    lay = L.make_layout(kind, 3)
    pool = sets.coords_oof.tolist()[-6:] + sets.coords.tolist()[:6] + [vocab[t] for t in V.END_TOKENS] + [5, 6]
    for trial in range(40):
        tokens = L.fields_to_tokens(vocab, lay, _random_fields(kind, lay.waypoints, rng), IMAGE)[1:]
        for _ in range(rng.randint(0, 2)):
            tokens[rng.randrange(len(tokens))] = rng.choice(pool)
        g = L.Grammar(sets, lay)
        walk = 0
        for j, t in enumerate(tokens):
            if not g.is_legal(t):
                walk = j + 1
                break
            g.advance(t)
        assert L.check_block(sets, lay, tokens) == walk


def test_grammar_and_field_errors(vocab, sets):
    with pytest.raises(LayoutError, match="needs a layout or an open kind"):
        L.Grammar(sets)
    g = L.Grammar(sets, L.make_layout("box"))
    for k in (1, 2, 3, 4):
        g.advance(vocab[V.COORD_TOKENS[k]])
    g.advance(vocab[V.BOX_END])
    assert g.done
    with pytest.raises(LayoutError, match="already complete"):
        g.allowed()
    g = L.Grammar(sets, kind="robot_3d", budget_left=2)  # needs >= 4 tokens after the start
    with pytest.raises(LayoutError, match="budget too small"):
        g.allowed()
    with pytest.raises(LayoutError, match="box needs uv"):
        L.fields_to_tokens(vocab, L.make_layout("box"), [L.PrimitiveFields("box", uv=(1.0, 2.0))], IMAGE)
    with pytest.raises(LayoutError, match="needs 4 uv values"):
        L.fields_to_tokens(vocab, L.make_layout("robot_2d3d", 2),
                           [L.PrimitiveFields("robot_2d3d", uv=(1.0, 2.0), points=((0, 0, 1),) * 2)], IMAGE)
    with pytest.raises(LayoutError, match="waypoints"):
        L.make_layout("robot_3d", 0)
    copy = L.Grammar(sets, L.make_layout("robot_3d", 1))
    dup = copy.copy()
    dup.advance(vocab[V.COORD_TOKENS[3]])
    assert copy.emitted == [] and dup.emitted == [vocab[V.COORD_TOKENS[3]]]


def test_model_ranges_quantise_finer_and_validate(vocab):
    ranges = L.merge_ranges({"robot": {"x": [-0.5, 0.5]}})
    assert ranges["robot"]["x"] == (-0.5, 0.5) and ranges["robot"]["z"] == L.RANGES["robot"]["z"]
    layout = L.make_layout("robot_3d", 2)
    prim = L.PrimitiveFields("robot_3d", points=((0.1234, 0.0, 1.0), (-0.2, 0.3, 1.5)))
    default = L.tokens_to_fields(vocab, layout, L.fields_to_tokens(vocab, layout, [prim], (8, 8)), (8, 8))
    fine = L.tokens_to_fields(vocab, layout, L.fields_to_tokens(vocab, layout, [prim], (8, 8), ranges), (8, 8),
                              ranges=ranges)
    assert abs(default[0].points[0][0] - 0.1234) > 0.003  # 1 cm bins
    assert abs(fine[0].points[0][0] - 0.1234) <= 0.0005  # 1 mm bins
    for bad in ({"image": {"u": [0, 1]}}, {"robot": {"w": [0, 1]}}, {"robot": {"x": [1, 1]}},
                {"robot": {"x": [0, float("inf")]}}):
        with pytest.raises(LayoutError):
            L.merge_ranges(bad)
