"""Engine benchmark: each exported model on each backend, latency and parity with eager PyTorch.

Models (batch size 1, the shapes the nodes run):
* flow_step     the action head's velocity step (the shipped ALOHA head unless --head)
* draft_B<B>    the drafter's parallel pass over a primitive block (B=54: robot 2D+3D, P=10), context of
                --context positions, on a random Qwen3-VL-shaped target of --target size
* vision        the target's vision encoder, one --image-px image

Backends: torch eager, torch traced (TorchScript trace + freeze), onnxruntime (CPU here; CUDA provider on
a GPU with onnxruntime-gpu), tensorrt (only where the package and a GPU exist; otherwise the row says why).

Columns: model, backend, p50_ms, p95_ms, max_abs_diff (to eager, same inputs), speedup_vs_eager (p50 ratio).
The AR vs VFlash decode of a 54-token primitive on a 4B-shaped target in fp16 needs a GPU: on a CPU-only
machine its row is printed as skipped with the reason.

    python bench/engines.py [--reps 50] [--threads 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from report import add_json_option, report  # bench/report.py: shared table + JSON output

os.environ.setdefault("HF_HUB_OFFLINE", "1")

COLUMNS = ["model", "backend", "p50_ms", "p95_ms", "max_abs_diff", "speedup_vs_eager", "note"]
TARGET_SIZES = {  # tiny_target kwargs, Qwen3-VL shaped (as bench/decode.py)
    "9m": dict(hidden=256, layers=8, heads=4, kv_heads=2, head_dim=64, intermediate=1024, vision_hidden=128,
               vision_depth=2),
    "40m": dict(hidden=512, layers=12, heads=8, kv_heads=4, head_dim=64, intermediate=1536, vision_hidden=192,
                vision_depth=2),
}


def _time(fn, reps: int) -> tuple[float, float]:
    import torch

    fn()  # warm-up (first-run allocation, lazy initialisation)
    fn()
    ms = []
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    return statistics.median(ms), ms[min(len(ms) - 1, int(0.95 * len(ms)))]


def _rows_for(model: str, eager, traced, engine_runs: dict, args_: tuple, reps: int) -> list[dict]:
    import torch

    with torch.no_grad():
        ref = eager(*args_)
    ref = ref if isinstance(ref, tuple) else (ref,)
    rows = []
    p50_eager = None
    for backend, fn in [("torch_eager", eager), ("torch_traced", traced), *engine_runs.items()]:
        if isinstance(fn, str):
            rows.append({**dict.fromkeys(COLUMNS), "model": model, "backend": backend, "note": fn})
            continue
        with torch.no_grad():
            out = fn(*args_)
        out = out if isinstance(out, (tuple, list)) else (out,)
        diff = max(float((o.float().cpu() - r.float().cpu()).abs().max()) for o, r in zip(out, ref))
        with torch.no_grad():
            p50, p95 = _time(lambda: fn(*args_), reps)
        p50_eager = p50_eager or p50
        rows.append({"model": model, "backend": backend, "p50_ms": p50, "p95_ms": p95, "max_abs_diff": diff,
                     "speedup_vs_eager": p50_eager / p50, "note": ""})
    return rows


def _trace(module, args_):
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(module.eval(), args_)))


def _engine_runs(directory: Path, key: str) -> dict:
    from plan_stack.device import EngineError, resolve_placement
    from plan_stack.engines.runtime import EngineSet, tensorrt_status

    runs: dict = {}
    cpu = resolve_placement("cpu")
    ort = EngineSet(directory, "onnx", cpu).runner(key)
    runs["onnxruntime"] = lambda *a: ort.run(a)
    ok, reason = tensorrt_status()
    if ok:
        try:
            trt = EngineSet(directory, "tensorrt", resolve_placement("cuda", "float16")).runner(key)
            runs["tensorrt_fp16"] = lambda *a: trt.run(a)
        except EngineError as exc:
            runs["tensorrt_fp16"] = f"skipped: {exc}"
    else:
        runs["tensorrt_fp16"] = f"skipped: {reason}"
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime CPU threads")
    parser.add_argument("--head", default="", help="action head checkpoint (default: the shipped ALOHA head)")
    parser.add_argument("--target", default="9m", choices=sorted(TARGET_SIZES))
    parser.add_argument("--context", type=int, default=160, help="drafter context positions")
    parser.add_argument("--image-px", type=int, default=112)
    add_json_option(parser)
    args = parser.parse_args(argv)

    import numpy as np
    import torch

    from plan_stack.actions.head import load_checkpoint
    from plan_stack.actions.policy import VelocityModule
    from plan_stack.engines import export as E
    from plan_stack.paths import find_data
    from plan_stack.planning.drafter import new_drafter
    from plan_stack.planning.target_build import tiny_target

    torch.set_num_threads(args.threads)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        # flow step
        head_dir = args.head or str(find_data("models", "aloha/action_head/rtc"))
        head, _ = load_checkpoint(head_dir)
        names, fargs = E.flow_step_inputs(head, tokens=16)
        models = {"flow_step": E.export_flow_step(head, out)}
        # drafter and vision on a random target
        target = tiny_target("vl", **TARGET_SIZES[args.target], seed=0)
        torch.manual_seed(0)
        drafter = new_drafter(target).eval()
        models.update(E.export_drafter(drafter, [54], out, context_len=args.context))
        models.update(E.export_vision(target, (args.image_px, args.image_px), 1, out))
        E.write_manifest(out, models, {})
        velocity = VelocityModule(head).eval()
        rows += _rows_for("flow_step", velocity, _trace(velocity, fargs), _engine_runs(out, "flow_step"), fargs,
                          args.reps)
        draft = E.DraftPass(drafter, 54).eval()
        c = drafter.config
        ctx = torch.randn(c.layers, c.kv_heads, args.context, c.head_dim)
        dargs = (torch.tensor([5]), torch.tensor([args.context]), ctx, ctx.clone())
        rows += _rows_for("draft_B54", draft, _trace(draft, dargs), _engine_runs(out, "draft_B54"), dargs, args.reps)
        rng = np.random.default_rng(0)
        prompt = target.encode_prompt("", [rng.integers(0, 255, (args.image_px, args.image_px, 3), dtype=np.uint8)])
        vision = E.VisionEncoder(target, prompt.image_grid_thw).eval()
        vargs = (prompt.pixel_values,)
        key = E.vision_key((args.image_px, args.image_px), 1)
        rows += _rows_for("vision", vision, _trace(vision, vargs), _engine_runs(out, key), vargs, args.reps)
    gpu_note = ("skipped: no CUDA device here (run on a GPU machine: fp16 4B-shaped Qwen3-VL target)"
                if not torch.cuda.is_available() else "not implemented in this run")
    rows.append({**dict.fromkeys(COLUMNS), "model": "decode_54_tokens_4b_fp16", "backend": "ar_vs_vflash",
                 "note": gpu_note})
    print(f"# torch {torch.__version__}, threads {args.threads}, target {args.target}, drafter "
          f"{drafter.config.layers}x{drafter.config.width}, context {args.context}", file=sys.stderr)
    report(rows, COLUMNS, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
