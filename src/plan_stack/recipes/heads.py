"""Stage `heads` of `plan-stack train`: the action heads on the frozen target's plan features.

The heads (plain and RTC flow matching) are conditioned on the plan features of the trained target, so
this stage needs only WORK/target_final and can run beside the drafter stage. The features are computed
once and cached in the work directory under a key of the data, the target's weights and the episodes
asked for; the heads land in OUT/action_head/ and what they saw and measured in the manifest
(`action_head_training`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from plan_stack.robots import Recipe


def train_heads(args, recipe: Recipe, spec, model, out: Path, work: Path, train_dir: str, val_dir: str,
                data_id: dict, log) -> int:
    """Plain and RTC flow-matching heads conditioned on the frozen target's plan features (written to
    out/action_head/; needs only the trained target, so it can run beside the drafter stage)."""
    import shutil

    import torch

    from plan_stack.actions.head import HeadConfig
    from plan_stack.actions.train import HeadTrainConfig
    from plan_stack.actions.train import train as train_head
    from plan_stack.actions.train_features import PLAN_FEATURES_SOURCE, planner_feature_episodes, target_fingerprint

    cache = work / "head_features.pt"
    # the episode limit is part of the key: a cache of fewer episodes must not stand in for a larger recipe
    key = {"data": data_id, "target": target_fingerprint(work / "target_final" / "model.safetensors"),
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
                         meta={"data": {"source": PLAN_FEATURES_SOURCE, **data_id, "target": key["target"]}},
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
