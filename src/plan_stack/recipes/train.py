"""`plan-stack train --robot R`: rebuild every checkpoint of a robot's planner model directory.

Stages (each resumable, each seeded, each with a tqdm bar):

1. data: keyframes of the recorded train / validation episodes
   (`plan-stack record-demos`; seeds in the robot's profile, `plan_stack.robots`), coordinate ranges and
   workspace fitted on the train split, the image-blind baseline;
2. target: a small Qwen3-VL trained autoregressively on the responses
   (`training_target`), the checkpoint chosen by AR-decoded validation ADE;
   then frozen;
3. drafter: VFlash training on the frozen target (`training.train`);
4. the model directory: target/, drafter/, manifest.json, blind_baseline.json;
5. onpolicy (robots whose profile has `onpolicy_rounds`: driving): DAgger rounds, in order;
   in each the model just written drives the round's split, the expert labels,
   and the model is fine-tuned on every planner split plus the rounds' splits
   so far (`--init-from`); after the last round the drafter alone trains
   `onpolicy_final_drafter_steps` more (`final_drafter_fine_tune`).

Action heads on the target's plan features are trained by
`plan-stack train-action-head --planner DIR` (stage `heads` runs it here).
Work files (optimiser states) live in `--work`; `--resume` continues from
them and refuses a different data set unless `--force-resume`.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plan_stack.device import EngineError, add_device_arguments, placement_from_args
from plan_stack.planning.training.data_parallel import training_ranks, usable_cores
from plan_stack.robots import Recipe, profile, robot_names


def record_argv(robot: str) -> list[str]:
    """The `plan-stack` arguments every split of `robot` is recorded with (the split adds its seeds, count,
    output and `planner_extra_splits` options); the manifest's `recorded_with` is the same line."""
    return ["record-demos", "--robot", robot, "--width", "224", "--height", "224", "--camera-rate", "2",
            *profile(robot).record_options]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", required=True, choices=robot_names())
    parser.add_argument("--data", required=True, help="directory with train/, val/ (and heldout/) recordings")
    parser.add_argument("--out", default=None, help="model directory to write (default: models/<robot>)")
    parser.add_argument("--work", default=None, help="work directory for resumable states (default out/train/R)")
    parser.add_argument("--stages", default="target,drafter,onpolicy,heads",
                        help="comma-separated: target, drafter, onpolicy (the robot's on-policy rounds, where "
                        "it has them), heads; `gate` alone re-chooses only the gate bound of the existing model "
                        "directory on the validation split")
    parser.add_argument("--record", action="store_true",
                        help="first record the missing splits (train/, val/, heldout/) into --data with their seeds")
    parser.add_argument("--resume", action="store_true", help="continue from the states in --work")
    parser.add_argument("--force-resume", action="store_true", help="resume even if the data set changed")
    parser.add_argument("--threads", type=int, default=usable_cores(),
                        help="torch CPU threads (default: every core this process may use; the driving target "
                             "trained 150 steps in 66 s with 2 threads and 98 s with 1 on the 2-core machine)")
    parser.add_argument("--ranks", type=int, default=None,
                        help="data-parallel training processes on the CPU, sharing --threads (default: 2 where "
                             "there are 2-3 threads, 4 from 4; 1 on a GPU): on the 2-core machine two one-thread "
                             "ranks trained the driving target 1.18x and its drafter 1.41x as fast as one process "
                             "with two threads")
    add_device_arguments(parser, dtype=False)
    parser.add_argument("--target-steps", type=int, default=None, help="override the recipe's target steps")
    parser.add_argument("--coord-sigma-bins", type=float, default=None, metavar="BINS",
                        help="override the recipe's soft coordinate target (std in bins, 0 = exact bin)")
    parser.add_argument("--image-size", type=int, default=None, metavar="PX",
                        help="override the recipe's (square) planner image size in px")
    parser.add_argument("--drafter-steps", type=int, default=None, help="override the recipe's drafter steps")
    parser.add_argument("--drafter-text-block", type=int, default=None,
                        help="override the recipe's drafter text block (positions per text block in training)")
    parser.add_argument("--init-from", default=None, metavar="DIR",
                        help="fine-tune: start the target and drafter from this model directory (a path or a "
                             "name under models/), keep its coordinate ranges, fresh optimisers, no "
                             "localisation loss (its head is not part of a model directory)")
    parser.add_argument("--target-lr", type=float, default=None, help="override the recipe's target peak lr")
    parser.add_argument("--extra-split", action="append", default=[], metavar="NAME",
                        help="a recorded split under --data the target and drafter train on too (repeatable; "
                             "the on-policy round adds its split this way)")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(__file__)).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _log(path: str):
    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    return log


def build_target(recipe: Recipe) -> Any:
    from plan_stack.planning.target_build import tiny_target

    return tiny_target("vl", hidden=recipe.hidden, layers=recipe.layers, heads=recipe.heads,
                       kv_heads=recipe.kv_heads, head_dim=recipe.head_dim, vision_hidden=recipe.vision_hidden,
                       vision_depth=recipe.vision_depth, vision_patch=recipe.vision_patch, seed=recipe.seed)


