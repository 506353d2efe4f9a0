"""RTC guides: schedules, guidance weight, prefix conditioning and guidance (toy velocity functions)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.actions.rtc.guides import Guidance, PrefixConditioning, Unguided, guidance_weight, prefix_weights
from plan_stack.actions.rtc.sampling import integrate

# --- schedules and guidance weight ---------------------------------------------------------------


def test_schedules_match_their_formulas():
    h, d, e = 12, 3, 9
    i = np.arange(h)
    lin = np.clip((d - 1 - i) / (e - d + 1) + 1, 0, 1) * (i < e)
    np.testing.assert_allclose(prefix_weights(d, e, h, "linear"), lin)
    np.testing.assert_allclose(prefix_weights(d, e, h, "exp"), lin * (np.exp(lin) - 1) / (np.e - 1))
    np.testing.assert_allclose(prefix_weights(d, e, h, "ones"), (i < e).astype(float))
    np.testing.assert_allclose(prefix_weights(d, e, h, "zeros"), (i < d).astype(float))
    w = prefix_weights(d, e, h, "linear")
    assert np.all(w[:d] == 1.0) and w[e] == 0.0 and np.all(np.diff(w) <= 0)
    with pytest.raises(ValueError):
        prefix_weights(d, e, h, "cosine")


def test_guidance_weight_formula_in_data_time_and_beta_clip():
    for t in (0.2, 0.5, 0.8):
        tau = 1 - t
        expect = (1 - tau) / tau * (tau**2 + (1 - tau) ** 2) / (1 - tau) ** 2
        assert guidance_weight(t, 100.0) == pytest.approx(expect)
        assert guidance_weight(t, 1.0) == pytest.approx(min(expect, 1.0))
    assert guidance_weight(1.0, 5.0) == 5.0 and guidance_weight(0.0, 5.0) == 5.0
    assert guidance_weight(0.5, 0.0) == 0.0



# --- guides on the Euler loop (toy velocity fields) -------------------------------------------------


def _toy_fn(target: torch.Tensor):
    """A denoiser whose clean estimate depends on x (a broad data distribution around `target`),
    nonlinearly, so the VJP differs from the direct (identity-Jacobian) approximation."""

    def fn(x, t):
        a_hat = target + 0.5 * x + 0.2 * torch.tanh(x)
        return (x - a_hat) / t.clamp(min=1e-3)[..., None]

    return fn


def test_prefix_conditioning_preserves_the_prefix_exactly_and_sees_clean_time():
    gen = torch.Generator().manual_seed(2)
    target, prefix = torch.randn(1, 8, 3, generator=gen), torch.randn(1, 8, 3, generator=gen)
    seen = []

    def fn(x, t):
        seen.append(t.clone())
        return _toy_fn(target)(x, t)

    out = integrate(fn, torch.randn(1, 8, 3, generator=gen), 5, PrefixConditioning(prefix, 3))
    assert torch.equal(out[:, :3], prefix[:, :3])
    assert all(torch.all(t[:, :3] == 0) and torch.all(t[:, 3:] > 0) for t in seen)


@pytest.mark.parametrize("vjp", [True, False])
def test_guidance_with_beta_zero_equals_unguided(vjp):
    gen = torch.Generator().manual_seed(3)
    target, prefix, noise = (torch.randn(1, 8, 3, generator=gen) for _ in range(3))
    w = torch.from_numpy(prefix_weights(3, 6, 8, "exp"))
    plain = integrate(_toy_fn(target), noise, 10, Unguided())
    guided = integrate(_toy_fn(target), noise, 10, Guidance(prefix, w, beta=0.0, vjp=vjp))
    torch.testing.assert_close(guided, plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("vjp", [True, False])
def test_guidance_pulls_the_prefix_toward_the_previous_chunk(vjp):
    gen = torch.Generator().manual_seed(4)
    target, prefix, noise = (torch.randn(1, 8, 3, generator=gen) for _ in range(3))
    w = torch.from_numpy(prefix_weights(3, 6, 8, "linear"))
    plain = integrate(_toy_fn(target), noise, 10, Unguided())
    guided = integrate(_toy_fn(target), noise, 10, Guidance(prefix, w, beta=5.0, vjp=vjp))
    err = lambda x: (x[:, :3] - prefix[:, :3]).pow(2).mean().item()  # noqa: E731
    assert err(guided) < 0.5 * err(plain)
    torch.testing.assert_close(guided[:, 6:], plain[:, 6:], atol=0.2, rtol=0)  # zero-weight tail barely moves
