"""Primitive vocabulary: tokens are single ids, lookups fail loudly, adding is idempotent."""
from __future__ import annotations

import pytest

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import PlanningError


def test_every_primitive_token_is_one_id(tokenizer):
    vocab = V.Vocab.from_tokenizer(tokenizer)
    assert len(V.COORD_TOKENS) == 1001 and vocab.size == len(tokenizer)
    for tok in V.PRIMITIVE_TOKENS:
        assert tokenizer.encode(tok, add_special_tokens=False) == [vocab[tok]]
    assert [vocab.coord_value(vocab[f"<{k}>"]) for k in (0, 1, 500, 1000)] == [0, 1, 500, 1000]
    assert vocab.coord_value(vocab[V.OOF]) is None and vocab.coord_value(vocab[V.BOX]) is None
    coords = [vocab[f"<{k}>"] for k in (0, 1, 500, 1000)]
    assert vocab.coord_bins(coords).tolist() == [0, 1, 500, 1000]  # coord_value, many at once
    assert vocab.coord_bins(coords + [vocab[V.OOF]]) is None and vocab.coord_bins([vocab[V.BOX]]) is None
    assert vocab.coord_bins([vocab.coord0 - 1]) is None and vocab.coord_bins([vocab.coord0 + 1001]) is None
    assert vocab.start_ids == {vocab[t] for t in V.START_TOKENS}
    assert vocab.eos_ids == (tokenizer.eos_token_id,)
    assert V.add_primitive_tokens(tokenizer) == 0  # already there


def test_missing_tokens_are_named_and_can_be_added():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    with pytest.raises(PlanningError, match="lacks the special token '<0>'"):
        V.Vocab.from_tokenizer(tok)
    assert V.add_primitive_tokens(tok) == len(V.PRIMITIVE_TOKENS)
    assert V.Vocab.from_tokenizer(tok)[V.TEXT_MASK] == tok.convert_tokens_to_ids(V.TEXT_MASK)
