"""Run exported models: onnxruntime (`onnx`) and TensorRT (`tensorrt`) runners, and the
adapters that put them where the PyTorch modules were (flow step, drafter pass, vision encoder).

A runner takes named torch tensors and returns torch tensors, so callers do
not care which backend runs. Adapters check shapes against the export and
raise `EngineError` with the reason instead of computing something else.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from plan_stack.device import EngineError, Placement, import_onnxruntime, onnx_providers, resolve_placement
from plan_stack.engines.export import read_manifest, vision_key

__all__ = ["Runner", "OrtRunner", "TrtRunner", "tensorrt_status", "EngineSet", "EngineDrafter", "EngineVision",
           "FlowStepEngine", "PlannerEngines"]

#: (min, typical, max) extents of the dynamic axes for TensorRT optimisation profiles
DYNAMIC_BOUNDS: dict[str, tuple[int, int, int]] = {
    "cond_tokens": (1, 16, 512),
    "context": (1, 512, 8192),
}


class Runner(Protocol):
    input_names: list[str]
    output_names: list[str]

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]: ...


class OrtRunner:
    """One onnxruntime session (threads fixed, all graph optimisations on)."""

    def __init__(self, path: str | os.PathLike, providers: list[str], threads: int = 1) -> None:
        ort = import_onnxruntime()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(int(threads), 1)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), opts, providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        feed = {n: t.detach().cpu().numpy() for n, t in zip(self.input_names, inputs)}
        return [torch.from_numpy(np.ascontiguousarray(a)) for a in self.session.run(None, feed)]


def tensorrt_status() -> tuple[bool, str]:
    """(usable, reason): TensorRT needs the `tensorrt` package and a CUDA device."""
    try:
        import tensorrt  # noqa: F401
    except ImportError as exc:
        return False, f"the tensorrt Python package is not importable ({exc})"
    if not torch.cuda.is_available():
        return False, "tensorrt is installed but torch sees no CUDA device"
    return True, "ok"


class TrtRunner:
    """A TensorRT engine built from an exported ONNX file (cached next to it as `<name>.<fp>.engine`).

    Dynamic axes get one optimisation profile from DYNAMIC_BOUNDS. Inputs and
    outputs are CUDA torch tensors; the engine runs on torch's current stream.
    """

    def __init__(self, path: str | os.PathLike, entry: dict[str, Any], fp16: bool = True) -> None:
        ok, reason = tensorrt_status()
        if not ok:
            raise EngineError(f"backend tensorrt unavailable: {reason}")
        import tensorrt as trt

        self._trt = trt
        logger = trt.Logger(trt.Logger.WARNING)
        onnx_path = Path(path)
        engine_path = onnx_path.with_suffix(f".{'fp16' if fp16 else 'fp32'}.engine")
        if engine_path.is_file() and engine_path.stat().st_mtime >= onnx_path.stat().st_mtime:
            blob = engine_path.read_bytes()
        else:
            blob = self._build(trt, logger, onnx_path, entry, fp16)
            engine_path.write_bytes(blob)
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
        if self.engine is None:
            raise EngineError(f"{engine_path}: TensorRT could not deserialise the engine")
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]

    @staticmethod
    def _build(trt: Any, logger: Any, onnx_path: Path, entry: dict[str, Any], fp16: bool) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_path.read_bytes()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise EngineError(f"{onnx_path}: TensorRT cannot parse it: {errors}")
        config = builder.create_builder_config()
        if fp16:
            config.set_flag(trt.BuilderFlag.FP16)
        profile = builder.create_optimization_profile()
        for name, spec in entry["inputs"].items():
            dims = spec["shape"]
            lo, opt, hi = ([], [], [])
            for d in dims:
                b = DYNAMIC_BOUNDS.get(d) if isinstance(d, str) else (d, d, d)
                if b is None:
                    raise EngineError(f"{onnx_path}: no TensorRT bounds for dynamic axis {d!r}")
                lo.append(b[0])
                opt.append(b[1])
                hi.append(b[2])
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise EngineError(f"{onnx_path}: TensorRT engine build failed (see the TensorRT log)")
        return bytes(blob)

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        trt = self._trt
        keep = []
        for name, t in zip(self.input_names, inputs):
            t = t.to("cuda").contiguous()
            keep.append(t)
            self.context.set_input_shape(name, tuple(t.shape))
            self.context.set_tensor_address(name, t.data_ptr())
        outs = []
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = torch.from_numpy(np.empty(0, dtype=trt.nptype(self.engine.get_tensor_dtype(name)))).dtype
            out = torch.empty(shape, dtype=dtype, device="cuda")
            self.context.set_tensor_address(name, out.data_ptr())
            outs.append(out)
        stream = torch.cuda.current_stream()
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise EngineError("TensorRT execution failed")
        stream.synchronize()
        return outs


class EngineSet:
    """The exported models of one directory (`plan-stack export`), runnable on one backend."""

    def __init__(self, directory: str | os.PathLike, backend: str = "onnx", placement: Placement | None = None,
                 threads: int = 1) -> None:
        if backend not in ("onnx", "tensorrt"):
            raise EngineError(f"EngineSet backend must be 'onnx' or 'tensorrt', got {backend!r}")
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        self.backend = backend
        self.placement = placement or resolve_placement("auto")
        if backend == "tensorrt" and not self.placement.is_cuda:
            raise EngineError("backend tensorrt needs device cuda")
        self.threads = threads
        self._runners: dict[str, Runner] = {}

    @property
    def keys(self) -> list[str]:
        return sorted(self.manifest.get("models", {}))

    def entry(self, key: str) -> dict[str, Any]:
        try:
            return self.manifest["models"][key]
        except KeyError:
            raise EngineError(f"{self.directory}: no exported model {key!r} (have {self.keys})") from None

    def runner(self, key: str) -> Runner:
        if key not in self._runners:
            entry = self.entry(key)
            path = self.directory / entry["file"]
            if self.backend == "onnx":
                self._runners[key] = OrtRunner(path, onnx_providers("onnx", self.placement), self.threads)
            else:
                self._runners[key] = TrtRunner(path, entry, fp16=self.placement.dtype != torch.float32)
        return self._runners[key]

    def check_source(self, name: str, sha256: str) -> None:
        """Refuse an export made from other weights than the ones loaded."""
        have = self.manifest.get("sources", {}).get(name, {}).get("sha256")
        if have != sha256:
            raise EngineError(f"{self.directory}: export of {name!r} was made from other weights "
                              f"(sha256 {str(have)[:12]} != {sha256[:12]}); run `plan-stack export` again")

    # --- adapters -----------------------------------------------------------------------------
    def flow_step(self, key: str = "flow_step") -> Callable[..., torch.Tensor]:
        """v = f(x, t, state_token, k0, v0, ...) like `actions.policy.VelocityModule`."""
        runner = self.runner(key)
        n_inputs = len(self.entry(key)["inputs"])

        def step(x: torch.Tensor, t: torch.Tensor, *ctx: torch.Tensor) -> torch.Tensor:
            if 2 + len(ctx) != n_inputs:
                raise EngineError(f"{key}: expects {n_inputs} inputs, got {2 + len(ctx)}")
            return runner.run((x, t, *ctx))[0].to(x.device, x.dtype)

        return step

    def drafter(self, drafter: Any) -> EngineDrafter:
        return EngineDrafter(drafter, self)

    def vision(self, image_size: tuple[int, int], images: int) -> Callable[..., Any]:
        """A stand-in for `get_image_features(pixel_values, grid, return_dict=True)` for one image layout."""
        key = vision_key(image_size, images)
        entry = self.entry(key)
        runner = self.runner(key)
        grid = torch.tensor(entry["image_grid_thw"])

        def encode(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor, return_dict: bool = True) -> Any:
            from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

            if not torch.equal(image_grid_thw.cpu(), grid):
                raise EngineError(f"{key}: exported for image grid {grid.tolist()}, "
                                  f"got {image_grid_thw.tolist()}")
            embeds, deep = runner.run((pixel_values,))
            per_image = (grid.prod(-1) // embeds_per_patch(grid, embeds)).tolist()
            pooled = tuple(torch.split(embeds.to(pixel_values.device), per_image))
            deepstack = [tuple(torch.split(d.to(pixel_values.device), per_image)) for d in deep]
            # per-image tuples, as Qwen3-VL's own get_image_features returns them (its output
            # dataclass annotates plain tensors)
            fields: dict[str, Any] = {"pooler_output": pooled, "deepstack_features": deepstack}
            return BaseModelOutputWithDeepstackFeatures(**fields)

        return encode


def embeds_per_patch(grid: torch.Tensor, embeds: torch.Tensor) -> int:
    """Patches per output embedding (the spatial merge factor squared), from the exported shapes."""
    patches = int(grid.prod(-1).sum())
    if patches % embeds.shape[0]:
        raise EngineError(f"vision engine: {patches} patches do not merge into {embeds.shape[0]} embeddings")
    return patches // embeds.shape[0]


class EngineDrafter:
    """A drafter whose draft pass runs on an engine; context K/V stay in the PyTorch drafter.

    Block sizes without an exported model (e.g. the shortened text block at
    the end of the token budget) run the PyTorch pass and are counted per
    size in `fallback_sizes` (export them to remove the cost).
    """

    def __init__(self, drafter: Any, engines: EngineSet) -> None:
        self._drafter = drafter
        self._engines = engines
        self._by_size = {int(e["block_size"]): k for k, e in engines.manifest.get("models", {}).items()
                         if k.startswith("draft_B")}
        self.engine_calls = 0
        self.fallback_sizes: Counter[int] = Counter()

    @property
    def torch_fallbacks(self) -> int:
        return sum(self.fallback_sizes.values())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._drafter, name)

    @property
    def block_sizes(self) -> list[int]:
        return sorted(self._by_size)

    @torch.no_grad()
    def draft(self, anchor_id: int, block_size: int) -> torch.Tensor:
        key = self._by_size.get(int(block_size))
        if key is None:
            self.fallback_sizes[int(block_size)] += 1
            return self._drafter.draft(anchor_id, block_size)
        self.engine_calls += 1
        d = self._drafter
        d.flush()  # queued positions get their context K/V in PyTorch: the engine reads the cache
        ctx_k = torch.stack(d._ctx_k)
        ctx_v = torch.stack(d._ctx_v)
        start = torch.tensor([d.length])
        logits = self._engines.runner(key).run((torch.tensor([int(anchor_id)]), start, ctx_k, ctx_v))[0]
        return logits.float().cpu()


class FlowStepEngine:
    """The action head's flow step on an exported backend, for `ChunkPolicy(engine=...)`.

    `engine_dir` empty: the checkpoint is exported at construction into a
    temporary directory (removed by `close`); otherwise the directory must
    hold an export of exactly this checkpoint (checked by hash).
    """

    def __init__(self, head: Any, checkpoint_dir: str | os.PathLike, backend: str, placement: Placement,
                 engine_dir: str = "", threads: int = 1) -> None:
        import tempfile

        from plan_stack.engines import export as E

        self._tmp = None
        source = {"path": str(checkpoint_dir), "sha256": E.directory_hash(checkpoint_dir)}
        if not engine_dir:
            self._tmp = tempfile.TemporaryDirectory(prefix="plan_stack_engines_")
            engine_dir = self._tmp.name
            E.write_manifest(engine_dir, {"flow_step": E.export_flow_step(head, engine_dir)}, {"flow_step": source})
        self.engines = EngineSet(engine_dir, backend, placement, threads)
        self.engines.check_source("flow_step", source["sha256"])
        self._step = self.engines.flow_step()

    def __call__(self, x: torch.Tensor, t: torch.Tensor, *ctx: torch.Tensor) -> torch.Tensor:
        return self._step(x, t, *ctx)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class EngineVision:
    """`TargetAdapter.vision_encoder`: the exported vision encoders of an EngineSet, chosen by image grid.

    Returns None for an image layout with no export (the adapter then runs the
    PyTorch tower), counted per number of images in `fallback_images`.
    """

    def __init__(self, engines: EngineSet) -> None:
        self._engines = engines
        self._by_grid: dict[tuple, Callable[..., Any]] = {}
        for key, entry in engines.manifest.get("models", {}).items():
            if key.startswith("vision_") and "image_grid_thw" in entry:
                size, images = _vision_layout(key)
                self._by_grid[_grid_key(entry["image_grid_thw"])] = engines.vision(size, images)
        self.engine_calls = 0
        self.fallback_images: Counter[int] = Counter()

    @property
    def layouts(self) -> int:
        return len(self._by_grid)

    def __call__(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> Any:
        encode = self._by_grid.get(_grid_key(image_grid_thw.tolist()))
        if encode is None:
            self.fallback_images[int(image_grid_thw.shape[0])] += 1
            return None
        self.engine_calls += 1
        return encode(pixel_values, image_grid_thw.cpu())


def _grid_key(grid: list) -> tuple:
    return tuple(tuple(int(v) for v in row) for row in grid)


def _vision_layout(key: str) -> tuple[tuple[int, int], int]:
    """`vision_<W>x<H>x<N>` -> ((W, H), N)."""
    w, h, n = (int(v) for v in key.removeprefix("vision_").split("x"))
    return (w, h), n


class PlannerEngines:
    """A planner model's drafter pass and vision encoder on an exported backend, attached in place.

    `engine_dir` empty: the model is exported at construction into a temporary
    directory (removed by `close`); otherwise the directory must hold an export
    of exactly this model directory (checked by hash). The target's KV-cached
    forward stays in PyTorch.
    """

    def __init__(self, model: Any, backend: str, placement: Placement, engine_dir: str = "",
                 threads: int = 1) -> None:
        import tempfile

        from plan_stack.engines import export as E

        self._tmp = None
        source = E.directory_hash(model.path)
        if not engine_dir:
            self._tmp = tempfile.TemporaryDirectory(prefix="plan_stack_engines_")
            engine_dir = self._tmp.name
            E.write_manifest(engine_dir, E.export_planner(model, engine_dir),
                             {"planner": {"path": str(model.path), "sha256": source}})
        self.engines = EngineSet(engine_dir, backend, placement, threads)
        self.engines.check_source("planner", source)
        self.drafter = self.engines.drafter(model.drafter) if model.drafter is not None else None
        self.vision = EngineVision(self.engines)
        if self.drafter is not None:
            model.drafter = self.drafter
        if model.target.is_vl:
            model.target.vision_encoder = self.vision

    def counters(self) -> dict[str, int]:
        """Engine calls and PyTorch fallbacks since start (for diagnostics)."""
        out = {"vision_engine_calls": self.vision.engine_calls,
               "vision_torch_fallbacks": sum(self.vision.fallback_images.values())}
        if self.drafter is not None:
            out.update(draft_engine_calls=self.drafter.engine_calls, draft_torch_fallbacks=self.drafter.torch_fallbacks)
        return out

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
