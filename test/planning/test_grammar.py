"""Grammar masks, the vectorised schema gate, open-mode budgets."""
from __future__ import annotations

import pytest

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError
from plan_stack.planning.fields import PrimitiveFields, fields_to_tokens
from plan_stack.planning.grammar import Grammar, check_block

IMAGE = (640, 480)


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
def test_masks_admit_exactly_the_legal_tokens(vocab, sets, kind, random_fields):
    import random
    rng = random.Random(1)
    lay = L.make_layout(kind, 2)
    for _ in range(3):
        fields = random_fields(kind, lay.waypoints, rng)
        tokens = fields_to_tokens(vocab, lay, fields, IMAGE)[1:]
        g = Grammar(sets, lay)
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
    assert check_block(sets, box, good) == 0
    assert check_block(sets, box, [c(10), c(20), c(30), c(40), vocab[V.ROBOT_END]]) == 5  # wrong delimiter
    assert check_block(sets, box, [c(30), c(20), c(10), c(40), vocab[V.BOX_END]]) == 3  # u2 < u1
    assert check_block(sets, box, [c(10), c(40), c(30), c(40), vocab[V.BOX_END]]) == 4  # v2 == v1
    assert check_block(sets, box, good[:4]) == 5  # truncated
    r2 = L.make_layout("robot_2d3d", 1)
    oof = vocab[V.OOF]
    ok = [oof, oof, vocab[V.ROBOT_END], vocab[V.ROBOT], c(1), c(2), c(3), vocab[V.ROBOT_END]]
    assert check_block(sets, r2, ok) == 0
    assert check_block(sets, r2, [oof, c(5)] + ok[2:]) == 2  # unpaired <oof>
    assert check_block(sets, r2, [c(5), oof] + ok[2:]) == 2
    assert check_block(sets, r2, ok[:4] + [oof] + ok[5:]) == 5  # <oof> in a 3D slot


def test_open_grammar_respects_budget(vocab, sets):
    c = vocab[V.COORD_TOKENS[7]]
    end = vocab[V.ROBOT_END]
    # robot_2d3d open: after k pairs, closing needs 1 + (3k + 2) more tokens
    g = Grammar(sets, kind="robot_2d3d", budget_left=13)
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
    g = Grammar(sets, kind="robot_2d3d", budget_left=8)
    g.advance(c)
    g.advance(c)
    assert g.allowed().tolist() == [end]
    with pytest.raises(LayoutError, match="illegal"):
        g.advance(c)


@pytest.mark.parametrize("kind", ["box", "robot_2d3d", "dual_3d", "drive_2d3d"])
def test_vectorised_check_agrees_with_the_grammar_walk(vocab, sets, kind, random_fields):
    import random
    rng = random.Random(5)
    lay = L.make_layout(kind, 3)
    pool = sets.coords_oof.tolist()[-6:] + sets.coords.tolist()[:6] + [vocab[t] for t in V.END_TOKENS] + [5, 6]
    for _ in range(40):
        tokens = fields_to_tokens(vocab, lay, random_fields(kind, lay.waypoints, rng), IMAGE)[1:]
        for _ in range(rng.randint(0, 2)):
            tokens[rng.randrange(len(tokens))] = rng.choice(pool)
        g = Grammar(sets, lay)
        walk = 0
        for j, t in enumerate(tokens):
            if not g.is_legal(t):
                walk = j + 1
                break
            g.advance(t)
        assert check_block(sets, lay, tokens) == walk


def test_grammar_and_field_errors(vocab, sets):
    with pytest.raises(LayoutError, match="needs a layout or an open kind"):
        Grammar(sets)
    g = Grammar(sets, L.make_layout("box"))
    for k in (1, 2, 3, 4):
        g.advance(vocab[V.COORD_TOKENS[k]])
    g.advance(vocab[V.BOX_END])
    assert g.done
    with pytest.raises(LayoutError, match="already complete"):
        g.allowed()
    g = Grammar(sets, kind="robot_3d", budget_left=2)  # needs >= 4 tokens after the start
    with pytest.raises(LayoutError, match="budget too small"):
        g.allowed()
    with pytest.raises(LayoutError, match="box needs uv"):
        fields_to_tokens(vocab, L.make_layout("box"), [PrimitiveFields("box", uv=(1.0, 2.0))], IMAGE)
    with pytest.raises(LayoutError, match="needs 4 uv values"):
        fields_to_tokens(vocab, L.make_layout("robot_2d3d", 2),
                           [PrimitiveFields("robot_2d3d", uv=(1.0, 2.0), points=((0, 0, 1),) * 2)], IMAGE)
    with pytest.raises(LayoutError, match="waypoints"):
        L.make_layout("robot_3d", 0)
    copy = Grammar(sets, L.make_layout("robot_3d", 1))
    dup = copy.copy()
    dup.advance(vocab[V.COORD_TOKENS[3]])
    assert copy.emitted == [] and dup.emitted == [vocab[V.COORD_TOKENS[3]]]
