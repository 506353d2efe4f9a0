"""Getting a target: load a checkpoint directory (offline), build a tiny random one, save one.

`load_target` reads only local directories (it sets HF_HUB_OFFLINE=1); `tiny_target` builds a Qwen3 or
Qwen3-VL from a config with random weights, for tests and benchmarks.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.target import TargetAdapter

__all__ = ["tiny_target", "save_target", "load_target"]


def _mrope_section(head_dim: int) -> list[int]:
    half = head_dim // 2
    s = (3 * half) // 8
    return [half - 2 * s, s, s]


def tiny_target(kind: str = "text", *, hidden: int = 64, layers: int = 4, heads: int = 4, kv_heads: int = 2,
                head_dim: int = 16, intermediate: int | None = None, vision_hidden: int = 32,
                vision_depth: int = 1, vision_patch: int = 16, seed: int = 0, dtype: torch.dtype = torch.float32,
                tokenizer: Any = None, feature_layers: Sequence[int] | None = None) -> TargetAdapter:
    """A randomly initialised Qwen3 (`text`) or Qwen3-VL (`vl`) target built from a config.

    For tests and benchmarks; the tokenizer is `vocab.build_tokenizer()` unless given. `vision_patch`:
    the ViT's patch edge in pixels (each LLM image token merges 2 x 2 patches).
    """
    import transformers as tf

    tok = tokenizer if tokenizer is not None else V.build_tokenizer()
    vocab_size = len(tok)
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                head_dim=head_dim, max_position_embeddings=4096, tie_word_embeddings=True,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model: Any  # Qwen3ForCausalLM or Qwen3VLForConditionalGeneration (their decorated .to() confuses mypy)
    if kind == "text":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**text, rope_parameters={"rope_type": "default",
                                                                          "rope_theta": 10000.0}))
        processor = None
    elif kind == "vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                   "mrope_section": _mrope_section(head_dim)}
        cfg = tf.Qwen3VLConfig(
            text_config=text,
            vision_config=dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=2 * vision_hidden,
                               num_heads=2, out_hidden_size=hidden, patch_size=vision_patch, temporal_patch_size=2,
                               spatial_merge_size=2, deepstack_visual_indexes=[0], num_position_embeddings=256),
            image_token_id=tok.convert_tokens_to_ids(V.IMAGE_PAD),
            vision_start_token_id=tok.convert_tokens_to_ids(V.VISION_START),
            vision_end_token_id=tok.convert_tokens_to_ids(V.VISION_END),
            tie_word_embeddings=True)
        model = tf.Qwen3VLForConditionalGeneration(cfg)
        processor = tf.Qwen2VLImageProcessorPil(patch_size=vision_patch, temporal_patch_size=2, merge_size=2,
                                                min_pixels=32 * 32, max_pixels=256 * 256)
    else:
        raise PlanningError(f"kind must be 'text' or 'vl', got {kind!r}")
    model = model.to(dtype)
    return TargetAdapter(model, tok, processor, feature_layers)


def save_target(target: TargetAdapter, path: str | os.PathLike) -> None:
    """Write weights, config, tokenizer (and image processor) to a local directory."""
    target.model.save_pretrained(path)
    target.tokenizer.save_pretrained(path)
    if target.image_processor is not None:
        target.image_processor.save_pretrained(path)


def load_target(path: str | os.PathLike, *, feature_layers: Sequence[int] | None = None,
                dtype: torch.dtype | None = None) -> TargetAdapter:
    """Load a local checkpoint directory (weights + tokenizer [+ image processor]) without network.

    Missing primitive tokens are added to the tokenizer and the embeddings are
    resized (the new rows are untrained until the target is fine-tuned).
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers as tf

    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise PlanningError(f"{path}: no config.json (not a checkpoint directory)")
    cfg = tf.AutoConfig.from_pretrained(path, local_files_only=True)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if hasattr(cfg, "vision_config"):
        model = tf.AutoModelForImageTextToText.from_pretrained(path, **kwargs)
        processor = tf.Qwen2VLImageProcessorPil.from_pretrained(path, local_files_only=True)
    else:
        model = tf.AutoModelForCausalLM.from_pretrained(path, **kwargs)
        processor = None
    tok = tf.AutoTokenizer.from_pretrained(path, local_files_only=True)
    if V.add_primitive_tokens(tok):
        model.resize_token_embeddings(len(tok))
    return TargetAdapter(model, tok, processor, feature_layers)
