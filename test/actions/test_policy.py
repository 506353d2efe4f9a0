"""RTC on a (briefly) trained head, in robot units, through the same path the chunker uses."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.actions.data import synthetic_episodes
from plan_stack.actions.head import HeadConfig, load_checkpoint
from plan_stack.actions.policy import ChunkPolicy
from plan_stack.actions.rtc.runtime import RtcConfig, RtcRuntime
from plan_stack.actions.train import HeadTrainConfig, train

H, D, S, DELAY = 16, 3, 6, 4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    eps = synthetic_episodes(10, length=50, action_dim=D, cond_width=5, seed=3)
    cfg = HeadConfig(action_dim=D, state_dim=D, horizon=H, cond_width=5, width=32, layers=2, heads=2, num_steps=6)
    out = str(tmp_path_factory.mktemp("head"))
    train(cfg, HeadTrainConfig(steps=80, batch_size=32, lr=3e-3, warmup_steps=10, eval_every=1000,
                               checkpoint_every=1000, log_every=1000, rtc_max_delay=DELAY + 2),
          eps[:8], [], out, log=lambda s: None)
    head, _ = load_checkpoint(out)
    return head, eps[8:]


def _request(head, ep, method, seed):
    """The previous chunk sampled S steps ago, aligned to now with a measured delay of DELAY steps."""
    rt = RtcRuntime(RtcConfig(method=method, execution_horizon_steps=S, initial_delay_steps=DELAY,
                              cold_start_samples=0), H, ep.dt_s, max_trained_delay=DELAY + 2)
    k0 = 10
    prev = ChunkPolicy(head).sample(ep.states[k0], ep.cond[0], generator=torch.Generator().manual_seed(seed))
    req0 = rt.request(k0 * ep.dt_s)
    rt.commit(req0, prev.positions, inference_s=DELAY * ep.dt_s)
    return rt.request((k0 + S) * ep.dt_s), ep.states[k0 + S]


def _prefix_err(chunk, req):
    return float(np.sqrt(np.mean((chunk[: req.prefix_len] - req.prefix[: req.prefix_len]) ** 2)))


@pytest.mark.parametrize("method", ["training_time", "hard_prefix"])
def test_prefix_conditioning_preserves_the_prefix_exactly(trained, method):
    head, held_out = trained
    req, state = _request(head, held_out[0], method, seed=0)
    assert req.prefix_len == DELAY
    out = ChunkPolicy(head, method).sample(state, held_out[0].cond[0], req, generator=torch.Generator().manual_seed(1))
    assert out.prefix_len == DELAY
    assert np.array_equal(out.positions[:DELAY], req.prefix[:DELAY])


@pytest.mark.parametrize("method", ["test_time_vjp", "test_time_direct"])
def test_guidance_with_beta_zero_equals_unguided_on_the_trained_head(trained, method):
    head, held_out = trained
    req, state = _request(head, held_out[0], method, seed=0)
    noise = torch.randn(1, H, D, generator=torch.Generator().manual_seed(5))
    plain = ChunkPolicy(head, "naive").sample(state, held_out[0].cond[0], req, noise=noise)
    zero = ChunkPolicy(head, method, max_guidance_weight=0.0).sample(state, held_out[0].cond[0], req, noise=noise)
    np.testing.assert_allclose(zero.positions, plain.positions, rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["test_time_vjp", "test_time_direct"])
def test_guidance_reduces_the_prefix_error_on_the_trained_head(trained, method):
    head, held_out = trained
    plain_err, guided_err = [], []
    for i, ep in enumerate(held_out):
        for seed in range(3):
            req, state = _request(head, ep, method, seed=100 * i + seed)
            noise = torch.randn(1, H, D, generator=torch.Generator().manual_seed(7 + seed))
            plain = ChunkPolicy(head, "naive").sample(state, ep.cond[0], req, noise=noise)
            guided = ChunkPolicy(head, method, max_guidance_weight=5.0).sample(state, ep.cond[0], req, noise=noise)
            plain_err.append(_prefix_err(plain.positions, req))
            guided_err.append(_prefix_err(guided.positions, req))
    assert np.mean(guided_err) < 0.5 * np.mean(plain_err), (np.mean(guided_err), np.mean(plain_err))


def test_noise_scale_zero_gives_one_deterministic_chunk_and_bad_scales_are_refused(trained):
    head, (ep, *_) = trained
    rand = [ChunkPolicy(head).sample(ep.states[5], ep.cond[0], generator=torch.Generator().manual_seed(s)).positions
            for s in (1, 2)]
    det = [ChunkPolicy(head, noise_scale=0.0).sample(ep.states[5], ep.cond[0],
                                                     generator=torch.Generator().manual_seed(s)).positions
           for s in (1, 2)]
    assert not np.allclose(rand[0], rand[1])
    np.testing.assert_array_equal(det[0], det[1])
    assert np.all(np.isfinite(det[0])) and det[0].shape == (H, D)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(Exception, match="noise_scale"):
            ChunkPolicy(head, noise_scale=bad)
