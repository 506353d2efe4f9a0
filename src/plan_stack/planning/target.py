"""Frozen target VLM behind one small interface: prefill, block forward, rollback.

Wraps a Hugging Face `transformers` Qwen3 (text) or Qwen3-VL model. The
adapter owns the KV cache and the position bookkeeping so that decoders only
deal with token ids:

* positions: Qwen3-VL uses multi-axis (t, h, w) rotary positions; after the
  prompt every axis equals `sequence_index + rope_delta`, where the delta comes
  from the image grid. We compute the prompt positions once with the model's
  own `get_rope_index` and pass explicit 4-row position ids (text row + 3 mrope
  rows) on every later forward, so a block of any length, a rollback and a
  re-forward all land on the same positions (HF's assisted-generation path
  re-derives them from the cache and gets blocks wrong);
* cache rollback crops the dynamic cache to a committed length;
* every forward returns the logits, the concatenated hidden states of the
  drafter's feature layers and the last hidden state (plan features);
* the prefill's text part and the steps after it (`forward`) run the model's
  own text layers and weights directly (`_direct_prompt`, `_direct_forward`,
  `text_stack.run_layers`) instead of through the model's `forward`: a decode step is a few tokens
  through a few small layers, and transformers' per-call machinery (masks,
  output capture, kwargs plumbing) was half of it. Same operations in the
  same order (image embeddings and deepstack features as the model adds
  them): tests compare every output with the model's forward, to the bit on
  CPU float32. The vision tower and `get_rope_index` stay the model's.

Nothing here imports ROS. Loading, saving and building a target: `target_build`.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from plan_stack.planning import vocab as V
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.text_stack import direct_layers, rotate_half, run_layers

if TYPE_CHECKING:
    from transformers import DynamicCache


@dataclasses.dataclass
class Prompt:
    """Model inputs of one request: token ids and (VL) preprocessed images."""

    input_ids: torch.Tensor  # [T] long
    pixel_values: torch.Tensor | None = None  # [patches, C*t*p*p]
    image_grid_thw: torch.Tensor | None = None  # [images, 3]
    image_size: tuple[int, int] | None = None  # (width, height) of the first image, pixels
    # Non-empty: a streaming prompt (`input_ids` = the frames' ids, then the text); each frame
    # attends only to itself, the text to everything, and frames already encoded are reused.
    frames: tuple[FrameSegment, ...] = ()


@dataclasses.dataclass
class FrameSegment:
    """One observation's images in a streaming prompt, preprocessed once.

    `key` identifies the frame across plans (the adapter caches its KV under it).
    """

    key: int
    input_ids: torch.Tensor  # [n] vision_start, image_pad x m, vision_end per camera
    pixel_values: torch.Tensor  # [patches, C*t*p*p]
    image_grid_thw: torch.Tensor  # [cameras, 3]
    image_size: tuple[int, int]  # (width, height) of the first image


@dataclasses.dataclass
class PrefillCounts:
    """Work of the last prefill, to report what streaming saved."""

    prompt_tokens: int = 0  # positions in the prompt (frames + text)
    prefilled_tokens: int = 0  # positions run through the target this time
    frames: int = 0  # frames in the prompt (0: a plain prompt)
    frames_encoded: int = 0  # frames run through the vision encoder this time

    @property
    def saved_fraction(self) -> float:
        return 1.0 - self.prefilled_tokens / max(self.prompt_tokens, 1)


@dataclasses.dataclass
class _FrameKV:
    """A frame's KV (it attends only to itself) and the (t, h, w) positions its keys are rotated for."""

    keys: list[torch.Tensor]  # per layer [1, kv_heads, n, head_dim], rotated for `positions`
    values: list[torch.Tensor]  # per layer [1, kv_heads, n, head_dim]
    features: torch.Tensor  # [n, 5H]
    last_hidden: torch.Tensor  # [n, H]
    positions: torch.Tensor  # [3, 1, n] (t, h, w) positions the keys are rotated for