def build_drafter(recipe: Recipe, target: Any) -> Any:
    """A fresh drafter of the recipe's size on `target` (it shares the target's embeddings and LM head)."""
    from plan_stack.planning.drafter import new_drafter

    return new_drafter(target, width=recipe.drafter_width, layers=recipe.drafter_layers, heads=4, kv_heads=2,
                       head_dim=recipe.drafter_width // 4, intermediate=2 * recipe.drafter_width,
                       text_block=recipe.drafter_text_block)


def ar_selection(keyframes: Sequence[Any], spec: Any) -> Any:
    """The target's checkpoint selection: the 3D ADE of greedy AR decodes of `keyframes`, which the
    training ranks share (`training_target.SharedSelection`)."""
    from plan_stack.eval import plans as EV
    from plan_stack.planning.training.target import SharedSelection

    return SharedSelection(keyframes, lambda m, kfs: EV.predictions_for(m, kfs, spec, "ar"),
                           lambda kfs, preds: EV.scored(kfs, preds, spec, "ar").score)


def clipped_points(keyframes: Sequence[Any], ranges: dict, spec: Any) -> int:
    """How many annotated points of `keyframes` lie outside `ranges` on some axis (the quantiser clips them)."""
    import numpy as np

    from plan_stack.planning.samples import SPACE

    space, axes = SPACE[spec.kind]
    lo = np.array([ranges[space][a][0] for a in axes])
    hi = np.array([ranges[space][a][1] for a in axes])
    pts = np.concatenate([p[:, :len(axes)] for kf in keyframes for p in kf.points])
    return int(np.sum(np.any((pts < lo) | (pts > hi), axis=1)))


