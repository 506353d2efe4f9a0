"""Tracker: the events committed tokens cause (start, rejected, truncated, end) and the grammar in between."""
from __future__ import annotations

from plan_stack.planning import vocab as V
from plan_stack.planning.tool_call import tool_call_text
from plan_stack.planning.tracker import Event, Tracker


def _feed(tracker, tok, text):
    return [tracker.advance(t) for t in tok.encode(text, add_special_tokens=False)]


def _coord(vocab, k):
    return vocab[V.COORD_TOKENS[k]]


def test_a_declared_block_opens_a_fixed_layout_and_its_last_token_ends_it(tok, vocab, sets):
    tr = Tracker(vocab, sets, tok, budget=100)
    assert set(_feed(tr, tok, "pick the cup" + tool_call_text(6))) == {Event.NONE} and not tr.in_primitive
    assert tr.advance(vocab[V.BOX]) is Event.START
    assert tr.in_primitive and tr.fixed_layout is not None and tr.fixed_layout.block_size == 6
    assert tr.start_kind == V.BOX and tr.allowed() is not None
    events = [tr.advance(t) for t in (_coord(vocab, 10), _coord(vocab, 20), _coord(vocab, 30), _coord(vocab, 40))]
    assert events == [Event.NONE] * 4
    assert tr.advance(vocab[V.BOX_END]) is Event.END and not tr.in_primitive and tr.fixed_layout is None
    assert tr.count == len(tok.encode("pick the cup" + tool_call_text(6), add_special_tokens=False)) + 6


def test_a_missing_or_oversized_declaration_is_rejected_into_open_mode(tok, vocab, sets):
    tr = Tracker(vocab, sets, tok, budget=100)
    assert tr.advance(vocab[V.ROBOT]) is Event.REJECTED  # no tool call before the start token
    assert tr.in_primitive and tr.fixed_layout is None  # open mode: the model picks P
    tr = Tracker(vocab, sets, tok, budget=40)
    _feed(tr, tok, tool_call_text(54))
    assert tr.advance(vocab[V.ROBOT_2D]) is Event.REJECTED  # 53 positions do not fit the budget
    assert Event.REJECTED.opens and Event.START.opens and not Event.END.opens


def test_no_room_for_the_shortest_primitive_truncates(tok, vocab, sets):
    prefix = tok.encode(tool_call_text(54) + V.ROBOT_2D, add_special_tokens=False)
    tr = Tracker(vocab, sets, tok, budget=len(prefix) + 3)
    events = [tr.advance(t) for t in prefix]
    assert events[-1] is Event.TRUNCATED and not tr.in_primitive


def test_a_copy_walks_on_without_moving_the_original(tok, vocab, sets):
    tr = Tracker(vocab, sets, tok, budget=100)
    _feed(tr, tok, tool_call_text(6))
    tr.advance(vocab[V.BOX])
    walk = tr.copy()
    walk.advance(_coord(vocab, 10))
    walk.advance(_coord(vocab, 20))
    assert walk.count == tr.count + 2
    assert _coord(vocab, 5) in tr.allowed().tolist()  # the original still expects u1
    assert _coord(vocab, 5) not in walk.allowed().tolist()  # the copy is at u2, which must exceed u1 = 10
