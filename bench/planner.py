"""Planner step benchmark: one plan end to end (numpy Observation images -> checked plan + features).

Runs `planning.runtime.PlannerRuntime` (what the planner node runs) for
`ar`, `dflash` and `vflash`, each with streaming on (only the new frame is
encoded and prefilled; cached frames re-rotated) and off (the plain prompt of
all K frames, prefilled from scratch), at window K = `--window` (4), on:

* `shipped:<robot>`: the trained model directory models/<robot> when it
  exists (skipped with a printed reason otherwise); it decodes its own output
  (sub-task text and primitives) within its manifest's budget, from random
  images of the manifest's size and cameras;
* `random-vl`: a larger random Qwen3-VL-shaped target (`--size`) with an
  untrained drafter (5 layers, width 256). An untrained target writes no
  meaningful text, so every decoder receives the same supplied tool call and
  primitive start token (the VFlash paper's latency convention) and decodes
  exactly one primitive (`--primitive`, default ALOHA's dual-arm 2D+3D with
  P = 10, B = 108): the same primitive work for AR and VFlash.

Every configuration runs on its own copy of the model; they are interleaved
in rounds (each round gives all of them the same new frame, in a rotating
order) so that load from other processes spreads over the rows evenly. The
first K rounds fill the window, `--warmup` more are untimed, then `--steps`
timed rounds; figures are medians over the timed plans. Columns
* target, decoder, streaming, window, cameras
* vision_ms, prefill_ms, decode_ms, total_ms   medians; total = the runtime's whole step
* p95_ms          p95 of total_ms
* target_forwards, drafter_forwards, tokens_out   per plan
* prompt_tokens, prefilled_tokens   positions in the prompt / run through the target this step
* saved_prefill_pct   100 * (1 - prefilled / prompt)
* speedup_vs_ar   total_ms of `ar` (same target, same streaming) / total_ms
* prefill_x_fresh (vision + prefill) of the same decoder without streaming / with (streaming rows)
* gate            VFlash gate outcomes "accepted/fallback" over the timed plans

A second table (random target; JSON rows with `kind: prefill`) times the
prefill alone (`--prefill-reps` interleaved repetitions, medians), without
decoding noise: `streaming` (only the new frame runs), `fresh_frame_local`
(the same prompt structure from scratch) and `fresh_causal` (the plain
prompt from scratch, what `streaming: false` runs), with
`x_vs_fresh_frame_local` and `x_vs_fresh_causal` = their vision + prefill
time / this row's.

    python bench/planner.py [--robot aloha[,franka,drive]] [--size 20m] [--cameras 3] [--steps 5] [--threads 1]
                            [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from report import add_json_option, print_table, report, write_json  # bench/report.py: table + JSON output

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SIZES = {  # tiny_target kwargs, Qwen3-VL shaped (random weights: timing only)
    "tiny": dict(layers=2),  # smoke runs
    "9m": dict(hidden=256, layers=8, heads=4, kv_heads=2, head_dim=64, intermediate=1024, vision_hidden=128,
               vision_depth=2),
    "20m": dict(hidden=384, layers=10, heads=6, kv_heads=2, head_dim=64, intermediate=1536, vision_hidden=192,
                vision_depth=2),
    "40m": dict(hidden=512, layers=12, heads=8, kv_heads=4, head_dim=64, intermediate=1536, vision_hidden=192,
                vision_depth=2),
}
PREFILL_COLUMNS = ["target", "mode", "window", "cameras", "vision_ms", "prefill_ms", "vision_prefill_ms",
                   "prompt_tokens", "prefilled_tokens", "x_vs_fresh_frame_local", "x_vs_fresh_causal", "reps"]
PRIMITIVES = {"dual_2d3d": 10, "robot_2d3d": 10, "drive_2d3d": 20, "robot_3d": 10, "box": 1}
COLUMNS = ["target", "decoder", "streaming", "window", "cameras", "vision_ms", "prefill_ms", "decode_ms", "total_ms",
           "p95_ms", "target_forwards", "drafter_forwards", "tokens_out", "prompt_tokens", "prefilled_tokens",
           "saved_prefill_pct", "speedup_vs_ar", "prefill_x_fresh", "gate"]


def _random_model(args, workdir):
    import torch

    from plan_stack.planning import layouts as L
    from plan_stack.planning.drafter import new_drafter
    from plan_stack.planning.model_dir import save_planner_model
    from plan_stack.planning.target_build import tiny_target
    from plan_stack.planning.tool_call import tool_call_text

    target = tiny_target("vl", seed=0, **SIZES[args.size])
    torch.manual_seed(0)
    drafter = new_drafter(target)
    layout = L.make_layout(args.primitive, PRIMITIVES[args.primitive])
    prefix = tool_call_text(layout.block_size) + layout.start_token
    n_prefix = len(target.tokenizer.encode(prefix, add_special_tokens=False))
    cameras = [f"cam{i}" for i in range(args.cameras)]
    manifest = {"cameras": cameras, "image_size": [args.image, args.image], "history_frames": args.window,
                "instruction": "fold the towel", "primitive_kinds": [args.primitive],
                "budget": n_prefix + layout.block_size - 1}  # stop right after the primitive
    path = save_planner_model(os.path.join(workdir, "random"), target, drafter, manifest)
    params = sum(p.numel() for p in target.model.parameters())
    return f"random-vl-{params / 1e6:.0f}m", path, prefix


def _demo_frames(robot, pattern, model):
    """Per keyframe the prompt images of recorded episodes (`--demos`, `{robot}` filled in), in episode order:
    the frames the shipped model was trained on, instead of random pixels (None without `--demos`)."""
    if not pattern:
        return None
    from plan_stack.data.episodes import load_keyframes
    from plan_stack.robots import profile

    kfs = load_keyframes(pattern.format(robot=robot), profile(robot).learning, model.image_size, limit=2)
    return [kf.images for kf in kfs]


def _rows(name, load, prefix, args, window=None, frames=None):
    """Every (decoder, streaming) configuration on its own copy of the model, interleaved in rounds.

    Round r gives every configuration the same new frame (`frames[r]` cycled when given, else random
    pixels); the order inside a round rotates, so load from other processes spreads evenly over the rows.
    """
    import numpy as np

    from plan_stack.config import ConfigError
    from plan_stack.planning.runtime import FrameInput, PlannerRuntime, RuntimeConfig

    window = window or args.window
    configs = []
    for streaming in (True, False):
        for decoder in args.decoders:
            model = load()  # own target: streaming frame caches must not evict each other
            try:
                rt = PlannerRuntime(model, RuntimeConfig(decoder=decoder, streaming=streaming,
                                                         history_frames=window, response_prefix=prefix))
            except ConfigError as exc:
                if not str(exc).startswith("decoder:"):  # not a decoder that needs a drafter the model lacks
                    raise
                print(f"# {name}: {decoder} skipped ({exc})", file=sys.stderr)
                continue
            configs.append((decoder, streaming, rt, []))
    model = configs[0][2].model
    w, h = model.image_size
    cams = list(model.cameras)
    rng = np.random.default_rng(0)
    rounds = window + args.warmup + args.steps
    for r in range(rounds):
        images = (frames[r % len(frames)] if frames else
                  [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in cams])
        for i in range(len(configs)):
            decoder, streaming, rt, outs = configs[(i + r) % len(configs)]
            out = rt.plan(FrameInput(float(r), cams, images))
            if not out.valid:
                raise SystemExit(f"{name} {decoder}: invalid plan ({out.reason})")
            if r >= window + args.warmup:
                outs.append(out)
        print(f"# {name}: round {r + 1}/{rounds}", file=sys.stderr)
    rows = []
    for decoder, streaming, _rt, outs in configs:
        med = lambda a: statistics.median(getattr(o, a) for o in outs)  # noqa: E731
        totals = sorted(o.total_ms for o in outs)
        rows.append(dict(
            target=name, decoder=decoder, streaming=streaming, window=window, cameras=len(cams),
            vision_ms=med("vision_ms"), prefill_ms=med("prefill_ms"), decode_ms=med("decode_ms"),
            total_ms=med("total_ms"), p95_ms=totals[min(len(totals) - 1, int(round(0.95 * (len(totals) - 1))))],
            target_forwards=med("target_forwards"), drafter_forwards=med("drafter_forwards"),
            tokens_out=med("tokens_out"), prompt_tokens=med("prompt_tokens"), prefilled_tokens=med("prefilled_tokens"),
            saved_prefill_pct=100.0 * (1.0 - med("prefilled_tokens") / med("prompt_tokens")),
            gate=f"{sum(o.gate_accepted for o in outs)}/{sum(o.gate_fallback for o in outs)}",
            primitives=sum(len(o.primitives) for o in outs) / len(outs), timed_plans=len(outs)))
    for r in rows:
        ar = next((x for x in rows if x["decoder"] == "ar" and x["streaming"] == r["streaming"]), None)
        r["speedup_vs_ar"] = ar["total_ms"] / r["total_ms"] if ar else None
        fresh = next((x for x in rows if x["decoder"] == r["decoder"] and not x["streaming"]), None)
        r["prefill_x_fresh"] = ((fresh["vision_ms"] + fresh["prefill_ms"]) / (r["vision_ms"] + r["prefill_ms"])
                                if r["streaming"] and fresh else None)
    return rows


def _prefill_rows(name, load, args):
    """Prefill alone (vision + target, no decoding), interleaved, `--prefill-reps` times each:
    streaming (only the new frame runs), the same frame-local structure from scratch, and the
    plain causal prompt from scratch."""
    import time

    import numpy as np

    from plan_stack.planning.model_dir import prompt_text

    model = load()
    t = model.target
    w, h = model.image_size
    cams = list(model.cameras)
    rng = np.random.default_rng(1)
    text = prompt_text(model.manifest["instruction"])
    frames, raw = [], []
    times = {"streaming": [], "fresh_frame_local": [], "fresh_causal": []}
    counts = {}
    for r in range(args.window + 1 + args.prefill_reps):
        images = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in cams]
        raw = (raw + [images])[-args.window:]
        frames = (frames + [t.encode_frame(1_000_000 + r, images)])[-args.window:]
        if len(frames) < args.window:
            t.prefill(t.streaming_prompt(text, frames))
            continue
        # streaming first (the previous window is cached), then the fresh modes in alternating order
        for mode in ["streaming"] + (["fresh_frame_local", "fresh_causal"] if r % 2 else
                                     ["fresh_causal", "fresh_frame_local"]):
            if mode == "fresh_causal":  # image preprocessing outside the clock, as for encode_frame
                prompt = model.encode(model.manifest["instruction"], raw)
                t0 = time.perf_counter()
                step = t.prefill(prompt)
            else:
                t.reuse_frames = mode == "streaming"
                t0 = time.perf_counter()
                step = t.prefill(t.streaming_prompt(text, frames))
                t.reuse_frames = True
            ms = (time.perf_counter() - t0) * 1e3
            if r > args.window:  # the first full window is a warm-up
                times[mode].append((step.vision_ms, ms - step.vision_ms))
                counts[mode] = (t.last_prefill.prompt_tokens, t.last_prefill.prefilled_tokens)
        t.prefill(t.streaming_prompt(text, frames))  # cache this window's frames for the next streaming step
    rows = []
    for mode, vals in times.items():
        vision = statistics.median(v for v, _ in vals)
        prefill = statistics.median(p for _, p in vals)
        rows.append(dict(kind="prefill", target=name, mode=mode, window=args.window, cameras=len(cams),
                         vision_ms=vision, prefill_ms=prefill, vision_prefill_ms=vision + prefill,
                         prompt_tokens=counts[mode][0], prefilled_tokens=counts[mode][1], reps=len(vals)))
    for r in rows:
        r["x_cheaper_than"] = {m: x["vision_prefill_ms"] / r["vision_prefill_ms"] for m in ("fresh_frame_local",
                               "fresh_causal") for x in rows if x["mode"] == m}
        r["x_vs_fresh_frame_local"] = r["x_cheaper_than"]["fresh_frame_local"]
        r["x_vs_fresh_causal"] = r["x_cheaper_than"]["fresh_causal"]
        del r["x_cheaper_than"]
    return rows


def main(argv=None) -> int:
    from plan_stack.planning.decoders import DECODINGS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--robot", default="aloha",
                    help="shipped model(s) to measure, comma-separated: models/<robot> (each skipped if absent)")
    ap.add_argument("--size", default="20m", choices=sorted(SIZES), help="random Qwen3-VL-shaped target size")
    ap.add_argument("--primitive", default="dual_2d3d", choices=sorted(PRIMITIVES),
                    help="primitive the random target decodes (supplied tool call)")
    ap.add_argument("--cameras", type=int, default=3, help="cameras per frame of the random target")
    ap.add_argument("--image", type=int, default=224,
                    help="square image side of the random target (pixels; its processor keeps <= 256x256)")
    ap.add_argument("--window", type=int, default=4, help="history frames K")
    ap.add_argument("--shipped-window", type=int, default=None,
                    help="K of the shipped-model rows (0: the model's own history_frames; default --window)")
    ap.add_argument("--demos", default=None, metavar="DIR",
                    help="shipped models plan on the frames of these recordings ('{robot}' is replaced, e.g. "
                    "out/data/{robot}/heldout) instead of random pixels")
    ap.add_argument("--steps", type=int, default=5, help="timed plans per row")
    ap.add_argument("--warmup", type=int, default=1, help="untimed plans after the window is full")
    ap.add_argument("--decoders", default=",".join(DECODINGS))
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--skip-random", action="store_true", help="measure the shipped model only")
    ap.add_argument("--prefill-reps", type=int, default=8, help="timed prefills per mode in the prefill table")
    ap.add_argument("--prefill-only", action="store_true", help="random target: the prefill table only")
    add_json_option(ap)
    args = ap.parse_args(argv)
    args.decoders = [d for d in args.decoders.split(",") if d]

    import torch

    from plan_stack.paths import find_data
    from plan_stack.planning.model_dir import load_planner_model

    torch.set_num_threads(args.threads)
    rows = []
    for robot in [r for r in args.robot.split(",") if r]:
        try:
            path = find_data("models", robot)
            if not (path / "manifest.json").is_file():
                raise FileNotFoundError(f"{path}: no manifest.json")
        except FileNotFoundError as exc:
            print(f"# shipped model skipped: models/{robot} is not a planner model directory here ({exc})")
        else:
            model = load_planner_model(path)
            own = int(model.manifest["history_frames"])
            window = args.window if args.shipped_window is None else (args.shipped_window or own)
            rows += _rows(f"shipped:{robot}", lambda path=path: load_planner_model(path), "", args, window,
                          _demo_frames(robot, args.demos, model))
    if not args.skip_random:
        with tempfile.TemporaryDirectory() as tmp:
            name, path, prefix = _random_model(args, tmp)
            if not args.prefill_only:
                rows += _rows(name, lambda: load_planner_model(path), prefix, args)
            prefill = _prefill_rows(name, lambda: load_planner_model(path), args)
    report(rows, COLUMNS, "", formats={"streaming": "", "window": "d", "cameras": "d"})
    if not args.skip_random:
        print()
        print_table(prefill, PREFILL_COLUMNS, {"window": "d", "cameras": "d"})
        rows += prefill
    if args.json:
        write_json(rows, args.json)
    for r in rows:
        if r.get("kind") == "prefill" and r["mode"] == "streaming":
            print(f"{r['target']}: streaming prefill alone at K={r['window']}: {r['x_vs_fresh_frame_local']:.2f}x "
                  f"cheaper than the same structure from scratch, {r['x_vs_fresh_causal']:.2f}x than the plain "
                  f"causal prompt  (bar 3x: {'met' if r['x_vs_fresh_causal'] >= 3 else 'NOT met'})")
    rows = [r for r in rows if r.get("kind") != "prefill"]
    for target in dict.fromkeys(r["target"] for r in rows):
        for streaming in (True, False):
            v = next((r for r in rows if r["target"] == target and r["decoder"] == "vflash"
                      and r["streaming"] == streaming), None)
            if v and v["speedup_vs_ar"]:
                print(f"{target}: vflash vs ar end to end (streaming {'on' if streaming else 'off'}): "
                      f"{v['speedup_vs_ar']:.2f}x  (bar 3x: {'met' if v['speedup_vs_ar'] >= 3 else 'NOT met'})")
        for r in rows:
            if r["target"] == target and r["streaming"] and r["prefill_x_fresh"]:
                print(f"{target}: {r['decoder']} streaming vision+prefill at K={r['window']}: "
                      f"{r['prefill_x_fresh']:.2f}x cheaper than fresh, {r['saved_prefill_pct']:.0f}% of prompt "
                      f"positions reused  (bar 3x: {'met' if r['prefill_x_fresh'] >= 3 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
