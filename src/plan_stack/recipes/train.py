"""`plan-stack train --robot R`: rebuild every checkpoint of a robot's planner model directory.

Stages (each resumable, each seeded, each with a tqdm bar):

1. data: keyframes of the recorded train / validation episodes
   (`plan-stack record-demos`; seeds in the robot's profile, `plan_stack.robots`), coordinate ranges and
   workspace fitted on the train split, the image-blind baseline;
2. target: a small Qwen3-VL trained autoregressively on the responses
   (`planning.training.target`), the checkpoint chosen by AR-decoded validation ADE;
   then frozen;
3. drafter: VFlash training on the frozen target (`planning.training.drafter`);
4. the model directory: target/, drafter/, manifest.json, blind_baseline.json;
5. onpolicy (robots whose profile has `onpolicy_rounds`: driving): DAgger rounds, in order;
   in each the model just written drives the round's split, the expert labels,
   and the model is fine-tuned on every planner split plus the rounds' splits
   so far (`--init-from`); after the last round the drafter alone trains
   `onpolicy_final_drafter_steps` more (`final_drafter_fine_tune`).

Action heads on the target's plan features are trained by stage `heads`
(`recipes.heads.train_heads`, with the trainer of `actions.train`).
Work files (optimiser states) live in `--work`; `--resume` continues from
them and refuses a different data set unless `--force-resume`.

This module is the command and the chain's order (`run`, one function per stage); the pieces a stage
composes live beside it by what they are about: `recipes.splits` (recording and reading the splits),
`recipes.selection` (what is chosen on the validation split: checkpoint, gate bounds, text block; stage
`gate`), `recipes.onpolicy` (stage `onpolicy`) and `recipes.heads` (stage `heads`).
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plan_stack.device import EngineError, add_device_arguments, placement_from_args
from plan_stack.planning.training.data_parallel import training_ranks, usable_cores
from plan_stack.recipes.heads import train_heads
from plan_stack.recipes.onpolicy import onpolicy_stage
from plan_stack.recipes.selection import (
    TEXT_BLOCKS,
    ar_selection,
    choose_text_block,
    gate_manifest,
    selection_keyframes,
    set_gate,
)
from plan_stack.recipes.splits import record_argv, record_splits, split_keyframes
from plan_stack.robots import Recipe, RobotProfile, profile, robot_names


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
                        help="torch CPU threads, shared by the --ranks processes (default: every core this process "
                             "may use)")
    parser.add_argument("--ranks", type=int, default=None,
                        help="data-parallel training processes on the CPU, sharing --threads and splitting each "
                             "stage's batch (default: 2 where there are 2-3 threads, 4 from 4, where that divides "
                             "every batch, else 1; 1 on a GPU)")
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


def clipped_points(keyframes: Sequence[Any], ranges: dict, spec: Any) -> int:
    """How many annotated points of `keyframes` lie outside `ranges` on some axis (the quantiser clips them)."""
    import numpy as np

    from plan_stack.planning.samples import SPACE

    space, axes = SPACE[spec.kind]
    lo = np.array([ranges[space][a][0] for a in axes])
    hi = np.array([ranges[space][a][1] for a in axes])
    pts = np.concatenate([p[:, :len(axes)] for kf in keyframes for p in kf.points])
    return int(np.sum(np.any((pts < lo) | (pts > hi), axis=1)))


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


@dataclasses.dataclass(frozen=True)
class _Chain:
    """One run of the chain as its command line resolves: the robot, its recipe with the command line's
    overrides, where it trains (device, ranks), the `--init-from` model, the directories, the log, the stages."""

    args: argparse.Namespace
    robot_profile: RobotProfile
    recipe: Recipe
    device: Any
    ranks: int
    init_dir: Path | None
    init_manifest: dict[str, Any] | None
    out: Path
    work: Path
    log: Callable[[str], None]
    stages: list[str]

    @property
    def robot(self) -> str:
        return self.args.robot

    @property
    def spec(self) -> Any:
        return self.robot_profile.learning


def _overridden(recipe: Recipe, args: argparse.Namespace) -> Recipe:
    """The robot's recipe with the command line's overrides (an option left out keeps the recipe's value)."""
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
    return recipe


def _resolve(args: argparse.Namespace) -> _Chain | int:
    """The run's settings, or exit code 2 with the reason on stderr (an unusable device, ranks the batches
    cannot be shared by, an `--init-from` model that is missing or of another robot or image size)."""
    from plan_stack.paths import data_dirs, find_data
    from plan_stack.planning.errors import PlanningError
    from plan_stack.planning.model_dir import read_manifest

    try:
        device = placement_from_args(args).device
    except EngineError as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    robot, robot_profile = args.robot, profile(args.robot)
    recipe = _overridden(robot_profile.recipe, args)
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
    return _Chain(args, robot_profile, recipe, device, ranks, init_dir, init_manifest, out, work,
                  _log(str(work / "train.log")), [s for s in args.stages.split(",") if s])


@dataclasses.dataclass
class _Data:
    """What the run trains and chooses on: the splits' fingerprints and keyframes, and what was fitted on
    them (coordinate ranges and workspace, the gate bounds, the image-blind baseline)."""

    train_dir: str
    val_dir: str
    data_id: dict[str, Any]
    train: list[Any]
    val: list[Any]
    extra: dict[str, list[Any]]
    planner: list[Any]  # what the target and drafter see: train plus the extra splits
    ranges: dict[str, Any]
    workspace: Any
    gate: dict[str, Any]
    blind: Any


def _read_data(chain: _Chain, train_dir: str, val_dir: str, t0: float) -> _Data | int:
    """Stage data: the splits' keyframes, ranges and workspace fitted on the planner's splits (or the
    `--init-from` model's, kept), the gate bounds on the validation split; exit code 2 when a split the
    planner trains on has no recorded episodes."""
    from plan_stack.data.episodes import data_fingerprint
    from plan_stack.eval import plans as EV
    from plan_stack.planning.samples import fit_ranges

    args, spec, recipe, log = chain.args, chain.spec, chain.recipe, chain.log
    extra_dirs = {name: os.path.join(args.data, name)
                  for name in [*chain.robot_profile.planner_extra_splits, *args.extra_split]}
    missing = [d for d in extra_dirs.values() if not glob.glob(os.path.join(d, "*.json"))]
    if missing:
        print(f"train: no recorded episodes in {', '.join(missing)} (the {chain.robot} planner trains on them "
              f"too; record them with --record)", file=sys.stderr)
        return 2
    data_id = {"train": data_fingerprint([train_dir]), "val": data_fingerprint([val_dir]),
               **{name: data_fingerprint([d]) for name, d in extra_dirs.items()}}
    log(f"{chain.robot}: data {data_id}")
    train_kf = split_keyframes(train_dir, spec, recipe.image_size, data_id["train"])
    val_kf = split_keyframes(val_dir, spec, recipe.image_size, data_id["val"])
    extra_kf = {name: split_keyframes(d, spec, recipe.image_size, data_id[name]) for name, d in extra_dirs.items()}
    planner_kf = train_kf + [kf for kfs in extra_kf.values() for kf in kfs]
    ranges, workspace = fit_ranges(planner_kf, spec)
    if chain.init_manifest is not None:  # the tokens keep their meaning: labels beyond the ranges are clipped
        fitted = ranges
        ranges, workspace = chain.init_manifest["coordinate_ranges"], chain.init_manifest["workspace"]
        log(f"ranges of {chain.init_dir}: {ranges} (this data's own: {fitted}; "
            f"{clipped_points(planner_kf, ranges, spec)} annotated points beyond them, clipped)")
    gate = gate_manifest(val_kf, recipe)
    blind = EV.blind_baseline(train_kf)
    log(f"{len(train_kf)} train / {len(val_kf)} val keyframes"
        + "".join(f" / {len(kfs)} {name}" for name, kfs in extra_kf.items())
        + f", ranges {ranges}, gate step {gate['gate_max_step_m']} m, step change "
        f"{gate['gate_max_step_change_m']} m (data {time.monotonic() - t0:.0f} s)")
    return _Data(train_dir, val_dir, data_id, train_kf, val_kf, extra_kf, planner_kf, ranges, workspace, gate,
                 blind)


def _manifest(chain: _Chain, data: _Data) -> dict[str, Any]:
    """The model directory's manifest as far as the data and the recipe say; the stages add their records."""
    spec, recipe, robot_profile, init_manifest = chain.spec, chain.recipe, chain.robot_profile, chain.init_manifest
    kinds = (["box"] if spec.box_objects else []) + [spec.kind]
    manifest: dict[str, Any] = {
        "robot": chain.robot, "cameras": list(spec.cameras), "image_size": list(recipe.image_size),
        "history_frames": 1, "instruction": data.train[0].instruction, "primitive_kinds": kinds,
        "coordinate_ranges": data.ranges,
        "waypoints": sorted({len(kf.points[0]) for kf in data.train}),  # P per primitive (exported block sizes)
        "workspace": data.workspace, **data.gate, "frame_id": spec.frame_id,
        "response": "sub-task text + '. ' + per primitive: tool call + block; EOS",
        "data": {"splits_by_seed": {k: {"first_seed": s, "episodes": n} for k, (s, n) in robot_profile.splits.items()},
                 **data.data_id,
                 "samples": {"train": len(data.train), "val": len(data.val),
                             **{name: len(kfs) for name, kfs in data.extra.items()}},
                 "planner_trains_on": ["train", *data.extra],
                 "recorded_with": " ".join(["plan-stack", *record_argv(chain.robot)]),
                 **({"extra_record_options": {k: " ".join(v) for k, v in robot_profile.planner_extra_splits.items()}}
                    if data.extra else {})},
        "recipe": dataclasses.asdict(recipe), "git_commit": git_commit(),
        "pretrained_weights": "none (random init; no model hub reachable)",
    }
    if init_manifest is not None:
        manifest["initialised_from"] = {
            "model_dir": str(chain.init_dir), "git_commit": init_manifest.get("git_commit", ""),
            "planner_trained_on": init_manifest.get("data", {}).get("planner_trains_on"),
            "target_training": init_manifest.get("target_training"),
            "drafter_training": init_manifest.get("drafter_training")}
        manifest["pretrained_weights"] = f"fine-tuned from {chain.init_dir} (itself from random init)"
    return manifest


def _start_model(chain: _Chain, data: _Data, manifest: dict[str, Any]) -> Any:
    """The model the target stage trains: the `--init-from` target or a fresh one of the recipe's size, on the
    device; sets the manifest's `budget` (the longest planner response in tokens plus the recipe's margin)."""
    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.samples import response_tokens
    from plan_stack.planning.target_build import load_target

    target = load_target(chain.init_dir / "target") if chain.init_dir is not None else build_target(chain.recipe)
    target.model.to(chain.device)
    model = PlannerModel(chain.out, target, None, manifest)
    lens = [len(response_tokens(target, kf, chain.spec, model.ranges)[0]) for kf in data.planner]
    manifest["budget"] = max(lens) + chain.recipe.budget_margin
    return model


def _train_target(chain: _Chain, data: _Data, model: Any, val_sel: Sequence[Any]) -> None:
    """Stage target: autoregressive training of `model`'s target on the planner's keyframes (mirrored too where
    the recipe says), the checkpoint chosen on `val_sel` by AR ADE, saved to WORK/target_final with its record
    WORK/target_info.json."""
    from plan_stack.planning.samples import mirrored, response_tokens
    from plan_stack.planning.target_build import save_target
    from plan_stack.planning.training import target as TT

    args, spec, recipe, work, log, target = chain.args, chain.spec, chain.recipe, chain.work, chain.log, model.target
    target_kf = data.planner + ([mirrored(kf) for kf in data.planner] if recipe.target_mirror else [])
    items = [TT.TrainItem(kf.images, kf.instruction, response_tokens(target, kf, spec, model.ranges)[0],
                          located_centre(kf, spec, recipe.locate)) for kf in target_kf]
    cfg = TT.TargetTrainConfig(steps=recipe.target_steps, batch_size=recipe.target_batch, lr=recipe.target_lr,
                               eval_every=recipe.eval_every, coord_sigma_bins=recipe.target_coord_sigma_bins,
                               locate_weight=recipe.target_locate_weight, seed=recipe.seed)
    log(f"target: {sum(p.numel() for p in target.model.parameters()) / 1e6:.2f} M parameters, "
        f"{cfg.steps} steps x {cfg.batch_size} on {len(items)} samples"
        f"{' (each keyframe also mirrored)' if recipe.target_mirror else ''}; "
        f"selection on {len(val_sel)} val keyframes (AR ADE)")

    res = TT.train_target(model, items, cfg, work / "target", data_id=data.data_id, resume=args.resume,
                          force_resume=args.force_resume, evaluate=ar_selection(val_sel, spec), progress=True,
                          log=log, ranks=chain.ranks)
    del items, target_kf  # the mirrored images are copies: gone before the drafter's batches
    save_target(target, work / "target_final")
    info = {"steps": res["steps"], "minutes": round(res["minutes"], 2), "ranks": chain.ranks,
            "best_step": res["best_step"],
            "val_ar_ade_m": res["best_score"], "config": dataclasses.asdict(cfg),
            "locate_rms_px_at_224": None if res["locate_rms"] is None else round(224 * res["locate_rms"], 2),
            "first_loss": res["losses"][0] if res["losses"] else None,
            "last_loss": res["losses"][-1] if res["losses"] else None}
    if res["losses"] or not (work / "target_info.json").is_file():  # a finished run resumed keeps its record
        (work / "target_info.json").write_text(json.dumps(info, indent=1))
    log(f"target done: {info}")


def _trained_target(chain: _Chain, manifest: dict[str, Any]) -> Any:
    """The model on the trained target (WORK/target_final, this run's or an earlier one's), no drafter; the
    manifest gets the target's training record."""
    from plan_stack.planning.errors import PlanningError
    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.target_build import load_target

    target_dir = chain.work / "target_final"
    if not (target_dir / "config.json").is_file():
        raise PlanningError(f"{target_dir}: no trained target (run the target stage first)")
    target = load_target(target_dir)
    target.model.to(chain.device)
    model = PlannerModel(chain.out, target, None, manifest)
    manifest["target_training"] = json.loads((chain.work / "target_info.json").read_text())
    return model


def _start_drafter(chain: _Chain, target: Any) -> Any:
    """The drafter the run trains or writes (None: neither): WORK/drafter under --resume, else the
    `--init-from` model's, else a fresh one of the recipe's size."""
    from plan_stack.planning import drafter as D

    work, stages = chain.work, chain.stages
    if not ("drafter" in stages or ("target" in stages and (work / "drafter" / D.CONFIG_FILE).is_file())):
        return None
    ddir = work / "drafter"
    if chain.args.resume and (ddir / D.CONFIG_FILE).is_file():
        drafter = D.load_drafter(ddir, target)
    elif chain.init_dir is not None:
        drafter = D.load_drafter(chain.init_dir / "drafter", target)
    else:
        drafter = build_drafter(chain.recipe, target)
    drafter.to(chain.device)
    return drafter


def _train_drafter(chain: _Chain, data: _Data, model: Any, drafter: Any) -> None:
    """Stage drafter: VFlash training of `drafter` on the frozen target of `model`, on the planner's keyframes;
    checkpoints in WORK/drafter, its record WORK/drafter_info.json."""
    from plan_stack.planning import drafter as D
    from plan_stack.planning.samples import KeyframeSamples
    from plan_stack.planning.training import drafter as TR

    args, recipe, work, log = chain.args, chain.recipe, chain.work, chain.log
    samples = KeyframeSamples(model, data.planner, chain.spec)  # built batch by batch: see its docstring
    dcfg = TR.DrafterTrainConfig(steps=recipe.drafter_steps, batch_size=recipe.drafter_batch,
                                 lr=recipe.drafter_lr, max_text_anchors=recipe.drafter_text_anchors,
                                 text_block=recipe.drafter_text_block, text_decay=recipe.drafter_text_decay,
                                 checkpoint_every=50, seed=recipe.seed)
    if drafter.config.text_block != recipe.drafter_text_block:  # loaded (--init-from, --resume) from another
        drafter.config = dataclasses.replace(drafter.config, text_block=recipe.drafter_text_block)
    t1 = time.monotonic()
    log(f"drafter: {D.num_params(drafter) / 1e6:.2f} M parameters, {dcfg.steps} steps x {dcfg.batch_size}")
    losses = TR.train(drafter, model.target, samples, dcfg, out_dir=work / "drafter", resume=args.resume,
                      progress=True, data_id=data.data_id, force_resume=args.force_resume, ranks=chain.ranks)
    del samples
    minutes = (time.monotonic() - t1) / 60
    if losses or not (work / "drafter_info.json").is_file():
        (work / "drafter_info.json").write_text(json.dumps({
            "steps": dcfg.steps, "minutes_this_run": round(minutes, 2), "ranks": chain.ranks,
            "config": dataclasses.asdict(dcfg),
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None},
            indent=1))
    log(f"drafter done in {minutes:.1f} min: loss {losses[:1]} -> {losses[-1:]}")


def _write_model(chain: _Chain, data: _Data, manifest: dict[str, Any], target: Any, drafter: Any,
                 val_sel: Sequence[Any], t0: float) -> None:
    """The model directory: the text block chosen and the metrics measured on `val_sel`, the heads' record
    kept where the target is unchanged, the weights, manifest and blind baseline written and loaded back."""
    from plan_stack.eval import plans as EV
    from plan_stack.planning.model_dir import PlannerModel, load_planner_model, save_planner_model

    out, spec, log = chain.out, chain.spec, chain.log
    model = PlannerModel(out, target, drafter, manifest)
    if drafter is not None:
        manifest["text_block"], manifest["text_block_choice"] = choose_text_block(
            model, val_sel, sorted({*TEXT_BLOCKS, drafter.config.text_block}))
        log(f"text block {manifest['text_block']}: {manifest['text_block_choice']['mean_text_passes']}")
    rows = EV.evaluate(model, val_sel, spec, ["ar", "vflash"] if drafter is not None else ["ar"], blind=data.blind)
    manifest["metrics_at_save"] = {"split": "val", "keyframes": len(val_sel),
                                   "rows": [{k: r[k] for k in ("decoder", "ade_3d_m", "fde_3d_m", "sr_5cm",
                                                               "subtask_match", "outliers", "speedup_vs_ar")}
                                            for r in rows]}
    log("\n" + EV.format_table(rows))
    previous = out / "manifest.json"
    if "target" not in chain.stages and previous.is_file():
        # same target, so the heads' record (maybe written by a heads run beside this one) stays true
        heads_info = json.loads(previous.read_text()).get("action_head_training")
        if heads_info is not None:
            manifest["action_head_training"] = heads_info
    save_planner_model(out, target, drafter, manifest)
    (out / "blind_baseline.json").write_text(json.dumps(data.blind) + "\n")
    load_planner_model(out)  # what was written must load
    log(f"wrote {out} ({time.monotonic() - t0:.0f} s)")


def run(args: argparse.Namespace) -> int:
    """The chain: data, then the stages asked for, in order (see the module docstring); the exit code."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.target_build import load_target

    torch.set_num_threads(args.threads)
    chain = _resolve(args)
    if isinstance(chain, int):
        return chain
    out, work, log, stages, spec = chain.out, chain.work, chain.log, chain.stages, chain.spec
    torch.manual_seed(chain.recipe.seed)

    t0 = time.monotonic()
    if args.record:
        record_splits(chain.robot, args.data, log)
    train_dir, val_dir = os.path.join(args.data, "train"), os.path.join(args.data, "val")
    if stages == ["gate"]:
        return set_gate(out, val_dir, spec, chain.recipe, log)
    data = _read_data(chain, train_dir, val_dir, t0)
    if isinstance(data, int):
        return data
    manifest = _manifest(chain, data)
    model = _start_model(chain, data, manifest)
    val_sel = selection_keyframes(data.val, chain.recipe.val_keyframes)
    if "target" in stages:
        _train_target(chain, data, model, val_sel)
    model = _trained_target(chain, manifest)
    target = model.target
    drafter = _start_drafter(chain, target)
    if "drafter" in stages:
        _train_drafter(chain, data, model, drafter)
    if (work / "drafter_info.json").is_file():
        manifest["drafter_training"] = json.loads((work / "drafter_info.json").read_text())
    if "target" in stages or "drafter" in stages:
        _write_model(chain, data, manifest, target, drafter, val_sel, t0)
    data_id = data.data_id
    # each on-policy round loads every split again plus its own, and the heads read theirs from the
    # directories: this run's keyframes held through the rounds only raised the peak (round 5 swapped)
    del data
    if "onpolicy" in stages:
        if not chain.robot_profile.onpolicy_rounds:
            log(f"onpolicy: {chain.robot} has no on-policy rounds; skipped")
        else:
            code = onpolicy_stage(args, chain.recipe, out, work, log, run)
            if code:
                return code
            target = load_target(out / "target")
            target.model.to(chain.device)
            manifest = json.loads((out / "manifest.json").read_text())
    if "heads" in stages:
        if not spec.action_head:
            log(f"heads: the {spec.robot} stack has no action head; skipped")
        else:
            code = train_heads(args, chain.recipe, spec, PlannerModel(out, target, None, manifest), out, work,
                               train_dir, val_dir, data_id, log)
            if code:
                return code
    return 0


def main() -> int:  # pragma: no cover - `python -m plan_stack.recipes.train`
    parser = argparse.ArgumentParser(prog="plan-stack train")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
