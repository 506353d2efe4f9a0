"""Stage `onpolicy` of `plan-stack train`: DAgger rounds on the model the chain just wrote.

In each round of the robot's `onpolicy_rounds` the current model drives the round's split, the expert
labels it, and the model is fine-tuned on every planner split plus the rounds' splits so far; after the
last round the drafter alone trains more (`final_drafter_fine_tune`). A fine-tune is the chain itself
run again with `--init-from` (the caller passes it in as `retrain`), so a round trains exactly as a
`plan-stack train --init-from` would. Each step keeps the model before it in the work directory and
the manifest lists the rounds done, which is what `--resume` skips by.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from plan_stack.recipes.splits import record_jobs, split_argv
from plan_stack.robots import Recipe, profile

#: the chain (`recipes.train.run`), run again on a fine-tune's arguments; returns its exit code
Retrain = Callable[[argparse.Namespace], int]


def onpolicy_stage(args: argparse.Namespace, recipe: Recipe, out: Path, work: Path, log, retrain: Retrain) -> int:
    """Stage `onpolicy`: every round of the robot's `onpolicy_rounds` in order, then the final drafter
    fine-tune; the first failing step's exit code ends it. The caller has checked the robot has rounds."""
    for i in range(len(profile(args.robot).onpolicy_rounds)):
        code = onpolicy_round(args, recipe, out, work, log, i, retrain)
        if code:
            return code
    return final_drafter_fine_tune(args, recipe, out, work, log, retrain)


def onpolicy_round(args: argparse.Namespace, recipe: Recipe, out: Path, work: Path, log, index: int,
                   retrain: Retrain) -> int:
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
    code = retrain(tune)
    if code:
        return code
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["data"]["onpolicy_rounds"] = [*previous, {
        "split": split, "recorded_with": " ".join(["plan-stack", *argv]),
        "policy": "the model before this round (initialised_from)"}]
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


def final_drafter_fine_tune(args: argparse.Namespace, recipe: Recipe, out: Path, work: Path, log,
                            retrain: Retrain) -> int:
    """After the last on-policy round, the drafter alone is fine-tuned `recipe.onpolicy_final_drafter_steps`
    more steps on the same data, from the round's drafter, on the round's (unchanged) target. The model in
    `out` is kept as WORK/before_drafter_fine_tune; the manifest says so (`drafter_fine_tune`) and keeps the
    rounds. Skipped under --resume when the manifest in `out` has it.

    Why: a round's 600 drafter steps left driving VFlash worse than AR on validation keyframes (6.90 cm against
    6.52); 1,800 more made it 6.40, and held-out 7.89 against AR's 9.28 (docs/models.md, "Recipe", stage 3). The shipped
    driving model was made that way by hand; `make train` now makes it the same way."""
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
    code = retrain(tune)
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
