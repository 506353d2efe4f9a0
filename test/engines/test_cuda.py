"""On a GPU, the models plan, act and train on CUDA as they do on the CPU.

Skipped where torch sees no GPU (CI, the development machines); `scripts/gpu_check.sh` runs them on a lent
GPU machine, and docs/results.md ("On a GPU") holds what they found there. The CPU is the reference: float32
on CUDA must decode the same primitives and act within float round-off; bfloat16 must still give valid plans.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from plan_stack.actions.head import FlowHead, HeadConfig
from plan_stack.actions.policy import ChunkPolicy
from plan_stack.actions.rtc.runtime import Method, RtcRequest
from plan_stack.planning.model_dir import load_planner_model
from plan_stack.planning.runtime import FrameInput, PlannerRuntime, RuntimeConfig
from plan_stack.planning.tiny_models import CAMERAS, PREFIX, images, make_model_dir

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no GPU here: the CUDA paths run on a GPU machine (scripts/gpu_check.sh)")

#: float32 on CUDA against the CPU: the same ops, other kernels (TF32 is off in torch by default for matmuls)
FEATURE_TOL = 1e-3
CHUNK_TOL = 1e-3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("cuda") / "m", history_frames=2,
                          manifest={"primitive_kinds": ["robot_3d"], "waypoints": 2})


def _on(model, device: str):
    model.target.model.to(device)
    if model.drafter is not None:
        model.drafter.to(device)
    return model


def _plans(model, n=3):
    rt = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX))
    return [rt.plan(FrameInput(1.0 + 0.1 * i, CAMERAS, images(i))) for i in range(n)]


def test_planner_on_cuda_float32_plans_what_the_cpu_plans(model_dir):
    reference = _plans(load_planner_model(model_dir))
    got = _plans(_on(load_planner_model(model_dir), "cuda"))
    for a, b in zip(got, reference):
        assert a.valid and a.primitives == b.primitives
        np.testing.assert_allclose(a.features, b.features, atol=FEATURE_TOL)


def test_planner_in_bfloat16_on_cuda_gives_valid_plans(model_dir):
    model = _on(load_planner_model(model_dir, dtype=torch.bfloat16), "cuda")
    for plan in _plans(model):
        assert plan.valid and plan.primitives
        assert np.isfinite(np.asarray(plan.features, dtype=np.float64)).all()


@pytest.fixture(scope="module")
def head():
    torch.manual_seed(0)
    return FlowHead(HeadConfig(action_dim=3, state_dim=3, horizon=8, cond_width=6, width=16, layers=2, heads=2,
                               num_steps=4)).eval()


@pytest.mark.parametrize("method", [m.value for m in Method])
def test_chunk_policy_on_cuda_matches_the_cpu_for_every_rtc_method(head, method):
    cpu = ChunkPolicy(copy.deepcopy(head), method)
    cuda = ChunkPolicy(copy.deepcopy(head), method, device="cuda")  # the policy moves its head
    state, cond = np.array([0.1, -0.2, 0.3]), np.random.default_rng(0).normal(size=(4, 6))
    prefix = np.random.default_rng(1).normal(size=(8, 3)) * 0.1
    request = RtcRequest(t_query_s=0.0, prefix=prefix, prefix_len=3, region_end=6, delay_steps=3.0,
                         execution_steps=4, clamped=False, delta_steps=4.0)
    for req in (None, request):
        a = cpu.sample(state, cond, req, generator=torch.Generator().manual_seed(5)).positions
        b = cuda.sample(state, cond, req, generator=torch.Generator().manual_seed(5)).positions
        assert np.isfinite(b).all() and np.abs(a - b).max() < CHUNK_TOL, (method, req is not None)


def test_training_commands_run_on_cuda(tmp_path):
    from plan_stack.cli import main

    assert main(["train-drafter", "--tiny", "vl", "--out", str(tmp_path / "drafter"), "--steps", "3",
                 "--device", "cuda"]) == 0
    assert main(["train-action-head", "--synthetic", "6", "--out", str(tmp_path / "head"), "--steps", "20",
                 "--horizon", "8", "--width", "16", "--layers", "1", "--heads", "2", "--device", "cuda"]) == 0


def test_target_training_with_the_localisation_loss_runs_on_cuda(tmp_path):
    """`plan-stack train --device cuda`'s target stage: batches follow the model, the loss falls."""
    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.target_build import tiny_target
    from plan_stack.planning.training.target import TargetTrainConfig, TrainItem, train_target

    model = PlannerModel("unsaved", tiny_target("vl", layers=2, vision_patch=8, seed=5), None,
                         {"cameras": ["c"], "image_size": [32, 32]})
    model.target.model.to("cuda")
    tok, rng = model.target.tokenizer, np.random.default_rng(0)
    items = []
    for i in range(8):
        qx, qy = rng.integers(0, 2, size=2)
        img = np.zeros((32, 32, 3), np.uint8)
        img[16 * qy + 5:16 * qy + 11, 16 * qx + 5:16 * qx + 11] = 255
        resp = tok.encode(f"pick {i}. ", add_special_tokens=False) + [tok.eos_token_id]
        items.append(TrainItem([img], "pick up", resp, ((16 * qx + 8) / 32, (16 * qy + 8) / 32)))
    cfg = TargetTrainConfig(steps=12, batch_size=4, lr=3e-3, checkpoint_every=6, eval_every=0, augment=False,
                            locate_weight=10.0)
    res = train_target(model, items, cfg, tmp_path, log=lambda s: None)
    assert res["steps"] == 12 and np.mean(res["losses"][-3:]) < np.mean(res["losses"][:3])
    assert next(model.target.model.parameters()).device.type == "cuda"
