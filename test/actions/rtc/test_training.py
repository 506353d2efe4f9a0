"""Training-time RTC: clean-prefix inputs, masked loss, simulated delays."""
from __future__ import annotations

import pytest
import torch

from plan_stack.actions.errors import RtcError
from plan_stack.actions.rtc.training import masked_flow_loss, sample_delays, training_time_inputs

# --- training-time RTC ---------------------------------------------------------------------------


def test_training_time_inputs_give_clean_prefix_and_mask_its_loss():
    gen = torch.Generator().manual_seed(0)
    a, eps = torch.randn(3, 6, 2, generator=gen), torch.randn(3, 6, 2, generator=gen)
    t = torch.tensor([0.9, 0.5, 0.2])
    x_t, times, mask = training_time_inputs(a, eps, t, torch.tensor([0, 2, 5]))
    assert torch.equal(times[1], torch.tensor([0, 0, 0.5, 0.5, 0.5, 0.5]))
    assert torch.equal(x_t[1, :2], a[1, :2]) and torch.equal(x_t[2, :5], a[2, :5])
    torch.testing.assert_close(x_t[0], 0.1 * a[0] + 0.9 * eps[0])
    assert mask.tolist() == [[1] * 6, [0, 0, 1, 1, 1, 1], [0] * 5 + [1]]
    # loss ignores the masked positions entirely
    v = eps - a
    v_bad = v.clone()
    v_bad[1, :2] += 100.0
    assert masked_flow_loss(v_bad, a, eps, mask).item() == 0.0
    assert masked_flow_loss(v_bad, a, eps).item() > 0.0


def test_sample_delays_respects_the_exclusive_bound_and_temperature():
    gen = torch.Generator().manual_seed(0)
    d = sample_delays(4000, 5, gen)
    assert d.min() == 0 and d.max() == 4
    e = sample_delays(4000, 5, gen, "exp", temperature=1.0)
    assert (e == 0).float().mean() > 0.5 > (e == 4).float().mean()
    with pytest.raises(RtcError, match="max_delay"):
        sample_delays(1, 0)
    with pytest.raises(RtcError, match="distribution"):
        sample_delays(1, 3, distribution="beta")
