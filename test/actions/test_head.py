"""Flow-matching head: shapes, per-position time, normaliser, checkpoints, traced fast path."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from plan_stack.actions.errors import ActionsError, CheckpointError
from plan_stack.actions.head import FlowHead, HeadConfig, Normaliser, load_checkpoint, save_checkpoint
from plan_stack.actions.policy import ChunkPolicy
from plan_stack.actions.rtc.runtime import Method, RtcConfig, RtcRuntime
from plan_stack.config import ConfigError

CFG = HeadConfig(action_dim=3, state_dim=3, horizon=8, cond_width=5, width=16, layers=2, heads=2, num_steps=4)


def _head(seed=0) -> FlowHead:
    torch.manual_seed(seed)
    return FlowHead(CFG).eval()


def test_velocity_shape_and_dependence_on_each_input():
    head = _head()
    gen = torch.Generator().manual_seed(0)
    x, state, cond = torch.randn(2, 8, 3, generator=gen), torch.randn(2, 3, generator=gen), torch.randn(2, 4, 5)
    t = torch.full((2, 8), 0.7)
    with torch.no_grad():
        v = head(x, t, state, cond)
        assert v.shape == (2, 8, 3)
        t2 = t.clone()
        t2[:, :2] = 0.0  # clean-time prefix changes the prediction (training-time RTC needs this)
        assert not torch.allclose(head(x, t2, state, cond), v)
        assert not torch.allclose(head(x, t, state + 1, cond), v)
        assert not torch.allclose(head(x, t, state, cond + 1), v)
        # masked conditioning tokens are ignored
        mask = torch.tensor([[True, True, False, False]] * 2)
        cond2 = cond.clone()
        cond2[:, 2:] = 99.0
        torch.testing.assert_close(head(x, t, state, cond, mask), head(x, t, state, cond2, mask))


def test_head_config_validation():
    with pytest.raises(ConfigError, match="heads"):
        HeadConfig(width=30, heads=4)
    with pytest.raises(ConfigError, match="horizon"):
        HeadConfig(horizon=1)


def test_normaliser_round_trip_and_std_floor():
    n = Normaliser(2, 1, 1)
    acts = np.array([[0.0, 5.0], [2.0, 5.0]])
    n.fit(acts, np.ones((2, 1)), np.zeros((2, 1)))
    assert n.action_std[1].item() == pytest.approx(1e-3)  # constant channel: floored, not zero
    x = torch.tensor([[1.0, 5.0]])
    torch.testing.assert_close(n.norm("action", x), torch.tensor([[0.0, 0.0]]))
    torch.testing.assert_close(n.denorm("action", n.norm("action", x)), x)


def test_checkpoint_round_trip_keeps_weights_normaliser_and_meta(tmp_path):
    head = _head()
    head.normaliser.action_mean.fill_(0.25)
    save_checkpoint(str(tmp_path), head, {"rtc_max_delay": 6})
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    loaded, meta = load_checkpoint(str(tmp_path), num_steps=7)
    assert meta == {"rtc_max_delay": 6} and loaded.cfg.num_steps == 7 and loaded.cfg.width == CFG.width
    for k, v in head.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k


def test_checkpoint_errors_name_the_problem(tmp_path):
    with pytest.raises(CheckpointError, match="needs config.json"):
        load_checkpoint(str(tmp_path))
    save_checkpoint(str(tmp_path), _head())
    doc = json.loads((tmp_path / "config.json").read_text())
    doc["head"]["width"] = 32  # weights no longer fit
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(str(tmp_path))
    doc["head"]["heads"] = 3
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="invalid head config"):
        load_checkpoint(str(tmp_path))


@pytest.mark.parametrize("method", ["naive", "training_time", "test_time_direct"])
def test_traced_fast_path_equals_eager(method):
    head = _head(1)
    rt = RtcRuntime(RtcConfig(method=method, execution_horizon_steps=4, initial_delay_steps=2), 8, 0.02, 5)
    rt.commit(rt.request(0.0), np.random.default_rng(0).normal(size=(8, 3)), 0.0)
    req = rt.request(0.08)
    state, cond = np.zeros(3), np.ones((2, 5))
    noise = torch.randn(1, 8, 3, generator=torch.Generator().manual_seed(0))
    eager = ChunkPolicy(head, method).sample(state, cond, req, noise=noise)
    fast = ChunkPolicy(head, method, fast=True).sample(state, cond, req, noise=noise)
    np.testing.assert_allclose(fast.positions, eager.positions, atol=1e-5)
    assert fast.prefix_len == eager.prefix_len == (0 if method == "naive" else 2)
    # the same trace serves another number of conditioning tokens
    pol = ChunkPolicy(head, method, fast=True)
    pol.warm_up(tokens=1)
    cond5 = np.random.default_rng(1).normal(size=(5, 5))
    np.testing.assert_allclose(pol.sample(state, cond5, req, noise=noise).positions,
                               ChunkPolicy(head, method).sample(state, cond5, req, noise=noise).positions, atol=1e-5)


def test_policy_rejects_bad_state_and_conditioning():
    pol = ChunkPolicy(_head(), Method.NAIVE)
    with pytest.raises(ActionsError, match="state"):
        pol.sample(np.zeros(4), np.zeros((1, 5)))
    with pytest.raises(ActionsError, match="cond"):
        pol.sample(np.zeros(3), np.zeros((1, 4)))
    with pytest.raises(ActionsError, match="non-finite"):
        pol.sample(np.array([0.0, np.nan, 0.0]), np.zeros((1, 5)))
