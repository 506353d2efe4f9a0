"""The text layers run from their weights: which models they know, and their RMSNorm and rotation."""
from __future__ import annotations

import torch

from plan_stack.planning.text_stack import direct_layers, rms_norm, rotate_half


def test_a_qwen3_text_stack_is_known(text_target, vl_target):
    assert direct_layers(text_target.base, text_target.text_config) is text_target.base
    assert direct_layers(vl_target.base, vl_target.text_config) is vl_target.base.language_model


def test_a_text_stack_the_direct_steps_do_not_know_keeps_the_models_forward(tokenizer):
    import transformers as tf

    from plan_stack.planning.target import TargetAdapter

    cfg = tf.Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, attention_bias=True,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    tg = TargetAdapter(tf.Qwen3ForCausalLM(cfg), tokenizer)
    assert not tg.direct_steps  # biases: not the structure `run_layers` computes
    assert direct_layers(tg.base, tg.text_config) is None
    tg.prefill(tg.encode_prompt("lift"))
    assert tg.forward([11, 12]).logits.shape == (2, tg.vocab.size)


def test_rms_norm_is_the_models_own_module(text_target):
    norm = text_target.base.norm
    x = torch.randn(1, 5, text_target.hidden_size)
    assert torch.equal(rms_norm(x, norm), norm(x))


def test_rotate_half_swaps_the_halves_and_negates_the_second():
    x = torch.arange(8.0).view(1, 8)
    assert rotate_half(x).tolist() == [[-4.0, -5.0, -6.0, -7.0, 0.0, 1.0, 2.0, 3.0]]
