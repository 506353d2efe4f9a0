"""`plan-stack eval-plans`: decode every annotated keyframe of recorded episodes and score the plans.

`--robot R` picks the shipped model directory `models/R` unless `--model`
names another; `--demos DIR` holds episodes recorded by `plan-stack
record-demos` (held-out seeds: a warning names the episodes whose seeds
belong to any split the model was trained on, the manifest's
`data.planner_trains_on`, or to its validation split). One row per decoder
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
from collections.abc import Iterable

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
    overlap = seed_overlap(model.manifest, args.robot, seeds)
    trained_on = {k: n for k, n in overlap.items() if k != VALIDATION}
    info = {"model": str(path), "demos": args.demos, "keyframes": len(keyframes), "episodes": len(seeds),
            "seeds": [seeds[0], seeds[-1]], "data": data_fingerprint([args.demos]),
            "train_seed_overlap": sum(trained_on.values()), "seed_overlap_by_split": overlap,
            "device": str(placement.device),
            "dtype": str(placement.dtype).removeprefix("torch."),
            "gate": "schema" if args.no_gate else "schema+geometry",
            "decoder_config": dataclasses.asdict(model.decoder(cfg, decodings=decoders).config)}
    if trained_on:
        print(f"eval-plans: WARNING: {sum(trained_on.values())} of {len(seeds)} episode seeds are seeds of splits "
              f"the model was trained on ({_by_split(trained_on)}): these figures are not held-out",
              file=sys.stderr)
    if overlap.get(VALIDATION):
        print(f"eval-plans: WARNING: {overlap[VALIDATION]} of {len(seeds)} episode seeds are validation seeds, "
              f"on which the model's checkpoint and gate bounds were chosen: these figures are not held-out",
              file=sys.stderr)
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


#: the split `plan-stack train` chooses the target's checkpoint, the gate bounds and the text block on
VALIDATION = "val"


def training_splits(manifest: dict, robot: str) -> list[str]:
    """The recorded splits a model directory's planner was trained on: the manifest's `data.planner_trains_on`
    (and, for a fine-tuned model, what the model it started from was trained on), else what the robot's
    recipe trains on (`train`, the extra planner splits, the on-policy rounds' splits)."""
    data = manifest.get("data", {})
    names = list(data.get("planner_trains_on") or [])
    names += manifest.get("initialised_from", {}).get("planner_trained_on") or []
    if not names:
        p = profile(robot)
        names = ["train", *p.planner_extra_splits, *(split for split, _ in p.onpolicy_rounds)]
    return list(dict.fromkeys(names))


def split_seeds(manifest: dict, robot: str, split: str) -> range:
    """The episode seeds of `split`: the manifest's (`data.splits_by_seed`, else the split's recorded seed
    range), else the robot profile's; empty when neither names the split."""
    data = manifest.get("data", {})
    by_seed = data.get("splits_by_seed", {}).get(split)
    if by_seed:
        return range(int(by_seed["first_seed"]), int(by_seed["first_seed"]) + int(by_seed["episodes"]))
    recorded = data.get(split)
    if isinstance(recorded, dict) and "seed_min" in recorded:
        return range(int(recorded["seed_min"]), int(recorded["seed_max"]) + 1)
    first, episodes = profile(robot).splits.get(split, (0, 0))
    return range(first, first + episodes)


def seed_overlap(manifest: dict, robot: str, seeds: Iterable[int]) -> dict[str, int]:
    """How many of `seeds` belong to each split the model was trained on, and to its validation split
    (`VALIDATION`); splits none of them belong to are left out."""
    wanted = set(seeds)
    out = {}
    for split in [*training_splits(manifest, robot), VALIDATION]:
        n = sum(1 for s in wanted if s in split_seeds(manifest, robot, split))
        if n:
            out[split] = n
    return out


def _by_split(counts: dict[str, int]) -> str:
    return ", ".join(f"{split}: {n}" for split, n in counts.items())


def _focus_subtask(rows: list[dict]) -> str | None:
    blind = next((r for r in rows if r["decoder"] == "blind"), None)
    if blind is None or not blind["ade_3d_m_by_subtask"]:
        return None
    return max(blind["ade_3d_m_by_subtask"], key=lambda k: blind["ade_3d_m_by_subtask"][k] or 0)
