"""The Euler loop: a point-mass velocity field is recovered exactly."""
from __future__ import annotations

import pytest
import torch

from plan_stack.actions.errors import RtcError
from plan_stack.actions.rtc.guides import Unguided
from plan_stack.actions.rtc.sampling import integrate


def test_integrate_recovers_a_point_mass():
    target = torch.randn(1, 8, 3, generator=torch.Generator().manual_seed(1))
    fn = lambda x, t: (x - target) / t[..., None]  # noqa: E731
    out = integrate(fn, torch.randn(1, 8, 3), 10, Unguided())
    torch.testing.assert_close(out, target)
    with pytest.raises(RtcError, match="num_steps"):
        integrate(fn, torch.zeros(1, 8, 3), 0)
