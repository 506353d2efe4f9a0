"""DecodeState: committing opens and closes spans and stops; sync keeps the target cache at all but the anchor."""
from __future__ import annotations

from plan_stack.planning import vocab as V
from plan_stack.planning.decode_state import DecodeState, DecodeStats, Path
from plan_stack.planning.decoders import DecoderConfig
from plan_stack.planning.decoding import Decoder
from plan_stack.planning.tool_call import tool_call_text


def _state(target, budget=40):
    dec = Decoder(target, None, DecoderConfig(decoder="ar", budget=budget))
    prompt = target.encode_prompt("go")
    return DecodeState(target, None, dec.config, dec.sets, dec.gate, dec.schedule, prompt, budget, [], 16,
                       drafts=False, hands_over=False)


def _words(target, n):
    ids = target.tokenizer.encode("pick up the red cup and place it", add_special_tokens=False)[:n]
    assert len(ids) == n and not set(ids) & set(target.vocab.eos_ids)
    return ids


def _coord(vocab, k):
    return vocab[V.COORD_TOKENS[k]]


def test_sync_keeps_everything_but_the_anchor_and_records_the_fed_positions(text_target):
    s = _state(text_target)
    text_target.prefill(s.prompt)
    base = text_target.length
    assert base == s.base_length
    a, b, c = _words(text_target, 3)
    s.commit(a)
    step = text_target.forward([a, b, c])  # a verification of two proposals; only b is accepted
    s.commit(b)
    s.sync(step, base)
    assert text_target.length == base + len(s.tokens) - 1  # b is the anchor: fed by the next forward
    assert sorted(s.hidden) == [0] and s.hidden[0].shape == (text_target.hidden_size,)


def test_after_a_stop_every_fed_position_is_kept(text_target):
    s = _state(text_target, budget=2)
    text_target.prefill(s.prompt)
    base = text_target.length
    a, b = _words(text_target, 2)
    s.commit(a)
    step = text_target.forward([a, b])
    s.commit(b)
    assert s.stop == "budget"
    s.sync(step, base)
    assert text_target.length == base + 2 and sorted(s.hidden) == [0, 1]


def test_a_primitive_is_one_span_from_its_start_token_to_its_end(text_target):
    vocab = text_target.vocab
    s = _state(text_target)
    for t in text_target.tokenizer.encode(tool_call_text(6), add_special_tokens=False):
        s.commit(t)
    s.commit(vocab[V.BOX])
    assert s.open_span is not None and s.open_span.layout.block_size == 6 and s.path is Path.PRIMITIVE
    assert s.schedule_path == V.BOX and s.primitive_pending
    for k in (10, 20, 30, 40):
        s.commit(_coord(vocab, k))
    s.commit(vocab[V.BOX_END])
    (span,) = s.spans
    assert (span.start, span.end) == (len(s.tokens) - 6, len(s.tokens) - 1) and s.open_span is None
    assert s.path is Path.TEXT and s.stats.blocks_rejected == 0 and not s.stop


def test_an_undeclared_primitive_is_counted_and_gets_its_layout_when_it_closes(text_target):
    vocab = text_target.vocab
    s = _state(text_target)
    s.commit(vocab[V.BOX])
    assert s.stats.blocks_rejected == 1 and s.open_span.layout is None and not s.primitive_pending
    for k in (10, 20, 30, 40):
        s.commit(_coord(vocab, k))
    s.commit(vocab[V.BOX_END])
    assert s.spans[0].layout.kind == "box" and s.spans[0].layout.block_size == 6


def test_end_of_text_stops_with_eos(text_target):
    s = _state(text_target)
    s.commit(_words(text_target, 1)[0])
    s.commit(next(iter(text_target.vocab.eos_ids)))
    assert s.stop == "eos"


def test_forwards_are_counted_under_their_path():
    st = DecodeStats()
    st.count_target(Path.TEXT)
    st.count_target(Path.PRIMITIVE)
    st.count_target(Path.PRIMITIVE)
    st.count_drafter(Path.TEXT)
    assert (st.target_forwards_text, st.target_forwards_primitive, st.drafter_forwards_text) == (1, 2, 1)
    assert st.as_dict()["target_forwards"] == 3 and st.as_dict()["drafter_forwards"] == 1
