"""Special tokens of the primitive vocabulary and their ids in a tokenizer.

Coordinates are single tokens `<0>`...`<1000>` so that every slot of a layout
holds exactly one token (position alignment). `<oof>` marks a
2D projection outside the image; `<text_mask>` is the drafter's MASK input.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import numpy as np

from plan_stack.planning.errors import PlanningError

N_BINS = 1000  #: coordinate tokens are <0>..<N_BINS>
COORD_TOKENS: tuple[str, ...] = tuple(f"<{k}>" for k in range(N_BINS + 1))
OOF = "<oof>"
TEXT_MASK = "<text_mask>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
BOX, BOX_END = "<box>", "</box>"
ROBOT, ROBOT_2D, ROBOT_END = "<robot_single>", "<robot_single_2d>", "</robot>"
DRIVE, DRIVE_2D, DRIVE_END = "<drive>", "<drive_2d>", "</drive>"
#: tokens that open a primitive (the anchor of a primitive block)
START_TOKENS: tuple[str, ...] = (BOX, ROBOT, ROBOT_2D, DRIVE, DRIVE_2D)
END_TOKENS: tuple[str, ...] = (BOX_END, ROBOT_END, DRIVE_END)
#: vision placeholders used by Qwen-VL style prompts (tiny tokenizers add them too)
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"
EOS = "<|im_end|>"
PAD = "<|endoftext|>"

PRIMITIVE_TOKENS: tuple[str, ...] = (
    COORD_TOKENS + (OOF, TEXT_MASK, TOOL_CALL_START, TOOL_CALL_END) + START_TOKENS + END_TOKENS
)
CONTROL_TOKENS: tuple[str, ...] = (PAD, EOS, VISION_START, IMAGE_PAD, VISION_END)


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Ids of the special tokens in one tokenizer (looked up once, used in hot loops)."""

    ids: dict[str, int] = dataclasses.field(repr=False)
    size: int
    eos_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, extra_eos: Iterable[str] = ()) -> Vocab:
        """Look up every primitive token; raise naming the first missing one."""
        ids = {}
        for tok in PRIMITIVE_TOKENS:
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid is None or tid == tokenizer.unk_token_id:
                raise PlanningError(f"tokenizer lacks the special token {tok!r} (call add_primitive_tokens)")
            ids[tok] = int(tid)
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        for tok in extra_eos:
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid is not None and tid != tokenizer.unk_token_id:
                eos.append(int(tid))
        return cls(ids=ids, size=len(tokenizer), eos_ids=tuple(sorted(set(eos))))

    def __getitem__(self, token: str) -> int:
        return self.ids[token]

    @property
    def coord0(self) -> int:
        return self.ids[COORD_TOKENS[0]]

    def coord_ids(self) -> list[int]:
        return [self.ids[t] for t in COORD_TOKENS]

    def coord_value(self, token_id: int) -> int | None:
        """Bin k of a coordinate token id, or None if it is not a coordinate."""
        k = token_id - self.coord0
        if 0 <= k <= N_BINS and self.ids[COORD_TOKENS[k]] == token_id:
            return k
        return None

    @functools.cached_property
    def _coord_id_array(self) -> np.ndarray:
        return np.array(self.coord_ids(), dtype=np.int64)

    def coord_bins(self, token_ids: np.ndarray) -> np.ndarray | None:
        """`coord_value` of many ids at once: their bins, or None if any of them is not a coordinate."""
        ids = np.asarray(token_ids, dtype=np.int64)
        bins = ids - self.coord0
        if not bool(((bins >= 0) & (bins <= N_BINS)).all()) or not bool((self._coord_id_array[bins] == ids).all()):
            return None
        return bins

    @property
    def start_ids(self) -> frozenset[int]:
        return frozenset(self.ids[t] for t in START_TOKENS)


def add_primitive_tokens(tokenizer: Any) -> int:
    """Add the primitive vocabulary as special tokens; returns how many were new.

    A real checkpoint that lacks them must resize its embeddings afterwards
    (the new rows are untrained until the target is fine-tuned).
    """
    missing = [t for t in PRIMITIVE_TOKENS if tokenizer.convert_tokens_to_ids(t) in (None, tokenizer.unk_token_id)]
    if not missing:
        return 0
    return int(tokenizer.add_special_tokens({"additional_special_tokens": missing},
                                            replace_extra_special_tokens=False))


_CORPUS = (
    "pick up the red cube and place it in the bin. open the drawer. close the lid. "
    "move the left gripper to the cup, then lift it. drive forward and keep the lane. "
    "turn left at the junction. stop before the crosswalk. grasp the handle and pull. "
    'the robot arm reaches for the object on the table. {"name": "atomic_decoding", '
    '"arguments": {"block_size": 54}} 0123456789 plan the next motion of the gripper.'
)


def build_tokenizer(vocab_size: int = 512) -> Any:
    """A small byte-level BPE tokenizer with the primitive and control tokens.

    For models built from a config (tests, benchmarks, the shipped tiny
    planner); trained in well under a second on a fixed built-in corpus, so it
    is deterministic and needs no network.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(CONTROL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD)
    add_primitive_tokens(fast)
    return fast
