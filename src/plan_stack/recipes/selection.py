"""What `plan-stack train` chooses on the validation split: the target's checkpoint, the gate bounds, the text block.

Each choice is made on the validation split (never the held-out one, which the reported results are
measured on) by a stated rule, and the manifest records the rule with the numbers it came from
(`gate_rule`, `text_block_choice`, `target_training.best_step`), so a model directory says why it holds
what it holds. Stage `gate` re-chooses the gate bounds alone (`set_gate`).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plan_stack.robots import Recipe


def ar_selection(keyframes: Sequence[Any], spec: Any) -> Any:
    """The target's checkpoint selection: the 3D ADE of greedy AR decodes of `keyframes`, which the
    training ranks share (`planning.training.target.SharedSelection`)."""
    from plan_stack.eval import plans as EV
    from plan_stack.planning.training.target import SharedSelection

    return SharedSelection(keyframes, lambda m, kfs: EV.predictions_for(m, kfs, spec, "ar"),
                           lambda kfs, preds: EV.scored(kfs, preds, spec, "ar").score)


def selection_keyframes(val_kf: Sequence[Any], n: int) -> list[Any]:
    """The validation keyframes checkpoints are chosen on: `n` evenly spaced ones plus every episode's first.

    At a first keyframe nothing has moved, so only the image can place the plan; spaced keyframes alone
    (1-2 first ones among 24) let a checkpoint that ignores the scene win on noise (measured: step 900 kept
    at 0.79 vs 0.81 cm while its plan end at t=0 was 5.5 cm off against 3.0 cm at step 1,200).
    """
    spaced = list(val_kf[::max(1, len(val_kf) // n)][:n])
    firsts = [kf for kf in val_kf if kf.index == 0 and not any(kf is s for s in spaced)]
    return spaced + firsts


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
