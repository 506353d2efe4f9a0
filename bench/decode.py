"""Decoding benchmark: AR vs DFlash vs VFlash on the same target, inputs and machine (batch size 1).

For each target size (Qwen3-VL shaped, random weights: timing only) and each
output (box B=6, robot 2D+3D P=10 B=54, dual-arm 2D+3D P=10 B=108, drive
2D+3D P=20 B=84, ~36-token sub-task text), every decoder decodes the same
prompt (one image). Primitive rows receive the same supplied tool-call JSON
and start token (as in the paper's latency runs) and stop after the
primitive; the text row decodes `--text-tokens` tokens.

Columns
* target_params  target parameters (vision tower included)
* decoder        ar | dflash | vflash
* output         box | robot_2d3d | dual_2d3d | drive_2d3d | text
* block_size     declared B (text: the 16-position DFlash block)
* decode_ms      mean decode time (prefill and vision excluded), warm-up excluded
* p95_ms, worst_ms
* prefill_ms, vision_ms   mean
* target_forwards, drafter_forwards   per run (prefill counted as one target forward)
* tau            tokens committed per target forward (decode tokens / target forwards)
* gate           VFlash gate outcomes "accepted/fallback"
* peak_mb        CPU: process peak RSS so far (MB, process-wide); CUDA: max allocated in this row
* speedup_vs_ar, speedup_vs_dflash   decode_ms ratios on the same row group (same target steps)
* target_steps   how the target's steps after the prefill ran: `direct` (the text layers' own weights,
                 `TargetAdapter.direct_steps`, the default) or `model` (through the model's forward);
                 `--target-steps direct,model` runs both, their repetitions interleaved
* x_vs_model_steps   decode_ms of the same decoder and output with `model` steps / this row's

The drafter is untrained (5 layers, width 256 unless changed): VFlash
primitives are accepted by the schema gate regardless, while DFlash accepts
few text proposals from an untrained drafter; τ is reported as measured.
DFlash runs AR steps where its speculative steps cost more per token than AR's
(`speculation.SpeculationSchedule`, learnt over the runs of one target);
`--speculation-probe-every 0` speculates everywhere, as the paper.

    python bench/decode.py [--sizes 9m,40m] [--reps 5] [--threads 1] [--json out.json]
    python bench/decode.py --sizes 9m --target-steps direct,model   (the direct steps against the model's)
    python bench/decode.py --device cuda --dtype bfloat16 --sizes 9m,40m,2b   (a GPU machine)
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys

from report import add_json_option, format_value, report  # bench/report.py: shared table + JSON output

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SIZES = {
    # name: tiny_target kwargs (Qwen3-VL shaped)
    # the shape of the shipped models' targets (the robots' profiles, plan_stack.robots): 2.1 M parameters
    "2m": dict(hidden=192, layers=4, heads=4, kv_heads=2, head_dim=32, vision_hidden=96, vision_depth=2,
               vision_patch=8),
    "9m": dict(hidden=256, layers=8, heads=4, kv_heads=2, head_dim=64, intermediate=1024, vision_hidden=128,
               vision_depth=2),
    "40m": dict(hidden=512, layers=12, heads=8, kv_heads=4, head_dim=64, intermediate=1536, vision_hidden=192,
                vision_depth=2),
    # the language model of Qwen3-VL-2B (28 layers, width 2048, GQA 16/8, MLP 6144) behind our small vision
    # tower: the size the seeds' latency runs use; for a GPU (`--device cuda --dtype bfloat16`)
    "2b": dict(hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=6144, vision_hidden=192,
               vision_depth=2),
}
OUTPUTS = [  # name, start token, block size
    ("box", "<box>", 6),
    ("robot_2d3d", "<robot_single_2d>", 54),
    ("dual_2d3d", "<robot_single_2d>", 108),
    ("drive_2d3d", "<drive_2d>", 84),
    ("text", None, 16),
]
COLUMNS = ["target_params", "decoder", "output", "block_size", "decode_ms", "p95_ms", "worst_ms", "prefill_ms",
           "vision_ms", "target_forwards", "drafter_forwards", "tau", "gate", "peak_mb", "speedup_vs_ar",
           "speedup_vs_dflash", "target_steps", "x_vs_model_steps"]


def _peak_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run(args: argparse.Namespace) -> list[dict]:
    import numpy as np
    import torch

    from plan_stack.planning.decoders import DECODINGS, DecoderConfig
    from plan_stack.planning.decoding import Decoder
    from plan_stack.planning.drafter import new_drafter, num_params
    from plan_stack.planning.target_build import tiny_target
    from plan_stack.planning.tool_call import tool_call_text

    torch.set_num_threads(args.threads)
    steps = args.target_steps.split(",")
    rows: list[dict] = []
    rng = np.random.default_rng(args.seed)
    image = (rng.random((args.image_height, args.image_width, 3)) * 255).astype(np.uint8)
    dtype = getattr(torch, args.dtype)
    for size in args.sizes.split(","):
        target = tiny_target("vl", seed=args.seed, dtype=dtype, **SIZES[size])
        torch.manual_seed(args.seed)
        drafter = new_drafter(target, width=args.drafter_width, layers=args.drafter_layers, heads=4, kv_heads=2,
                              head_dim=args.drafter_width // 4, intermediate=3 * args.drafter_width)
        target.model.to(args.device)
        drafter.to(args.device, dtype)
        n_params = num_params(target.model)
        schedule = {} if args.speculation_probe_every is None else {
            "speculation_probe_every": args.speculation_probe_every}
        dec = Decoder(target, drafter, DecoderConfig(budget=4096, **schedule))
        prompt = target.encode_prompt(args.prompt, [image])
        print(f"# target {size}: {n_params / 1e6:.1f}M params, drafter {num_params(drafter) / 1e6:.1f}M, "
              f"prompt {prompt.input_ids.numel()} tokens", file=sys.stderr)
        for output, start, block in OUTPUTS:
            if output == "text":
                prefix: list[int] = []
                budget = args.text_tokens
            else:
                prefix = target.tokenizer.encode(tool_call_text(block) + start, add_special_tokens=False)
                budget = len(prefix) + block - 1  # stop right after the primitive
            group = {}
            for decoder in DECODINGS:
                if args.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                times: dict[str, list[float]] = {v: [] for v in steps}
                results: dict[str, list] = {v: [] for v in steps}
                for rep in range(args.reps + 1):  # first run is warm-up
                    for variant in steps if rep % 2 else steps[::-1]:
                        target.direct_steps = variant == "direct"
                        res = dec.generate(prompt, decoder=decoder, budget=budget, response_prefix=prefix,
                                           image_size=(args.image_width, args.image_height))
                        if args.device == "cuda":
                            torch.cuda.synchronize()
                        if rep:
                            times[variant].append(res.stats.decode_ms)
                            results[variant].append(res)
                if len({tuple(results[v][-1].tokens) for v in steps}) > 1:
                    raise SystemExit(f"{decoder} {output}: the target step variants decoded different tokens")
                for variant in steps:
                    st = results[variant][-1].stats
                    if output != "text" and not results[variant][-1].primitives:
                        print(f"# warning: {decoder} {output}: no primitive decoded ({results[variant][-1].errors})",
                              file=sys.stderr)
                    times_sorted = sorted(times[variant])
                    row = {
                        "target_params": n_params, "decoder": decoder, "output": output, "block_size": block,
                        "decode_ms": statistics.fmean(times_sorted),
                        "p95_ms": times_sorted[min(len(times_sorted) - 1, int(round(0.95 * (len(times_sorted) - 1))))],
                        "worst_ms": times_sorted[-1],
                        "prefill_ms": statistics.fmean(r.stats.prefill_ms for r in results[variant]),
                        "vision_ms": statistics.fmean(r.stats.vision_ms for r in results[variant]),
                        "target_forwards": st.target_forwards, "drafter_forwards": st.drafter_forwards,
                        "tau": st.tau, "gate": f"{st.gate_accepted}/{st.gate_fallback}",
                        "peak_mb": _peak_mb(args.device), "target_steps": variant,
                    }
                    group[decoder, variant] = row
                    rows.append(row)
            for (decoder, variant), row in group.items():
                row["speedup_vs_ar"] = group["ar", variant]["decode_ms"] / row["decode_ms"]
                row["speedup_vs_dflash"] = group["dflash", variant]["decode_ms"] / row["decode_ms"]
                if "model" in steps:
                    row["x_vs_model_steps"] = group[decoder, "model"]["decode_ms"] / row["decode_ms"]
            _print_rows(list(group.values()))
    return rows


def _print_rows(rows: list[dict]) -> None:
    """Progress on stderr while the benchmark runs; the table comes at the end."""
    for r in rows:
        print("# " + " | ".join(format_value(r.get(c)) for c in COLUMNS), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="9m,40m", help=f"comma-separated target sizes ({','.join(SIZES)})")
    p.add_argument("--reps", type=int, default=5, help="timed runs per row (after one warm-up run)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="weights and activations of the target and drafter (bfloat16: GPUs)")
    p.add_argument("--text-tokens", type=int, default=36)
    p.add_argument("--drafter-width", type=int, default=256)
    p.add_argument("--drafter-layers", type=int, default=5)
    p.add_argument("--image-width", type=int, default=128)
    p.add_argument("--image-height", type=int, default=96)
    p.add_argument("--prompt", default="plan the next motion of the gripper")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speculation-probe-every", type=int, default=None,
                   help="DFlash: AR steps between speculative probes where speculation does not pay (default: the "
                        "decoder's; 0: always speculate, as the paper)")
    p.add_argument("--target-steps", default="direct",
                   help="comma-separated: direct (the text layers run directly), model (the model's forward)")
    add_json_option(p)
    args = p.parse_args(argv)
    if not args.target_steps or set(args.target_steps.split(",")) - {"direct", "model"}:
        p.error("--target-steps: direct and/or model")
    for s in args.sizes.split(","):
        if s not in SIZES:
            p.error(f"unknown size {s!r} (known: {', '.join(SIZES)})")
    rows = run(args)
    report(rows, COLUMNS, args.json, {c: ".2f" for c in COLUMNS if c.endswith(("_ms", "_mb")) or c == "tau"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