@dataclasses.dataclass
class StepOut:
    """Outputs of one target forward over n positions."""

    logits: torch.Tensor  # [n, V] float32 (only the last row when the forward was asked for the last only)
    features: torch.Tensor  # [n, len(feature_layers) * H] drafter context features
    last_hidden: torch.Tensor  # [n, H] final (normed) hidden state: plan features
    vision_ms: float = 0.0


@dataclasses.dataclass
class TeacherForced:
    """One whole sequence's outputs of `TargetAdapter.teacher_forced` (a `StepOut` without logits)."""

    features: torch.Tensor  # [n, len(feature_layers) * H] drafter context features
    last_hidden: torch.Tensor  # [n, H] final (normed) hidden state: plan features


def spread_layers(num_layers: int, count: int = 5) -> tuple[int, ...]:
    """`count` target layers spread over the depth (DFlash uses 1..L-3; tiny models use 0..L-2).

    Layers may repeat when the target has fewer layers than `count`.
    """
    lo, hi = (1, num_layers - 3) if num_layers >= 8 else (0, max(num_layers - 2, 0))
    return tuple(int(round(x)) for x in np.linspace(lo, hi, count))


class TargetAdapter:
    """Stateful (one request at a time) wrapper of a frozen HF target model."""

    def __init__(self, model: Any, tokenizer: Any, image_processor: Any = None,
                 feature_layers: Sequence[int] | None = None):
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        cfg = model.config
        self.is_vl = hasattr(cfg, "vision_config")
        self.text_config = cfg.get_text_config() if self.is_vl else cfg
        self.hidden_size = int(self.text_config.hidden_size)
        self.num_layers = int(self.text_config.num_hidden_layers)
        self.feature_layers = tuple(feature_layers) if feature_layers else spread_layers(self.num_layers)
        if any(not 0 <= li < self.num_layers for li in self.feature_layers):
            raise PlanningError(f"feature_layers {self.feature_layers} outside 0..{self.num_layers - 1}")
        vocab = V.Vocab.from_tokenizer(tokenizer)
        self.vocab = dataclasses.replace(vocab, size=int(self.text_config.vocab_size))
        if len(tokenizer) > self.vocab.size:
            raise PlanningError(f"tokenizer has {len(tokenizer)} tokens but the model only {self.vocab.size}")
        self.base = model.model  # Qwen3Model / Qwen3VLModel: returns hidden states
        self.lm_head = model.get_output_embeddings()
        self.embed_tokens = model.get_input_embeddings()
        self.dtype = next(model.parameters()).dtype
        self.cache: DynamicCache | None = None  # KV of the current request (None before the first prefill)
        self._rope_delta = 0
        self.prompt_length = 0
        #: streaming: reuse the KV of frames kept from the previous prefill (False: recompute every frame)
        self.reuse_frames = True
        self._frames: dict[int, _FrameKV] = {}
        self.last_prefill = PrefillCounts()
        #: an exported vision encoder (`engines.runtime.EngineVision`); None: the PyTorch tower
        self.vision_encoder: Any = None
        #: decode steps run the text layers directly (`_direct_forward`); False: through the model's forward.
        #: True only for the layer structure it knows (`text_stack.direct_layers`)
        self._text_stack = direct_layers(self.base, self.text_config)
        self.direct_steps = self._text_stack is not None

    @property
    def _runs_direct(self) -> bool:
        """The prompt and the steps go through `_direct_stack` (on, and a structure it knows)."""
        return self.direct_steps and self._text_stack is not None

    # -- inputs --------------------------------------------------------------------
    def encode_prompt(self, text: str, images: Sequence[np.ndarray] = ()) -> Prompt:
        """Token ids (and image tensors) for `images` (HxWx3 uint8) followed by `text`."""
        if images and not self.is_vl:
            raise PlanningError("this target is text-only; it cannot take images")
        ids: list[int] = []
        pixel_values = grid = None
        size = None
        if images:
            if self.image_processor is None:
                raise PlanningError("a VL target needs an image processor")
            for im in images:
                if not (isinstance(im, np.ndarray) and im.ndim == 3 and im.shape[2] == 3):
                    raise PlanningError(f"images must be HxWx3 arrays, got {getattr(im, 'shape', type(im))}")
            size = (int(images[0].shape[1]), int(images[0].shape[0]))
            out = self.image_processor(images=list(images), return_tensors="pt")
            pixel_values, grid = out["pixel_values"], out["image_grid_thw"]
            merge = int(self.model.config.vision_config.spatial_merge_size)
            tok = self.tokenizer
            for thw in grid:
                n = int(thw.prod()) // (merge * merge)
                ids += [tok.convert_tokens_to_ids(V.VISION_START)] + [tok.convert_tokens_to_ids(V.IMAGE_PAD)] * n
                ids += [tok.convert_tokens_to_ids(V.VISION_END)]
        ids += self.tokenizer.encode(text, add_special_tokens=False)
        return Prompt(torch.tensor(ids, dtype=torch.long), pixel_values, grid, size)

    def encode_frame(self, key: int, images: Sequence[np.ndarray]) -> FrameSegment:
        """One observation's images (HxWx3 uint8, cameras in prompt order) as a streaming frame."""
        if not images:
            raise PlanningError("a frame needs at least one image")
        p = self.encode_prompt("", images)
        if p.pixel_values is None or p.image_grid_thw is None or p.image_size is None:
            raise PlanningError("streaming frames need a vision-language target")
        return FrameSegment(key, p.input_ids, p.pixel_values, p.image_grid_thw, p.image_size)

    def streaming_prompt(self, text: str, frames: Sequence[FrameSegment]) -> Prompt:
        """Frames (oldest first) then `text`: the same token ids as `encode_prompt` of all their images."""
        if not frames:
            raise PlanningError("a streaming prompt needs at least one frame")
        ids = torch.cat([f.input_ids for f in frames] + [torch.tensor(
            self.tokenizer.encode(text, add_special_tokens=False), dtype=torch.long)])
        return Prompt(ids, None, torch.cat([f.image_grid_thw for f in frames]), frames[0].image_size,
                      tuple(frames))

    def clear_frames(self) -> None:
        """Forget cached frames (the next streaming prefill encodes every frame)."""
        self._frames = {}

    # -- core ----------------------------------------------------------------------
    @property
    def length(self) -> int:
        """Committed positions in the KV cache."""
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    @property
    def device(self) -> torch.device:
        """Where the model runs; inputs are moved there and outputs (`StepOut`) come back on the CPU."""
        return next(self.model.parameters()).device

    def _image_features(self, pixel_values: torch.Tensor, grid: torch.Tensor) -> Any:
        """The vision tower's output for the prompt's images: an exported engine when one is attached
        (`vision_encoder`, see `plan_stack.engines`) and handles this image layout, else PyTorch."""
        pixel_values = pixel_values.to(self.device, self.dtype)
        if self.vision_encoder is not None:
            out = self.vision_encoder(pixel_values, grid)
            if out is not None:
                return out
        return self.base.get_image_features(pixel_values, grid.to(self.device), return_dict=True)

    def _positions(self, start: int, n: int) -> torch.Tensor:
        text = torch.arange(start, start + n).view(1, 1, n)
        if not self.is_vl:
            return text[0]  # [1, n]
        return torch.cat([text, (text + self._rope_delta).expand(3, 1, n)], 0)  # [4, 1, n]

    def _check_cache(self, expected: int) -> None:
        """The forward must have filled our KV cache: a transformers whose model forward names it otherwise
        ignores `cache=` and every later step would decode without context (seen with 5.17)."""
        if self.length != expected:
            import transformers

            raise PlanningError(f"transformers {transformers.__version__}: the model did not fill the KV cache "
                                f"({self.length} positions, expected {expected}); plan_stack needs "
                                "transformers>=5.24 (requirements/runtime.txt pins it)")

    def _run(self, ids: torch.Tensor, position_ids: torch.Tensor, last_logits_only: bool = False,
             **extra: Any) -> StepOut:
        dev = self.device
        expected = self.length + ids.numel()
        out = self.base(input_ids=ids.view(1, -1).to(dev), position_ids=position_ids.to(dev), cache=self.cache,
                        use_cache=True, output_hidden_states=True, **extra)
        self._check_cache(expected)
        return self._step_out(self._features(out.hidden_states)[0], out.last_hidden_state[0], last_logits_only)

    def _features(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        """Drafter context features [..., n, len(feature_layers) * H] from the per-layer hidden states
        (`hidden_states[0]` the embeddings, as transformers' `output_hidden_states` gives them)."""
        return torch.cat([hidden_states[li + 1] for li in self.feature_layers], dim=-1)

    def _step_out(self, feats: torch.Tensor, last: torch.Tensor, last_logits_only: bool) -> StepOut:
        logits = self.lm_head(last[-1:] if last_logits_only else last).float()
        return StepOut(logits=logits.cpu(), features=feats.cpu(), last_hidden=last.cpu())

    @torch.no_grad()
    def prefill(self, prompt: Prompt, last_logits_only: bool = False) -> StepOut:
        """Reset the cache and run the prompt; `vision_ms` is the image encoder's share.

        `last_logits_only`: logits of the last position alone (a decoder needs only the first output token's;
        the LM head over the whole prompt costs as much as a layer)."""
        from transformers import DynamicCache

        ids = prompt.input_ids.view(-1)
        if ids.numel() == 0:
            raise PlanningError("empty prompt")
        if prompt.frames:
            return self._prefill_frames(prompt, last_logits_only)
        self._frames = {}
        self.last_prefill = PrefillCounts(ids.numel(), ids.numel(), 0, 0)
        self.cache = DynamicCache()
        t_len = ids.numel()
        extra: dict[str, Any] = {}
        vis: Any = None  # the vision tower's output for the prompt's images
        vision_ms = 0.0
        if self.is_vl:
            image_pad = self.model.config.image_token_id
            mm = (ids == image_pad).int().view(1, -1)
            if prompt.pixel_values is not None and prompt.image_grid_thw is not None:
                t0 = time.perf_counter()
                vis = self._image_features(prompt.pixel_values, prompt.image_grid_thw)
                vision_ms = (time.perf_counter() - t0) * 1e3
                extra["mm_encoder_outputs"] = {"image": vis}
                extra["image_grid_thw"] = prompt.image_grid_thw.to(self.device)
                pos3, delta = self.base.get_rope_index(ids.view(1, -1), mm_token_type_ids=mm,
                                                       image_grid_thw=prompt.image_grid_thw)
                self._rope_delta = int(delta.view(-1)[0])
            else:
                if bool(mm.any()):
                    raise PlanningError("prompt has image placeholders but no images")
                pos3, self._rope_delta = torch.arange(t_len).view(1, 1, -1).expand(3, 1, -1), 0
            position_ids = torch.cat([torch.arange(t_len).view(1, 1, -1), pos3], 0)
        else:
            position_ids = self._positions(0, t_len)
        if self._runs_direct:
            step = self._step_out(*self._direct_prompt(ids, position_ids, vis), last_logits_only)
        else:
            step = self._run(ids, position_ids, last_logits_only, **extra)
        step.vision_ms = vision_ms
        self.prompt_length = t_len
        return step

    def padded_batch(self, prompts: Sequence[Prompt]) -> dict[str, torch.Tensor]:
        """The model's forward inputs for several plain prompts at once (CPU): token ids right-padded with the
        pad token, the attention mask, and the images of those that have any, in prompt order.

        Right padding keeps every sequence's positions those of the unpadded sequence, and no real position
        attends to it. Streaming prompts (a frame-local mask, not a padding mask), empty prompts and image
        placeholders without their images (or images without placeholders) are refused.
        """
        if any(p.frames for p in prompts):
            raise PlanningError("a padded batch takes plain prompts, not streaming ones")
        seqs = [p.input_ids.view(-1) for p in prompts]
        if not seqs or any(s.numel() == 0 for s in seqs):
            raise PlanningError("empty prompt")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(seqs), max(s.numel() for s in seqs)), int(pad), dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :s.numel()] = s
            attn[i, :s.numel()] = 1
        batch = {"input_ids": ids, "attention_mask": attn}
        if not self.is_vl:
            return batch
        image_pad = self.model.config.image_token_id
        pixels, grids = [], []
        for i, p in enumerate(prompts):
            if bool((seqs[i] == image_pad).any()) != (p.pixel_values is not None and p.image_grid_thw is not None):
                raise PlanningError(f"prompt {i}: image placeholders and images do not go together")
            if p.pixel_values is not None and p.image_grid_thw is not None:
                pixels.append(p.pixel_values)
                grids.append(p.image_grid_thw)
        if pixels:
            batch["pixel_values"] = torch.cat(pixels).to(self.dtype)
            batch["image_grid_thw"] = torch.cat(grids)
            batch["mm_token_type_ids"] = (ids == image_pad).int()
        return batch

    @torch.no_grad()
    def teacher_forced(self, prompts: Sequence[Prompt]) -> list[TeacherForced]:
        """Features and last hidden states of whole sequences, one forward of their `padded_batch`.

        Each equals what `prefill(p)` gives, so training reads the frozen target a batch at a time instead of
        a sample at a time. No KV cache is kept.
        """
        if not prompts:
            return []
        batch = self.padded_batch(prompts)
        dev = self.device
        out = self.base(**{k: v.to(dev) for k, v in batch.items()}, use_cache=False, output_hidden_states=True)
        feats = self._features(out.hidden_states).cpu()
        last = out.last_hidden_state.cpu()
        lengths = batch["attention_mask"].sum(1).tolist()
        return [TeacherForced(feats[i, :n], last[i, :n]) for i, n in enumerate(lengths)]

    # -- streaming (FlashDrive) --------------------------------------------------------
    def _prefill_frames(self, prompt: Prompt, last_logits_only: bool = False) -> StepOut:
        """Prefill a streaming prompt, running only what is not cached from the previous prefill.

        Structure: each frame's tokens attend only to themselves (causally), the
        text after the frames attends to everything. A frame's KV then depends
        on nothing but the frame, and RoPE is relative, so a cached frame moved
        to another slot of the window only needs its keys re-rotated by the
        position shift (uniform over the t, h, w axes: every Qwen3-VL image
        block is offset by the same amount on all three); values, features
        and hidden states are unchanged. Positions are those of the plain
        prompt (`get_rope_index` over the whole window).

        The cached frames at the front of the window (rotated) form the KV
        cache; everything from the first frame not cached to the end of the
        text runs in one forward under the frame-local mask. With
        `reuse_frames=False` that is the whole prompt: the from-scratch
        reference of the same structure.
        """
        from transformers import DynamicCache

        if not self.is_vl:
            raise PlanningError("streaming prompts need a VL target")
        ids = prompt.input_ids.view(-1)
        frames = prompt.frames
        spans, start = [], 0
        for f in frames:
            spans.append((start, start + f.input_ids.numel()))
            start = spans[-1][1]
        if ids.numel() <= start:
            raise PlanningError("a streaming prompt needs text after the frames")
        mm = (ids == self.model.config.image_token_id).int().view(1, -1)
        grids = torch.cat([f.image_grid_thw for f in frames])
        pos3, delta = self.base.get_rope_index(ids.view(1, -1), mm_token_type_ids=mm, image_grid_thw=grids)
        self._rope_delta = int(delta.view(-1)[0])
        # cached frames at the front of the window, re-rotated to their slots
        cached: list[_FrameKV] = []
        for f, (a, b) in zip(frames, spans):
            kv = self._frames.get(f.key) if self.reuse_frames else None
            if kv is None:
                break
            shift = pos3[:, :, a:b] - kv.positions
            s = int(shift.view(-1)[0])
            if not bool((shift == s).all()):
                break  # cannot happen for Qwen3-VL image blocks; recompute rather than reuse wrongly
            cached.append(dataclasses.replace(kv, keys=[self._rotate(k, s) if s else k for k in kv.keys],
                                              positions=pos3[:, :, a:b]))
        first = spans[len(cached)][0] if len(cached) < len(frames) else start  # first position to run
        self.cache = cache = DynamicCache()
        if cached:
            for layer in range(self.num_layers):
                cache.update(torch.cat([kv.keys[layer] for kv in cached], 2),
                                  torch.cat([kv.values[layer] for kv in cached], 2), layer)
        # one forward over the rest: frame-local mask for frame tokens, full attention for the text
        run = frames[len(cached):]
        n = ids.numel() - first
        allowed = torch.ones(n, ids.numel(), dtype=torch.bool).tril(first)
        for a, b in spans[len(cached):]:
            allowed[a - first:b - first, :a] = False
        dev = self.device
        mask = torch.zeros(1, 1, n, ids.numel(), dtype=self.dtype).masked_fill_(~allowed, torch.finfo(self.dtype).min)
        mask = mask.to(dev)
        extra: dict[str, Any] = {}
        vis: Any = None
        vision_ms = 0.0
        if run:
            t0 = time.perf_counter()
            grid = torch.cat([f.image_grid_thw for f in run])
            vis = self._image_features(torch.cat([f.pixel_values for f in run]), grid)
            vision_ms = (time.perf_counter() - t0) * 1e3
            extra = {"mm_encoder_outputs": {"image": vis}, "image_grid_thw": grid.to(dev)}
        position_ids = torch.cat([torch.arange(first, ids.numel()).view(1, 1, -1), pos3[:, :, first:]], 0)
        if self._runs_direct:
            feats, last = self._direct_prompt(ids[first:], position_ids, vis, mask[0, 0])
        else:
            out = self.base(input_ids=ids[first:].view(1, -1).to(dev), position_ids=position_ids.to(dev),
                            cache=self.cache, use_cache=True, output_hidden_states=True, attention_mask=mask, **extra)
            self._check_cache(ids.numel())
            feats = self._features(out.hidden_states)[0]  # [n, 5H]
            last = out.last_hidden_state[0]  # [n, H]
        keep = {f.key: kv for f, kv in zip(frames, cached)}
        # Qwen3 caches only full-attention layers (keys/values tensors); transformers types the
        # layer list as a union with linear-attention layers that have neither
        layers: list[Any] = list(cache.layers)
        for f, (a, b) in zip(run, spans[len(cached):]):
            keep[f.key] = _FrameKV([c.keys[:, :, a:b] for c in layers],
                                   [c.values[:, :, a:b] for c in layers],
                                   feats[a - first:b - first], last[a - first:b - first], pos3[:, :, a:b])
        self._frames = keep if self.reuse_frames else {}
        self.prompt_length = ids.numel()
        self.last_prefill = PrefillCounts(ids.numel(), n, len(frames), len(run))
        text = last[-1:] if last_logits_only else last[start - first:]
        return StepOut(logits=self.lm_head(text).float().cpu(),
                       features=torch.cat([kv.features for kv in cached] + [feats]).cpu(),
                       last_hidden=torch.cat([kv.last_hidden for kv in cached] + [last]).cpu(), vision_ms=vision_ms)

    def _rotate(self, keys: torch.Tensor, shift: int) -> torch.Tensor:
        """Keys [1, h, n, d] rotated by `shift` positions on every (t, h, w) axis: RoPE(p) -> RoPE(p + shift)."""
        rotary = self.base.language_model.rotary_emb
        cos, sin = rotary(keys, torch.full((3, 1, 1), shift, dtype=torch.long, device=keys.device))  # [1, 1, d]
        return keys * cos.unsqueeze(1) + rotate_half(keys) * sin.unsqueeze(1)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor | Sequence[int], last_logits_only: bool = False) -> StepOut:
        """Append `tokens` [n] to the cache and return outputs for these n positions.

        `last_logits_only`: logits of the last position alone (a block whose tokens are already decided
        needs only the next token's; the LM head over all 65 positions of a trajectory is ≈ 5 % of its pass)."""
        if self.cache is None:
            raise PlanningError("forward before prefill")
        ids = torch.as_tensor(tokens, dtype=torch.long).view(-1)
        if ids.numel() == 0:
            raise PlanningError("forward over an empty block")
        positions = self._positions(self.length, ids.numel())
        if self._runs_direct:
            return self._direct_forward(ids, positions, last_logits_only)
        return self._run(ids, positions, last_logits_only)

    def _direct_forward(self, ids: torch.Tensor, position_ids: torch.Tensor, last_logits_only: bool) -> StepOut:
        """`_run` for tokens after the prompt, through the text layers' own weights (module docstring).

        After the prompt every position sees the whole cache and its block causally, no image token
        comes (the decoders' grammar has none), so no deepstack feature is added: a plain causal block."""
        if self.is_vl and bool((ids == self.model.config.image_token_id).any()):
            raise PlanningError("image placeholders after the prompt: images go into the prefill")
        n, past = ids.numel(), self.length
        mask = None if n == 1 else torch.ones(n, past + n, dtype=torch.bool, device=self.device).tril(past)
        h = self.embed_tokens(ids.view(1, -1).to(self.device))
        feats, last = self._direct_stack(h, position_ids, mask)
        return self._step_out(feats, last, last_logits_only)

    def _direct_prompt(self, ids: torch.Tensor, position_ids: torch.Tensor, images: Any,
                       mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`_direct_stack` for prompt tokens: the image embeddings (`images`, the vision tower's output for
        the placeholders among `ids`) replace their placeholders' and the deepstack features are added
        after the first layers, as the model's forward does. `mask` None: causal."""
        dev = self.device
        h = self.embed_tokens(ids.view(1, -1).to(dev))
        deepstack = None
        if images is not None:
            embeds = torch.cat(tuple(images.pooler_output)).to(dev, h.dtype)
            where = (ids == self.model.config.image_token_id).view(1, -1).to(dev)
            if int(where.sum()) != embeds.shape[0]:
                raise PlanningError(f"{int(where.sum())} image placeholders for {embeds.shape[0]} image embeddings")
            h = h.masked_scatter(where[..., None], embeds)
            deepstack = (where, [torch.cat(tuple(f)) for f in images.deepstack_features])
        return self._direct_stack(h, position_ids, mask, deepstack)

    def _direct_stack(self, h: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor | None,
                      deepstack: tuple[torch.Tensor, list[torch.Tensor]] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafter features [n, 5H] and final (normed) hidden states [n, H] of embeddings h [1, n, H] appended
        to the cache (`text_stack.run_layers`; position_ids [4, 1, n] VL / [1, n] text). `mask` [n, cached + n]
        (bool, True = may attend, or an additive float bias); None: causal over the block, which with an empty
        cache is the prompt (one position: everything). `deepstack`: (positions [1, n] of the image tokens,
        features added to them after layer 0, 1, ...)."""
        lm, dev, n, past = self._text_stack, self.device, h.shape[1], self.length
        assert lm is not None and self.cache is not None  # callers checked both
        cos, sin = lm.rotary_emb(h, (position_ids[1:] if self.is_vl else position_ids).to(dev))
        cos, sin = cos[:, None], sin[:, None]  # [1, 1, n, head_dim]: broadcast over heads
        hidden, last = run_layers(lm, self.cache, h, cos, sin, mask, dev, deepstack)
        self._check_cache(past + n)
        return self._features(hidden)[0], last[0]

    def rollback(self, length: int) -> None:
        """Drop cached positions beyond `length` (rejected draft / regenerated suffix)."""
        current = self.length
        if not self.prompt_length <= length <= current:
            raise PlanningError(f"rollback to {length} outside [{self.prompt_length}, {current}]")
        if length < current and self.cache is not None:
            self.cache.crop(length - current)  # negative: number of positions to drop

    def greedy(self, logits: torch.Tensor, allowed: torch.Tensor | None = None) -> int:
        """Greedy next token from one logits row, optionally restricted to `allowed` ids."""
        if allowed is None:
            return int(logits.argmax())
        return int(allowed[logits[allowed].argmax()])