def selection_keyframes(val_kf: Sequence[Any], n: int) -> list[Any]:
    """The validation keyframes checkpoints are chosen on: `n` evenly spaced ones plus every episode's first.

    At a first keyframe nothing has moved, so only the image can place the plan; spaced keyframes alone
    (1-2 first ones among 24) let a checkpoint that ignores the scene win on noise (measured: step 900 kept
    at 0.79 vs 0.81 cm while its plan end at t=0 was 5.5 cm off against 3.0 cm at step 1,200).
    """
    spaced = list(val_kf[::max(1, len(val_kf) // n)][:n])
    firsts = [kf for kf in val_kf if kf.index == 0 and not any(kf is s for s in spaced)]
    return spaced + firsts


def located_centre(kf: Any, spec: Any, rule: str = "first") -> tuple[float, float] | None:
    """Centre of the located object's box in the annotated camera, as fractions of its size (None: none).

    `rule` "first": the first of `spec.box_objects`; "largest": the box of largest area among all the
    keyframe's annotated boxes (for a road scene, the nearest obstacle in view).
    """
    if rule == "first":
        box = kf.boxes.get(spec.box_objects[0]) if spec.box_objects else None
    elif rule == "largest":
        box = max(kf.boxes.values(), key=lambda b: (b[2] - b[0]) * (b[3] - b[1]), default=None)
    else:
        raise ValueError(f"locate: unknown rule {rule!r} (first, largest)")
    if box is None:
        return None
    w, h = kf.camera_size
    return ((box[0] + box[2]) / 2 / w, (box[1] + box[3]) / 2 / h)


def true_steps(keyframes, order: int = 1) -> Any:
    """Every |`order`-th difference| (m) of the annotated tracks of `keyframes`: 1, the distances between
    consecutive waypoints; 2, the changes between consecutive steps."""
    import numpy as np

    steps = [np.linalg.norm(np.diff(p, n=order, axis=0), axis=1) for kf in keyframes for p in kf.points
             if len(p) > order]
    return np.concatenate(steps) if steps else np.zeros(0)


def gate_bound(val_keyframes, factor: float, order: int = 1) -> tuple[float, dict]:
    """A VFlash gate bound, chosen on the validation split (never the held-out one): `factor` x the
    largest true step (`order` 1) or change between consecutive steps (`order` 2) of the annotated
    waypoints there. Returns (bound m, the rule and the distribution it came from, for the manifest)."""
    import numpy as np

    what = {1: "step", 2: "step change"}[order]
    steps = true_steps(val_keyframes, order)
    if not len(steps):
        raise ValueError(f"no annotated track with {order + 1} waypoints in the validation split")
    bound = round(float(steps.max()) * factor, 3)
    return bound, {"split": "val", "rule": f"{factor} x max true {what}", "factor": factor,
                   "keyframes": len(val_keyframes), "steps": int(len(steps)),
                   f"true_{what.replace(' ', '_')}_m": {"p50": round(float(np.median(steps)), 4),
                                                       "p99": round(float(np.percentile(steps, 99)), 4),
                                                       "max": round(float(steps.max()), 4)}}


def gate_manifest(val_keyframes, recipe: Recipe) -> dict[str, Any]:
    """The manifest's gate keys: the step bound, the step-change bound where the recipe asks for one
    (else 0: none), and the rules they came from."""
    step, rule = gate_bound(val_keyframes, recipe.gate_step_factor)
    out: dict[str, Any] = {"gate_max_step_m": step, "gate_rule": rule, "gate_max_step_change_m": 0.0}
    if recipe.gate_step_change_factor > 0:
        change, change_rule = gate_bound(val_keyframes, recipe.gate_step_change_factor, order=2)
        out["gate_max_step_change_m"] = change
        out["gate_rule"] = {**rule, "step_change": change_rule}
    return out


TEXT_BLOCKS = (16, 17, 18, 20, 24)  #: text blocks tried for a model's manifest `text_block`


def choose_text_block(model: Any, val_keyframes: Sequence[Any], candidates: Sequence[int] = TEXT_BLOCKS,
                      tolerance: float = 0.02) -> tuple[int, dict]:
    """The manifest's `text_block`: the smallest block whose VFlash decodes of validation keyframes need
    at most `tolerance` more text target passes than the fewest any candidate needs. DFlash is lossless,
    so only speed depends on it, and counting passes (not timing them) makes the choice reproducible: a
    response whose text is one token longer than a whole number of blocks pays a pass for that token."""
    from plan_stack.planning.decoders import DecoderConfig

    prompts = [(model.encode(kf.instruction, [kf.images]), kf.camera_size) for kf in val_keyframes]
    passes: dict[int, float] = {}
    for tb in candidates:
        dec = model.decoder(DecoderConfig(budget=int(model.manifest["budget"]), text_block=int(tb)))
        n = [dec.generate(prompt, decoder="vflash", image_size=size).stats.target_forwards_text
             for prompt, size in prompts]
        passes[int(tb)] = sum(n) / max(len(n), 1)
    fewest = min(passes.values())
    best = min(tb for tb, p in passes.items() if p <= fewest * (1 + tolerance))
    return best, {"split": "val", "keyframes": len(val_keyframes), "mean_text_passes": passes,
                  "rule": f"smallest block within {tolerance:.0%} of the fewest text target passes"}


def set_gate(out: Path, val_dir: str, spec, recipe: Recipe, log) -> int:
    """Stage `gate`: rewrite only the gate bound of an existing model directory's manifest (chosen on
    the validation split by `gate_bound`); weights untouched."""
    from plan_stack.data.episodes import load_keyframes
    from plan_stack.planning.errors import PlanningError
    from plan_stack.planning.model_dir import MANIFEST, load_planner_model

    try:
        model = load_planner_model(out)
    except PlanningError as exc:
        print(f"train: --stages gate rewrites a trained model's gate: {exc}", file=sys.stderr)
        return 2
    keyframes = load_keyframes(val_dir, spec, model.required_image_size(), progress=True)
    gate = gate_manifest(keyframes, recipe)
    path = out / MANIFEST
    manifest = json.loads(path.read_text())
    log(f"gate: step bound {manifest.get('gate_max_step_m')} -> {gate['gate_max_step_m']} m, step-change bound "
        f"{manifest.get('gate_max_step_change_m', 0.0)} -> {gate['gate_max_step_change_m']} m ({gate['gate_rule']})")
    manifest.update(gate)
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    load_planner_model(out)  # what was written must load
    return 0


#: splits this process has read, by (directory, robot, image size, data fingerprint): the on-policy stage
#: trains every round and the final drafter fine-tune in this process, on the splits read before plus one
_LOADED_SPLITS: dict[tuple[Any, ...], list[Any]] = {}


def _split_keyframes(path: str, spec: Any, image_size: tuple[int, int], fingerprint: dict) -> list[Any]:
    """`load_keyframes` of a split, read once per process: a later stage or round in the same process gets
    the same keyframes while the split's fingerprint (every annotation file's bytes) is unchanged.

    Why: each on-policy round re-read every split (≈ 30 s of a driving round's ≈ 4.5 min fine-tune)."""
    from plan_stack.data.episodes import load_keyframes

    key = (os.path.realpath(path), spec.robot, tuple(image_size), fingerprint["sha256"])
    if key not in _LOADED_SPLITS:
        _LOADED_SPLITS[key] = load_keyframes(path, spec, image_size, progress=True)
    return list(_LOADED_SPLITS[key])


def run(args: argparse.Namespace) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    from plan_stack.data.episodes import data_fingerprint
    from plan_stack.eval import plans as EV
    from plan_stack.paths import data_dirs, find_data
    from plan_stack.planning import drafter as D
    from plan_stack.planning.errors import PlanningError
    from plan_stack.planning.model_dir import PlannerModel, load_planner_model, read_manifest, save_planner_model
    from plan_stack.planning.samples import KeyframeSamples, fit_ranges, mirrored, response_tokens
    from plan_stack.planning.target_build import load_target, save_target
    from plan_stack.planning.training import drafter as TR
    from plan_stack.planning.training import target as TT

    torch.set_num_threads(args.threads)
    try:
        device = placement_from_args(args).device
    except EngineError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    robot, robot_profile = args.robot, profile(args.robot)
    spec, recipe = robot_profile.learning, robot_profile.recipe
    if args.target_steps:
        recipe = dataclasses.replace(recipe, target_steps=args.target_steps)
    if args.image_size:
        recipe = dataclasses.replace(recipe, image_size=(args.image_size, args.image_size))
    if args.coord_sigma_bins is not None:
        recipe = dataclasses.replace(recipe, target_coord_sigma_bins=args.coord_sigma_bins)
    if args.drafter_steps:
        recipe = dataclasses.replace(recipe, drafter_steps=args.drafter_steps)
    if args.drafter_text_block:
        recipe = dataclasses.replace(recipe, drafter_text_block=args.drafter_text_block)
    if args.target_lr:
        recipe = dataclasses.replace(recipe, target_lr=args.target_lr)
    try:
        ranks = training_ranks(args.ranks, args.threads, device, recipe.target_batch, recipe.drafter_batch)
    except PlanningError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    init_dir, init_manifest = None, None
    if args.init_from:
        try:
            init_dir = find_data("models", args.init_from)
            init_manifest = read_manifest(init_dir)
        except (OSError, ValueError) as exc:
            print(f"train: --init-from {args.init_from}: {exc}", file=sys.stderr)
            return 2
        if init_manifest.get("robot") != robot or tuple(init_manifest["image_size"]) != recipe.image_size:
            print(f"train: --init-from {init_dir}: a {init_manifest.get('robot')} model at "
                  f"{init_manifest['image_size']} px, not {robot} at {list(recipe.image_size)}", file=sys.stderr)
            return 2
        # the localisation head is not in a model directory: a fresh one would pull the tower at weight 100
        recipe = dataclasses.replace(recipe, target_locate_weight=0.0)
    out = Path(args.out or data_dirs("models")[0] / robot)
    work = Path(args.work or Path("out") / "train" / robot)
    work.mkdir(parents=True, exist_ok=True)
    log = _log(str(work / "train.log"))
    stages = [s for s in args.stages.split(",") if s]
    torch.manual_seed(recipe.seed)

    t0 = time.monotonic()
    if args.record:
        record_splits(robot, args.data, log)
    train_dir, val_dir = os.path.join(args.data, "train"), os.path.join(args.data, "val")
    if stages == ["gate"]:
        return set_gate(out, val_dir, spec, recipe, log)
    extra_dirs = {name: os.path.join(args.data, name)
                  for name in [*robot_profile.planner_extra_splits, *args.extra_split]}
    missing = [d for d in extra_dirs.values() if not glob.glob(os.path.join(d, "*.json"))]
    if missing:
        print(f"train: no recorded episodes in {', '.join(missing)} (the {robot} planner trains on them too; "
              f"record them with --record)", file=sys.stderr)
        return 2
    data_id = {"train": data_fingerprint([train_dir]), "val": data_fingerprint([val_dir]),
               **{name: data_fingerprint([d]) for name, d in extra_dirs.items()}}
    log(f"{robot}: data {data_id}")
    train_kf = _split_keyframes(train_dir, spec, recipe.image_size, data_id["train"])
    val_kf = _split_keyframes(val_dir, spec, recipe.image_size, data_id["val"])
    extra_kf = {name: _split_keyframes(d, spec, recipe.image_size, data_id[name]) for name, d in extra_dirs.items()}
    planner_kf = train_kf + [kf for kfs in extra_kf.values() for kf in kfs]  # what the target and drafter see
    ranges, workspace = fit_ranges(planner_kf, spec)
    if init_manifest is not None:  # the tokens keep their meaning: labels beyond the ranges are clipped
        fitted = ranges
        ranges, workspace = init_manifest["coordinate_ranges"], init_manifest["workspace"]
        log(f"ranges of {init_dir}: {ranges} (this data's own: {fitted}; "
            f"{clipped_points(planner_kf, ranges, spec)} annotated points beyond them, clipped)")
    gate = gate_manifest(val_kf, recipe)
    blind = EV.blind_baseline(train_kf)
    log(f"{len(train_kf)} train / {len(val_kf)} val keyframes"
        + "".join(f" / {len(kfs)} {name}" for name, kfs in extra_kf.items())
        + f", ranges {ranges}, gate step {gate['gate_max_step_m']} m, step change "
        f"{gate['gate_max_step_change_m']} m (data {time.monotonic() - t0:.0f} s)")
    kinds = (["box"] if spec.box_objects else []) + [spec.kind]
    manifest: dict[str, Any] = {
        "robot": robot, "cameras": list(spec.cameras), "image_size": list(recipe.image_size), "history_frames": 1,
        "instruction": train_kf[0].instruction, "primitive_kinds": kinds, "coordinate_ranges": ranges,
        "waypoints": sorted({len(kf.points[0]) for kf in train_kf}),  # P per primitive (exported block sizes)
        "workspace": workspace, **gate, "frame_id": spec.frame_id,
        "response": "sub-task text + '. ' + per primitive: tool call + block; EOS",
        "data": {"splits_by_seed": {k: {"first_seed": s, "episodes": n} for k, (s, n) in robot_profile.splits.items()},
                 **data_id,
                 "samples": {"train": len(train_kf), "val": len(val_kf),
                             **{name: len(kfs) for name, kfs in extra_kf.items()}},
                 "planner_trains_on": ["train", *extra_kf],
                 "recorded_with": " ".join(["plan-stack", *record_argv(robot)]),
                 **({"extra_record_options": {k: " ".join(v) for k, v in robot_profile.planner_extra_splits.items()}}
                    if extra_kf else {})},
        "recipe": dataclasses.asdict(recipe), "git_commit": git_commit(),
        "pretrained_weights": "none (random init; no model hub reachable)",
    }
    if init_manifest is not None:
        manifest["initialised_from"] = {
            "model_dir": str(init_dir), "git_commit": init_manifest.get("git_commit", ""),
            "planner_trained_on": init_manifest.get("data", {}).get("planner_trains_on"),
            "target_training": init_manifest.get("target_training"),
            "drafter_training": init_manifest.get("drafter_training")}
        manifest["pretrained_weights"] = f"fine-tuned from {init_dir} (itself from random init)"
    target = load_target(init_dir / "target") if init_dir is not None else build_target(recipe)
    target.model.to(device)
    model = PlannerModel(out, target, None, manifest)
    lens = [len(response_tokens(target, kf, spec, model.ranges)[0]) for kf in planner_kf]
    manifest["budget"] = max(lens) + recipe.budget_margin
    val_sel = selection_keyframes(val_kf, recipe.val_keyframes)

    target_dir = work / "target_final"
    if "target" in stages:
        target_kf = planner_kf + ([mirrored(kf) for kf in planner_kf] if recipe.target_mirror else [])
        items = [TT.TrainItem(kf.images, kf.instruction, response_tokens(target, kf, spec, model.ranges)[0],
                              located_centre(kf, spec, recipe.locate)) for kf in target_kf]
        cfg = TT.TargetTrainConfig(steps=recipe.target_steps, batch_size=recipe.target_batch, lr=recipe.target_lr,
                                   eval_every=recipe.eval_every, coord_sigma_bins=recipe.target_coord_sigma_bins,
                                   locate_weight=recipe.target_locate_weight, seed=recipe.seed)
        log(f"target: {sum(p.numel() for p in target.model.parameters()) / 1e6:.2f} M parameters, "
            f"{cfg.steps} steps x {cfg.batch_size} on {len(items)} samples"
            f"{' (each keyframe also mirrored)' if recipe.target_mirror else ''}; "
            f"selection on {len(val_sel)} val keyframes (AR ADE)")

        res = TT.train_target(model, items, cfg, work / "target", data_id=data_id, resume=args.resume,
                              force_resume=args.force_resume, evaluate=ar_selection(val_sel, spec), progress=True,
                              log=log, ranks=ranks)
        del items, target_kf  # the mirrored images are copies: gone before the drafter's batches
        save_target(target, target_dir)
        info = {"steps": res["steps"], "minutes": round(res["minutes"], 2), "ranks": ranks,
                "best_step": res["best_step"],
                "val_ar_ade_m": res["best_score"], "config": dataclasses.asdict(cfg),
                "locate_rms_px_at_224": None if res["locate_rms"] is None else round(224 * res["locate_rms"], 2),
                "first_loss": res["losses"][0] if res["losses"] else None,
                "last_loss": res["losses"][-1] if res["losses"] else None}
        if res["losses"] or not (work / "target_info.json").is_file():  # a finished run resumed keeps its record
            (work / "target_info.json").write_text(json.dumps(info, indent=1))
        log(f"target done: {info}")
    if not (target_dir / "config.json").is_file():
        raise PlanningError(f"{target_dir}: no trained target (run the target stage first)")
    target = load_target(target_dir)
    target.model.to(device)
    model = PlannerModel(out, target, None, manifest)
    manifest["target_training"] = json.loads((work / "target_info.json").read_text())

    drafter = None
    if "drafter" in stages or ("target" in stages and (work / "drafter" / D.CONFIG_FILE).is_file()):
        ddir = work / "drafter"
        if args.resume and (ddir / D.CONFIG_FILE).is_file():
            drafter = D.load_drafter(ddir, target)
        elif init_dir is not None:
            drafter = D.load_drafter(init_dir / "drafter", target)
        else:
            drafter = build_drafter(recipe, target)
        drafter.to(device)
    if "drafter" in stages:
        samples = KeyframeSamples(model, planner_kf, spec)  # built batch by batch: see its docstring
        dcfg = TR.DrafterTrainConfig(steps=recipe.drafter_steps, batch_size=recipe.drafter_batch,
                                     lr=recipe.drafter_lr, max_text_anchors=recipe.drafter_text_anchors,
                                     text_block=recipe.drafter_text_block, text_decay=recipe.drafter_text_decay,
                                     checkpoint_every=50, seed=recipe.seed)
        assert drafter is not None  # built above whenever the drafter stage runs
        if drafter.config.text_block != recipe.drafter_text_block:  # loaded (--init-from, --resume) from another
            drafter.config = dataclasses.replace(drafter.config, text_block=recipe.drafter_text_block)
        t1 = time.monotonic()
        log(f"drafter: {D.num_params(drafter) / 1e6:.2f} M parameters, {dcfg.steps} steps x {dcfg.batch_size}")
        losses = TR.train(drafter, target, samples, dcfg, out_dir=work / "drafter", resume=args.resume,
                          progress=True, data_id=data_id, force_resume=args.force_resume, ranks=ranks)
        del samples
        minutes = (time.monotonic() - t1) / 60
        if losses or not (work / "drafter_info.json").is_file():
            (work / "drafter_info.json").write_text(json.dumps({
                "steps": dcfg.steps, "minutes_this_run": round(minutes, 2), "ranks": ranks,
                "config": dataclasses.asdict(dcfg),
                "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None},
                indent=1))
        log(f"drafter done in {minutes:.1f} min: loss {losses[:1]} -> {losses[-1:]}")
    if (work / "drafter_info.json").is_file():
        manifest["drafter_training"] = json.loads((work / "drafter_info.json").read_text())

    if "target" in stages or "drafter" in stages:
        model = PlannerModel(out, target, drafter, manifest)
        if drafter is not None:
            manifest["text_block"], manifest["text_block_choice"] = choose_text_block(
                model, val_sel, sorted({*TEXT_BLOCKS, drafter.config.text_block}))
            log(f"text block {manifest['text_block']}: {manifest['text_block_choice']['mean_text_passes']}")
        rows = EV.evaluate(model, val_sel, spec, ["ar", "vflash"] if drafter is not None else ["ar"], blind=blind)
        manifest["metrics_at_save"] = {"split": "val", "keyframes": len(val_sel),
                                       "rows": [{k: r[k] for k in ("decoder", "ade_3d_m", "fde_3d_m", "sr_5cm",
                                                                   "subtask_match", "outliers", "speedup_vs_ar")}
                                                for r in rows]}
        log("\n" + EV.format_table(rows))
        previous = out / "manifest.json"
        if "target" not in stages and previous.is_file():
            # same target, so the heads' record (maybe written by a heads run beside this one) stays true
            heads_info = json.loads(previous.read_text()).get("action_head_training")
            if heads_info is not None:
                manifest["action_head_training"] = heads_info
        save_planner_model(out, target, drafter, manifest)
        (out / "blind_baseline.json").write_text(json.dumps(blind) + "\n")
        load_planner_model(out)  # what was written must load
        log(f"wrote {out} ({time.monotonic() - t0:.0f} s)")
    # each on-policy round loads every split again plus its own, and the heads read theirs from the
    # directories: this run's keyframes held through the rounds only raised the peak (round 5 swapped)
    del train_kf, val_kf, extra_kf, planner_kf
    if "onpolicy" in stages:
        if not robot_profile.onpolicy_rounds:
            log(f"onpolicy: {robot} has no on-policy rounds; skipped")
        else:
            for i in range(len(robot_profile.onpolicy_rounds)):
                code = onpolicy_round(args, recipe, out, work, log, i)
                if code:
                    return code
            code = final_drafter_fine_tune(args, recipe, out, work, log)
            if code:
                return code
            target = load_target(out / "target")
            target.model.to(device)
            manifest = json.loads((out / "manifest.json").read_text())
    if "heads" in stages:
        if not spec.action_head:
            log(f"heads: the {spec.robot} stack has no action head; skipped")
        else:
            code = train_heads(args, recipe, spec, PlannerModel(out, target, None, manifest), out, work, train_dir,
                               val_dir, data_id, log)
            if code:
                return code
    return 0


def train_heads(args, recipe: Recipe, spec, model, out: Path, work: Path, train_dir: str, val_dir: str,
                data_id: dict, log) -> int:
    """Plain and RTC flow-matching heads conditioned on the frozen target's plan features (written to
    out/action_head/; needs only the trained target, so it can run beside the drafter stage)."""
    import shutil

    import torch

    from plan_stack.actions.head import HeadConfig
    from plan_stack.actions.train import HeadTrainConfig
    from plan_stack.actions.train import train as train_head
    from plan_stack.actions.train_features import planner_feature_episodes

    cache = work / "head_features.pt"
    # the episode limit is part of the key: a cache of fewer episodes must not stand in for a larger recipe
    key = {"data": data_id, "target": hashlib_of(work / "target_final" / "model.safetensors"),
           "train_episodes": recipe.head_episodes, "extra_splits": list(recipe.head_extra_splits)}
    if cache.is_file() and torch.load(cache, weights_only=False)["key"] == key:
        eps = torch.load(cache, weights_only=False)
        train_eps, eval_eps = eps["train"], eps["val"]
    else:
        t0 = time.monotonic()
        train_eps = planner_feature_episodes(model, train_dir, spec, progress=True, limit=recipe.head_episodes)
        for split in recipe.head_extra_splits:  # recovery demonstrations: labelled with the expert's own command
            train_eps += planner_feature_episodes(model, os.path.join(os.path.dirname(train_dir), split), spec,
                                                  progress=True)
        eval_eps = planner_feature_episodes(model, val_dir, spec, progress=True)
        torch.save({"key": key, "train": train_eps, "val": eval_eps}, cache)
        log(f"plan features of {len(train_eps)} + {len(eval_eps)} episodes in {time.monotonic() - t0:.0f} s")
    # what the heads saw and measured, written into the model directory's manifest
    summary: dict[str, Any] = {"conditioning": "target plan features (teacher-forced pass of the annotated response)",
                               "episodes": {"train": len(train_eps), "val": len(eval_eps)},
                               "train_splits": ["train", *recipe.head_extra_splits]}
    e = train_eps[0]
    head_cfg = HeadConfig(action_dim=e.actions.shape[1], state_dim=e.states.shape[1], cond_width=e.cond.shape[2],
                          dt_s=e.dt_s, horizon=50, width=64, layers=2, heads=4, mlp_ratio=2, num_steps=10)
    for variant, delay in (("plain", 0), ("rtc", recipe.head_rtc_max_delay)):
        cfg = HeadTrainConfig(steps=recipe.head_steps, batch_size=recipe.head_batch, lr=recipe.head_lr,
                              rtc_max_delay=delay, eval_every=500, checkpoint_every=250, seed=recipe.seed,
                              state_noise=recipe.head_state_noise)
        hdir = work / f"head_{variant}"
        t0 = time.monotonic()
        res = train_head(head_cfg, cfg, train_eps, eval_eps, str(hdir), resume=args.resume, log=log,
                         meta={"data": {"source": "planner plan features", **data_id, "target": key["target"]}},
                         force_resume=args.force_resume, device=model.target.device)
        dest = out / "action_head" / variant
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            shutil.copy2(hdir / name, dest / name)
        log(f"head {variant}: step {res.step}, loss {res.train_loss:.4f}, eval {res.eval}, "
            f"{(time.monotonic() - t0) / 60:.1f} min -> {dest}")
        summary[variant] = {"steps": res.step, "batch": recipe.head_batch, "max_delay": delay,
                            "state_noise": list(recipe.head_state_noise),
                            "minutes": round((time.monotonic() - t0) / 60, 1),
                            **{f"val_{k.removeprefix('eval_')}": round(float(v), 4) for k, v in res.eval.items()}}
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["action_head_training"] = summary
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


def split_argv(robot: str, data: str, split: str, *options: str) -> list[str]:
    """The `plan-stack` arguments that record `robot`'s `split` (its seeds in the profile's `splits`) into
    DATA/split, with the split's own record-demos `options`."""
    seed, episodes = profile(robot).splits[split]
    return [*record_argv(robot), "--episodes", str(episodes), "--seed", str(seed),
            "--out", os.path.join(data, split), *options]


def record_jobs() -> list[str]:
    """record-demos options for recording a split here: one worker process per core, one torch thread each
    (the files do not depend on them, so the manifest's `recorded_with` leaves them out)."""
    return ["--jobs", str(usable_cores()), "--threads", "1"]


def onpolicy_round(args: argparse.Namespace, recipe: Recipe, out: Path, work: Path, log, index: int) -> int:
    """Stage `onpolicy`, round `index` of the robot's `onpolicy_rounds` (DAgger): the model in `out` (the previous
    stage's or round's) is kept as WORK/before_<split>, drives the round's split (recorded once, unless --data
    has it), and `out` becomes that model fine-tuned on every planner split plus the rounds' splits so far
    (`--init-from`, WORK/<split>). A round the manifest in `out` already lists is skipped under --resume."""
    import shutil

    from plan_stack.cli import main as cli_main

    rounds = profile(args.robot).onpolicy_rounds
    split, options = rounds[index]
    done = [r.get("split") for r in _onpolicy_rounds(out)]
    if args.resume and split in done:
        log(f"onpolicy: round {index + 1} ({split}) is in {out}; skipped")
        return 0
    before = work / f"before_{split}"
    if not (args.resume and (before / "manifest.json").is_file()):
        if not (out / "manifest.json").is_file():
            log(f"onpolicy: no model in {out} to drive (run the target and drafter stages first)")
            return 2
        shutil.rmtree(before, ignore_errors=True)
        shutil.copytree(out, before)
    previous = _onpolicy_rounds(before)
    dest = os.path.join(args.data, split)
    argv = split_argv(args.robot, args.data, split, "--policy-model", os.fspath(before), *options)
    if not glob.glob(os.path.join(dest, "*.json")):
        t0 = time.monotonic()
        log(f"onpolicy: round {index + 1}, recording {split} driven by {before}: plan-stack {' '.join(argv)}")
        code = cli_main([*argv, *record_jobs()])
        if code:
            log(f"onpolicy: record-demos failed (exit {code})")
            return code
        log(f"onpolicy: recorded in {(time.monotonic() - t0) / 60:.1f} min")
    tune = argparse.Namespace(**{**vars(args), "init_from": str(before), "out": str(out),
                                 "work": str(work / split), "stages": "target,drafter", "record": False,
                                 "target_steps": recipe.onpolicy_target_steps,
                                 "target_lr": recipe.onpolicy_target_lr,
                                 "drafter_steps": recipe.onpolicy_drafter_steps,
                                 "extra_split": [*args.extra_split, *(s for s, _ in rounds[:index + 1])]})
    code = run(tune)
    if code:
        return code
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["data"]["onpolicy_rounds"] = [*previous, {
        "split": split, "recorded_with": " ".join(["plan-stack", *argv]),
        "policy": "the model before this round (initialised_from)"}]
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


def final_drafter_fine_tune(args: argparse.Namespace, recipe: Recipe, out: Path, work: Path, log) -> int:
    """After the last on-policy round, the drafter alone is fine-tuned `recipe.onpolicy_final_drafter_steps`
    more steps on the same data, from the round's drafter, on the round's (unchanged) target. The model in
    `out` is kept as WORK/before_drafter_fine_tune; the manifest says so (`drafter_fine_tune`) and keeps the
    rounds. Skipped under --resume when the manifest in `out` has it.

    Why: a round's 600 drafter steps left driving VFlash worse than AR on validation keyframes (6.90 cm against
    6.52); 1,800 more made it 6.40, and held-out 7.89 against AR's 9.28 (docs/models.md, twenty-fifth
    session). The shipped driving model was made that way by hand; `make train` now makes it the same way."""
    import shutil

    steps = recipe.onpolicy_final_drafter_steps
    if not steps:
        return 0
    path = out / "manifest.json"
    if args.resume and "drafter_fine_tune" in json.loads(path.read_text()):
        log(f"drafter fine-tune: in {out}; skipped")
        return 0
    rounds = profile(args.robot).onpolicy_rounds
    before, ft_work = work / "before_drafter_fine_tune", work / "drafter_fine_tune"
    if not (args.resume and (before / "manifest.json").is_file()):
        shutil.rmtree(before, ignore_errors=True)
        shutil.copytree(out, before)
    ft_work.mkdir(parents=True, exist_ok=True)
    last = work / rounds[-1][0]  # the last round's work: its final target and what it measured
    # always the last round's: a directory left by an earlier chain in the same --work holds another target
    shutil.rmtree(ft_work / "target_final", ignore_errors=True)
    shutil.copytree(last / "target_final", ft_work / "target_final")
    shutil.copy2(last / "target_info.json", ft_work / "target_info.json")
    log(f"drafter fine-tune: {steps} steps from the drafter of {before}, its target unchanged")
    t0 = time.monotonic()
    tune = argparse.Namespace(**{**vars(args), "init_from": str(before), "out": str(out), "work": str(ft_work),
                                 "stages": "drafter", "record": False, "drafter_steps": steps,
                                 "extra_split": [*args.extra_split, *(s for s, _ in rounds)]})
    code = run(tune)
    if code:
        return code
    manifest = json.loads(path.read_text())
    manifest["data"]["onpolicy_rounds"] = _onpolicy_rounds(before)
    manifest["drafter_fine_tune"] = {
        "steps": steps, "minutes": round((time.monotonic() - t0) / 60, 2),
        "from": "the drafter of initialised_from (the last on-policy round's model); the target is that model's"}
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


def _onpolicy_rounds(model_dir: Path) -> list[dict]:
    """The on-policy rounds the manifest in `model_dir` says its model went through (none without one)."""
    path = model_dir / "manifest.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text()).get("data", {})
    return list(data.get("onpolicy_rounds", []))


def record_splits(robot: str, data: str, log) -> None:
    """Record every split of the robot's `splits` that `data` lacks (episode seeds fixed, so reproducible); the
    on-policy rounds' splits need a model to drive and are recorded by that stage."""
    from plan_stack.cli import main as cli_main

    robot_profile = profile(robot)
    for split, (seed, episodes) in robot_profile.splits.items():
        if split in {name for name, _ in robot_profile.onpolicy_rounds}:
            continue
        dest = os.path.join(data, split)
        if os.path.isdir(dest) and os.listdir(dest):
            continue
        log(f"recording {robot} {split}: seeds {seed}..{seed + episodes - 1}")
        code = cli_main([*split_argv(robot, data, split, *robot_profile.planner_extra_splits.get(split, ())),
                         *record_jobs()])
        if code:
            raise RuntimeError(f"record-demos failed for {robot} {split} (exit {code})")


def hashlib_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:  # pragma: no cover - `python -m plan_stack.recipes.train`
    parser = argparse.ArgumentParser(prog="plan-stack train")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
