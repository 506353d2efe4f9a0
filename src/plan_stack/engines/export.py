"""Export the stack's fixed-shape models to ONNX, with a manifest.

What is exported (and why only this):
* `flow_step`: the action head's velocity v(x, t | state token, cross K/V),
  the part that runs N times per chunk; the conditioning encoder runs once
  per chunk and stays in PyTorch. The number of conditioning tokens is a
  dynamic axis.
* `draft_B<B>`: the drafter's one parallel pass over a block of size B
  (one file per primitive layout block size, plus the text block), reading
  the drafter's cached context K/V (dynamic length); context extension on
  commit stays in PyTorch.
* `vision_<W>x<H>x<N>`: the target's vision encoder for N images of one
  size (the grid is fixed, so the graph is too); it returns the image
  embeddings and the deepstack features the target's decoder layers add.

The target's KV-cached autoregressive forward is not exported: its cache
grows every step and is rolled back on rejected drafts, which an ONNX graph
with static inputs cannot express cheaply (the VFlash paper's numbers come
from a custom TensorRT-LLM-style runtime with a paged KV cache; we keep the
PyTorch forward, which is the honest comparison on CPU).

`engines.json` in the output directory lists every file with its input and
output names, shapes (dynamic axes by name), opset and the SHA-256 of the
checkpoint files it came from, so a runner can refuse a stale export.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from plan_stack.device import EngineError
from plan_stack.manifests import read_json_manifest

__all__ = ["OPSET", "MANIFEST", "DraftPass", "VisionEncoder", "export_flow_step", "export_drafter",
           "export_vision", "read_manifest", "directory_hash"]

OPSET = 18
MANIFEST = "engines.json"


def directory_hash(path: str | os.PathLike) -> str:
    """SHA-256 over the names and bytes of every file under `path` (sorted): the source checkpoint's identity."""
    h = hashlib.sha256()
    root = Path(path)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(root)).encode())
        h.update(file.read_bytes())
    return h.hexdigest()


class DraftPass(nn.Module):
    """`Drafter.draft` for one block size as a pure function of the cached context.

    anchor [1] int64, start [1] int64 (the block's first position = cached
    context length), ctx_k / ctx_v [layers, kv_heads, T, head_dim] -> logits [B-1, V].
    """

    def __init__(self, drafter: Any, block_size: int) -> None:
        super().__init__()
        if block_size < 2:
            raise EngineError(f"block size {block_size} < 2")
        self.drafter = drafter
        self.block_size = int(block_size)

    def forward(self, anchor: torch.Tensor, start: torch.Tensor, ctx_k: torch.Tensor,
                ctx_v: torch.Tensor) -> torch.Tensor:
        d = self.drafter
        masks = torch.full((self.block_size - 1,), d.config.mask_token_id, dtype=torch.long)
        ids = torch.cat([anchor.view(1).long(), masks])
        pos = start.view(1).long() + torch.arange(self.block_size)
        h = d.embed(ids)
        for i, layer in enumerate(d.layers):
            h = layer(h, pos, ctx_k[i], ctx_v[i])
        return d.logits(h[1:])


class VisionEncoder(nn.Module):
    """The target's image encoder for a fixed image grid: pixel_values -> (embeds [N, H], deepstack [L, N, H])."""

    def __init__(self, target: Any, image_grid_thw: torch.Tensor) -> None:
        super().__init__()
        self.base = target.base
        self.register_buffer("grid", image_grid_thw.clone())

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.base.get_image_features(pixel_values, self.grid, return_dict=True)
        embeds = torch.cat(list(out.pooler_output), 0)
        deep = [torch.cat(list(f), 0) if isinstance(f, (list, tuple)) else f for f in out.deepstack_features]
        return embeds, torch.stack(deep, 0)


