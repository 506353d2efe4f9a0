"""Plan features for the action heads are exactly what the decoder publishes for the same plan."""
from __future__ import annotations

import os

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_teacher_forced_features_equal_the_decoders_plan_features():
    from plan_stack.actions.train_features import keyframe_features
    from plan_stack.data.episodes import Keyframe
    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.samples import make_sample
    from plan_stack.planning.target_build import tiny_target
    from plan_stack.robots import profile

    target = tiny_target("vl", layers=2, seed=4)
    model = PlannerModel("unsaved", target, None, {
        "cameras": ["cam_high"], "image_size": [32, 32], "budget": 200,
        "coordinate_ranges": {"robot": {"x": [-0.5, 0.5], "y": [-0.2, 0.3], "z": [0.3, 0.9]}}})
    pts = np.stack([np.linspace(-0.2, 0.2, 10), np.full(10, 0.1), np.linspace(0.5, 0.7, 10)], 1)
    rng = np.random.default_rng(0)
    # different images and sub-task texts (so different lengths), three keyframes in batches of two: each
    # keyframe's features must come from its own image and rows, the padded batch's and the last lone one's
    kfs = [Keyframe("e", 0, i, 0.5 * i, "do it", subtask, [(rng.random((32, 32, 3)) * 255).astype(np.uint8)],
                    [pts + 0.01 * i, pts + 0.02], [np.full((10, 2), np.nan)] * 2, {}, (32, 32))
           for i, subtask in enumerate(["reach", "reach the red cube now", "lift"])]
    spec = profile("aloha").learning
    batched = keyframe_features(model, kfs, spec, batch=2)
    assert len(batched) == 3
    for kf, feats in zip(kfs, batched):
        sample = make_sample(model, kf, spec)
        assert feats.shape == (sample.spans[0][1].block_size, target.hidden_size)
        # the decoder given the same response as supplied output publishes the same features
        res = model.decoder().generate(sample.prompt, decoder="ar", response_prefix=sample.response, budget=200)
        assert len(res.primitives) == 2
        torch.testing.assert_close(res.features, torch.from_numpy(feats), rtol=1e-4, atol=1e-4)


def test_a_shipped_head_names_the_target_whose_plan_features_it_was_trained_on():
    """What `bench/rtc.py` builds a head's conditioning from: the source tag and the target's fingerprint
    in the checkpoint's meta (as `recipes/heads.py` writes them)."""
    from plan_stack.actions.head import load_checkpoint
    from plan_stack.actions.train_features import plan_features_target, target_fingerprint
    from plan_stack.paths import find_data

    for robot in ("aloha", "franka"):
        for variant in ("plain", "rtc"):
            _, meta = load_checkpoint(str(find_data("models", f"{robot}/action_head/{variant}")))
            assert plan_features_target(meta) == target_fingerprint(find_data("models", robot))
    assert target_fingerprint(find_data("models", "aloha")) != target_fingerprint(find_data("models", "franka"))
    assert plan_features_target({"rtc_max_delay": 0}) is None  # `train-action-head`: ground-truth plan tokens
    assert plan_features_target({"data": {"source": "demos"}}) is None
