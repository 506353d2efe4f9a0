"""Getting a target: a local checkpoint saved and loaded offline, a tiny random one from a config."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.planning.errors import PlanningError
from plan_stack.planning.target_build import load_target, save_target, tiny_target


def _image(seed=0, h=48, w=64):
    return (np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)


@pytest.mark.parametrize("which", ["text_target", "vl_target"])
def test_save_and_load_local_checkpoint(request, which, tmp_path, monkeypatch):
    tg = request.getfixturevalue(which)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    save_target(tg, tmp_path)
    back = load_target(tmp_path)
    import os
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    images = [_image()] if tg.is_vl else []
    p = tg.encode_prompt("close the lid", images)
    assert torch.allclose(tg.prefill(p).logits, back.prefill(back.encode_prompt("close the lid", images)).logits,
                          atol=1e-6)
    assert back.vocab.ids == tg.vocab.ids


def test_a_directory_without_a_checkpoint_is_refused():
    with pytest.raises(PlanningError, match="no config.json"):
        load_target("/nonexistent")


def test_a_tiny_target_is_the_same_for_a_seed_and_has_the_primitive_tokens(tokenizer):
    a, b = tiny_target("text", layers=1, seed=3, tokenizer=tokenizer), tiny_target("text", layers=1, seed=3,
                                                                                     tokenizer=tokenizer)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert a.vocab.size == len(tokenizer) and a.vocab.start_ids
    with pytest.raises(PlanningError, match="kind must be 'text' or 'vl'"):
        tiny_target("audio")