def _export(module: nn.Module, args: tuple, path: Path, inputs: Sequence[str], outputs: Sequence[str],
            dynamic: dict[str, dict[int, str]]) -> dict[str, Any]:
    """torch -> ONNX (TorchScript exporter: fixed control flow, no graph breaks) and the manifest entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer and exporter deprecation chatter; parity is tested instead
        torch.onnx.export(module, args, str(path), input_names=list(inputs), output_names=list(outputs),
                          dynamic_axes=dynamic or None, opset_version=OPSET, dynamo=False)
        results = module(*args)
    results = results if isinstance(results, tuple) else (results,)

    def shape(t: torch.Tensor, name: str) -> list[Any]:
        dims: list[Any] = list(t.shape)
        for axis, label in dynamic.get(name, {}).items():
            dims[axis] = label
        return dims

    return {
        "file": path.name,
        "inputs": {n: {"shape": shape(a, n), "dtype": str(a.dtype).removeprefix("torch.")}
                   for n, a in zip(inputs, args)},
        "outputs": {n: {"shape": shape(r, n), "dtype": str(r.dtype).removeprefix("torch.")}
                    for n, r in zip(outputs, results)},
        "opset": OPSET,
    }


def flow_step_inputs(head: Any, tokens: int = 4) -> tuple[list[str], tuple[torch.Tensor, ...]]:
    """Input names and example tensors of the flow step (names: x, t, state_token, k0, v0, k1, v1, ...)."""
    cfg = head.cfg
    with torch.no_grad():
        ctx = head.encode(torch.zeros(1, cfg.state_dim), torch.zeros(1, tokens, cfg.cond_width))
    names = ["x", "t", "state_token"] + [f"{kv}{i}" for i in range(len(ctx.kv)) for kv in ("k", "v")]
    args = (torch.zeros(1, cfg.horizon, cfg.action_dim), torch.full((1, cfg.horizon), 0.5), ctx.state_token,
            *[a for pair in ctx.kv for a in pair])
    return names, args


def export_flow_step(head: Any, out_dir: str | os.PathLike, name: str = "flow_step") -> dict[str, Any]:
    from plan_stack.actions.policy import VelocityModule

    names, args = flow_step_inputs(head)
    dynamic = {n: {2: "cond_tokens"} for n in names[3:]}
    return _export(VelocityModule(head), args, Path(out_dir) / f"{name}.onnx", names, ["v"], dynamic)


def export_drafter(drafter: Any, block_sizes: Iterable[int], out_dir: str | os.PathLike,
                   context_len: int = 8) -> dict[str, dict[str, Any]]:
    """One ONNX file per block size; keys `draft_B<B>`."""
    c = drafter.config
    dtype = drafter.fc.weight.dtype
    ctx = torch.zeros(c.layers, c.kv_heads, context_len, c.head_dim, dtype=dtype)
    entries = {}
    for b in sorted(set(int(b) for b in block_sizes)):
        args = (torch.tensor([0]), torch.tensor([context_len]), ctx, ctx)
        entries[f"draft_B{b}"] = _export(DraftPass(drafter, b), args, Path(out_dir) / f"draft_B{b}.onnx",
                                         ["anchor", "start", "ctx_k", "ctx_v"], ["logits"],
                                         {"ctx_k": {2: "context"}, "ctx_v": {2: "context"}})
        entries[f"draft_B{b}"]["block_size"] = b
    return entries


def drafter_block_sizes(manifest: dict[str, Any], text_block: int, override: str | None = None) -> list[int]:
    """Block sizes a model drafts: `override` ("54,108"), else the manifest's `block_sizes`, else its
    `primitive_kinds` x `waypoints`; always with the DFlash text block."""
    from plan_stack.planning import layouts as L

    if override:
        return sorted({int(b) for b in override.split(",") if b.strip()} | {text_block})
    if manifest.get("block_sizes"):
        sizes = {int(b) for b in manifest["block_sizes"]}
    else:
        waypoints = manifest.get("waypoints", [])
        waypoints = waypoints if isinstance(waypoints, list) else [waypoints]
        sizes = {L.block_size_of(k, int(p)) for k in manifest.get("primitive_kinds", []) for p in waypoints}
    return sorted(sizes | {text_block})


def export_planner(model: Any, out_dir: str | os.PathLike, block_sizes: str | None = None) -> dict[str, dict]:
    """The drafter passes and the vision encoders (one frame's cameras, and the whole streaming window)
    of a loaded planner model directory."""
    models: dict[str, dict] = {}
    if model.drafter is not None:
        sizes = drafter_block_sizes(model.manifest, model.decoder().text_block, block_sizes)
        models.update(export_drafter(model.drafter, sizes, out_dir))
    if model.target.is_vl and model.image_size:
        cameras = max(len(model.cameras), 1)
        for images in sorted({cameras, cameras * int(model.manifest["history_frames"])}):
            models.update(export_vision(model.target, model.image_size, images, out_dir))
    return {k: {**e, "source": "planner"} for k, e in models.items()}


def vision_key(image_size: tuple[int, int], images: int) -> str:
    return f"vision_{image_size[0]}x{image_size[1]}x{images}"


def export_vision(target: Any, image_size: tuple[int, int], images: int,
                  out_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The vision encoder for `images` images of `image_size` (W, H); key `vision_<W>x<H>x<N>`."""
    w, h = image_size
    prompt = target.encode_prompt("", [np.zeros((h, w, 3), np.uint8)] * images)
    key = vision_key(image_size, images)
    entry = _export(VisionEncoder(target, prompt.image_grid_thw), (prompt.pixel_values.to(target.dtype),),
                    Path(out_dir) / f"{key}.onnx", ["pixel_values"], ["embeds", "deepstack"], {})
    entry["image_grid_thw"] = prompt.image_grid_thw.tolist()
    return {key: entry}


def read_manifest(out_dir: str | os.PathLike) -> dict[str, Any]:
    """engines.json of an engines directory; EngineError when it is missing, malformed or names a missing file."""
    doc = read_json_manifest(out_dir, MANIFEST, EngineError, "run `plan-stack export` first")
    file = Path(out_dir) / MANIFEST
    for key, entry in doc.get("models", {}).items():
        if not (Path(out_dir) / entry.get("file", "")).is_file():
            raise EngineError(f"{file}: model {key} names a missing file {entry.get('file')!r}")
    return doc


def write_manifest(out_dir: str | os.PathLike, models: dict[str, dict[str, Any]],
                   sources: dict[str, dict[str, str]]) -> Path:
    """`engines.json`: {"opset", "models": {key: entry(+ "source")}, "sources": {name: {path, sha256}}}."""
    file = Path(out_dir) / MANIFEST
    doc = {"opset": OPSET, "torch": torch.__version__, "models": models, "sources": sources}
    file.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return file
