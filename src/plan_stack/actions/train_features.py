"""Action-head episodes conditioned on the planner target's plan features.

At run time the chunker receives `PlanFeatures`: the frozen target's last
hidden states over the primitive tokens of the plan it just decoded. Here
every annotated keyframe of a recorded episode is run through the same
target with its prompt (`PlannerModel.encode`) and its annotated response in
one teacher-forced pass, and the hidden states over the primitive positions
(start token to end token of every block, in response order: what
`DecodeResult.features` holds) become the conditioning tokens [K, hidden]
in force from that keyframe on. Actions and states come from the bag, as for
the ground-truth-token episodes (`actions.demos.load_episode`).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from plan_stack.actions.data import Episode
from plan_stack.actions.errors import DatasetError

__all__ = ["PLAN_FEATURES_SOURCE", "keyframe_features", "planner_feature_episodes", "plan_features_target",
           "target_fingerprint"]

#: `meta.data.source` of a head checkpoint conditioned on planner plan features; `meta.data.target` is then
#: the SHA-256 of the target's weights that made them (`target_fingerprint`, written by `recipes/heads.py`)
PLAN_FEATURES_SOURCE = "planner plan features"


def plan_features_target(meta: dict[str, Any]) -> str | None:
    """The target fingerprint whose plan features a head was trained on (None: it was not trained on plan
    features, e.g. `train-action-head` on ground-truth plan tokens); `meta` as `load_checkpoint` returns it."""
    data = meta.get("data", {})
    if data.get("source") != PLAN_FEATURES_SOURCE:
        return None
    return str(data.get("target", ""))


def target_fingerprint(weights: str | os.PathLike) -> str:
    """SHA-256 of a target's `model.safetensors` (a file, or a model directory holding target/)."""
    import hashlib

    path = os.fspath(weights)
    if os.path.isdir(path):
        path = os.path.join(path, "target", "model.safetensors")
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@torch.no_grad()
def keyframe_features(model: Any, kfs: Sequence[Any], spec: Any, batch: int = 16) -> list[np.ndarray]:
    """[tokens, hidden] target features over the primitive positions of each keyframe's annotated response.

    `batch` keyframes share one padded target pass (`TargetAdapter.teacher_forced`): the same features as
    one pass each.
    """
    from plan_stack.planning.samples import make_sample

    out: list[np.ndarray] = []
    step = max(batch, 1)
    for lo in range(0, len(kfs), step):
        samples = [make_sample(model, kf, spec) for kf in kfs[lo:lo + step]]
        for s, passed in zip(samples, model.target.teacher_forced([s.teacher_forced_prompt() for s in samples])):
            plen = s.prompt.input_ids.numel()
            rows = [plen + start + j for start, layout in s.spans for j in range(layout.block_size)]
            out.append(passed.last_hidden[rows].float().numpy())
    return out


def planner_feature_episodes(model: Any, demo_dir: str, spec: Any, progress: bool = False,
                             limit: int | None = None) -> list[Episode]:
    """Every successful recorded episode in `demo_dir` with plan-feature conditioning."""
    from plan_stack.actions.demos import load_episode
    from plan_stack.data.episodes import annotation_files, load_episode_keyframes

    files = annotation_files(demo_dir)[:limit]
    it: Sequence[str] = files
    if progress:
        from tqdm import tqdm

        it = tqdm(files, desc="plan features", unit="episode", mininterval=5.0)
    out = []
    for f in it:
        kfs = load_episode_keyframes(f, spec, model.image_size)
        if not kfs:
            continue
        base = load_episode(f)
        feats = keyframe_features(model, kfs, spec)
        n_tok = max(x.shape[0] for x in feats)
        cond = np.zeros((len(feats), n_tok, feats[0].shape[1]))
        for i, x in enumerate(feats):  # a keyframe with fewer primitive tokens repeats its last one
            cond[i, :len(x)] = x
            cond[i, len(x):] = x[-1]
        if cond.shape[0] != base.cond.shape[0]:
            raise DatasetError(f"{f}: {cond.shape[0]} keyframes with features, {base.cond.shape[0]} in the episode")
        out.append(Episode(os.path.splitext(os.path.basename(f))[0], base.dt_s, base.actions, base.states, cond,
                           base.cond_index))
    if not out:
        raise DatasetError(f"{demo_dir}: no successful episode")
    return out
