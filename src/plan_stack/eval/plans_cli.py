"""`plan-stack eval-plans`: decode every annotated keyframe of recorded episodes and score the plans.

`--robot R` picks the shipped model directory `models/R` unless `--model`
names another; `--demos DIR` holds episodes recorded by `plan-stack
record-demos` (held-out seeds: never the training ones). One row per decoder
plus the image-blind baseline (`blind`, from the model's
`blind_baseline.json`); distances in metres in the JSON, centimetres in the
printed table. `--no-gate` decodes VFlash with the schema-only gate (the
plausibility check off) to measure what the check costs and catches.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys

from plan_stack.device import EngineError, add_device_arguments, placement_from_args
from plan_stack.robots import profile, robot_names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from plan_stack.planning.decoders import DECODINGS

    parser.add_argument("--robot", required=True, choices=robot_names())
    parser.add_argument("--demos", required=True, help="directory of recorded episodes (record-demos --out)")
    parser.add_argument("--model", default=None, help="planner model directory (default: the shipped models/<robot>)")
    parser.add_argument("--decoders", default=",".join(DECODINGS), help=f"comma-separated: {', '.join(DECODINGS)}")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--episodes", type=int, default=None, help="use only the first N episodes")
    parser.add_argument("--no-gate", action="store_true", help="VFlash with the schema-only gate (no geometry)")
    add_device_arguments(parser)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads the models run on (default 1, the setting the reference figures "
                             "are measured with)")


def recording_mismatch(manifest: dict, keyframes) -> str | None:
    """Why these demos are not comparable with the model's data, or None: another camera size (the image the
    planner sees is rescaled differently, measured to halve ALOHA's box IoU), or, where the model's data
    names its keyframe period, another period (the blind baseline is indexed by keyframe number)."""
    recorded_with = str(manifest.get("data", {}).get("recorded_with", ""))
    problems = []
    m = re.search(r"--width (\d+) --height (\d+)", recorded_with)
    if m is not None:
        want = (int(m[1]), int(m[2]))
        got = sorted({tuple(kf.camera_size) for kf in keyframes})
        if got != [want]:
            sizes = ", ".join(f"{w}x{h}" for w, h in got)
            problems.append(f"demos recorded at {sizes} px, the model's data at {want[0]}x{want[1]}")
    m = re.search(r"--keyframe-period ([0-9.]+)", recorded_with)
    period = _keyframe_period(keyframes)
    if m is not None and period is not None and abs(period - float(m[1])) > 1e-3:
        problems.append(f"demos annotated every {period:g} s, the model's data every {float(m[1]):g} s")
    if not problems:
        return None
    return (f"{'; '.join(problems)}: accuracy is not comparable with its training and held-out figures; "
            f"record with `{recorded_with}`")


def _keyframe_period(keyframes) -> float | None:
    """The median time between consecutive keyframes of an episode (None: no episode has two)."""
    times: dict[str, list[float]] = {}
    for kf in keyframes:
        times.setdefault(kf.episode, []).append(kf.t_s)
    gaps = [b - a for ts in times.values() for a, b in zip(sorted(ts), sorted(ts)[1:])]
    return float(statistics.median(gaps)) if gaps else None


def run(args: argparse.Namespace) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    from plan_stack.data.episodes import data_fingerprint, load_keyframes
    from plan_stack.eval import plans as EV
    from plan_stack.paths import find_data
    from plan_stack.planning.decoders import DECODINGS, DecoderConfig
    from plan_stack.planning.errors import PlanningError
    from plan_stack.planning.model_dir import load_planner_model

    torch.set_num_threads(args.threads)
    decoders = [d.strip() for d in args.decoders.split(",") if d.strip()]
    bad = [d for d in decoders if d not in DECODINGS]
    if bad or not decoders:
        print(f"eval-plans: --decoders must name some of {DECODINGS}, got {args.decoders!r}", file=sys.stderr)
        return 2
    spec = profile(args.robot).learning
    try:
        path = args.model or str(find_data("models", args.robot))
        placement = placement_from_args(args)
        model = load_planner_model(path, dtype=placement.dtype)
        model.target.model.to(placement.device)
        if model.drafter is not None:
            model.drafter.to(placement.device)
        cfg = DecoderConfig(budget=int(model.manifest["budget"]))
        model.decoder(cfg, decodings=decoders)  # refuses a decoder that needs a drafter the model lacks
        keyframes = load_keyframes(args.demos, spec, model.required_image_size(), limit=args.episodes, progress=True)
    except EngineError as exc:
        print(f"eval-plans: {exc}", file=sys.stderr)
        return 2
    except (PlanningError, FileNotFoundError, ValueError) as exc:
        print(f"eval-plans: {exc}", file=sys.stderr)
        return 1
    if not keyframes:
        print(f"eval-plans: no successful annotated episode in {args.demos}", file=sys.stderr)
        return 1
    blind_file = os.path.join(path, "blind_baseline.json")
    blind = json.load(open(blind_file, encoding="utf-8")) if os.path.isfile(blind_file) else None
    if args.no_gate:
        model.manifest = {**model.manifest, "workspace": {}, "gate_max_step_m": 0.0,
                          "gate_max_step_change_m": 0.0}
    rows = EV.evaluate(model, keyframes, spec, decoders, blind=blind, config=cfg, progress=True)
    seeds = sorted({kf.seed for kf in keyframes})
    held = set(range(*_seed_range(model.manifest, "train")))
    overlap = sorted(held.intersection(seeds))
    info = {"model": str(path), "demos": args.demos, "keyframes": len(keyframes), "episodes": len(seeds),
            "seeds": [seeds[0], seeds[-1]], "data": data_fingerprint([args.demos]),
            "train_seed_overlap": len(overlap), "device": str(placement.device),
            "dtype": str(placement.dtype).removeprefix("torch."),
            "gate": "schema" if args.no_gate else "schema+geometry",
            "decoder_config": dataclasses.asdict(model.decoder(cfg, decodings=decoders).config)}
    if overlap:
        print(f"eval-plans: WARNING: {len(overlap)} episode seeds were training seeds", file=sys.stderr)
    mismatch = recording_mismatch(model.manifest, keyframes)
    info["recording_mismatch"] = mismatch
    if mismatch:
        print(f"eval-plans: WARNING: {mismatch}", file=sys.stderr)
    focus = _focus_subtask(rows)
    print(f"{args.robot}: {len(keyframes)} keyframes of {len(seeds)} episodes (seeds {seeds[0]}..{seeds[-1]}), "
          f"model {path}")
    print(EV.format_table(rows, focus))
    if focus:
        print(f"(ADE focus: the sub-task where the blind baseline is worst: {focus!r})")
    for r in rows:
        if r["primitive_ms_by_kind"]:
            x = r["primitive_speedup_vs_ar_by_kind"]
            print(f"primitive ms by kind, {r['decoder']}: " + ", ".join(
                f"{k} {ms:.1f}" + (f" ({x[k]:.1f}x AR)" if k in x else "")
                for k, ms in r["primitive_ms_by_kind"].items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)
            fh.write("\n")
    return 0


def _seed_range(manifest: dict, split: str) -> tuple[int, int]:
    s = manifest.get("data", {}).get("splits_by_seed", {}).get(split)
    return (int(s["first_seed"]), int(s["first_seed"]) + int(s["episodes"])) if s else (0, 0)


def _focus_subtask(rows: list[dict]) -> str | None:
    blind = next((r for r in rows if r["decoder"] == "blind"), None)
    if blind is None or not blind["ade_3d_m_by_subtask"]:
        return None
    return max(blind["ade_3d_m_by_subtask"], key=lambda k: blind["ade_3d_m_by_subtask"][k] or 0)
