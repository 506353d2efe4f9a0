"""Offline chunked execution: the timeline (who executes which step) and the seam metrics."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.actions.data import Episode
from plan_stack.actions.errors import RtcError
from plan_stack.actions.offline import rollout, seam_metrics
from plan_stack.actions.policy import ChunkResult

H, S = 10, 4


def _episode(t_len=30):
    x = np.linspace(0.0, 1.0, t_len)[:, None] * np.array([[1.0, -2.0]])
    return Episode("ramp", 0.1, x, x, np.zeros((1, 3)))


class _Toy:
    """Expert's future from the observed step, plus a per-chunk offset (+c, -c, +c, ...): a policy
    that switches modes between chunks. With `lock`, the RTC prefix is copied as prefix conditioning would."""

    def __init__(self, ep, c, lock=False):
        self.ep, self.c, self.lock, self.calls = ep, c, lock, 0

    def sample(self, state, cond, request=None, generator=None, noise=None):
        q = int(np.argmin(np.abs(self.ep.states[:, 0] - state[0])))
        idx = np.minimum(q + np.arange(H), len(self.ep.actions) - 1)
        out = self.ep.actions[idx] + (self.c if self.calls % 2 == 0 else -self.c)
        self.calls += 1
        n = 0
        if self.lock and request is not None and request.prefix is not None:
            n = request.prefix_len
            out[:n] = request.prefix[:n]
        return ChunkResult(out, n, 1.0)


def test_oracle_policy_tracks_the_expert_without_seams():
    ep = _episode()
    ro = rollout(_Toy(ep, 0.0), ep, H, delay_steps=2, execution_steps=S)
    m = seam_metrics(ro, ep.actions, ep.dt_s)
    assert ro.seams == (6, 10, 14, 18, 22, 26, 30)[:-1]  # queries at 4, 8, ...; the takeover d = 2 steps later
    assert m["tracking_rmse"] < 1e-12 and m["seam_jump_pos"] < 1e-12 and m["seam_jump_vel"] < 1e-9


def test_mode_switching_policy_jumps_at_every_seam_and_a_locked_prefix_delays_the_takeover():
    ep = _episode()
    ro = rollout(_Toy(ep, 0.5), ep, H, delay_steps=2, execution_steps=S)
    # chunk 0 (+0.5) runs steps 0..5; chunk 1 (-0.5) takes over at step 6
    np.testing.assert_allclose(ro.executed[5] - ep.actions[5], 0.5)
    np.testing.assert_allclose(ro.executed[6] - ep.actions[6], -0.5)
    assert ro.seam_pos[0] == pytest.approx(np.sqrt(2.0))  # |-0.5 - 0.5| on each of 2 joints
    m = seam_metrics(ro, ep.actions, ep.dt_s)
    assert m["seam_jump_vel"] == pytest.approx(np.sqrt(2.0) / 0.1)
    locked = rollout(_Toy(ep, 0.5, lock=True), ep, H, delay_steps=2, execution_steps=S)
    np.testing.assert_allclose(locked.executed[4:6], ro.executed[4:6])  # prefix = what already ran
    with pytest.raises(RtcError, match="d <= s"):
        rollout(_Toy(ep, 0.0), ep, H, delay_steps=5, execution_steps=S)


def test_closed_loop_observes_the_robot_and_executes_every_step_in_order():
    ep = _episode()
    robot = {"q": np.zeros(2), "log": []}

    def execute(k, cmd):
        robot["log"].append(k)
        robot["q"] = cmd.copy()  # a perfect position-tracking robot

    seen = []

    def observe(k):
        seen.append(k)
        return robot["q"] if k else ep.states[0]

    ro = rollout(_Toy(ep, 0.0), ep, H, delay_steps=1, execution_steps=S, observe=observe, execute=execute)
    assert robot["log"] == list(range(30)) and seen == list(range(0, 30, S))
    assert np.all(np.isfinite(ro.executed))


class _Recorder:
    """An executor that runs each chunk from its takeover step, offset by +10 so its output is recognisable."""

    def __init__(self):
        self.taken, self.current = [], None

    def take(self, query_step, start_step, chunk):
        self.taken.append((query_step, start_step))
        self.pending = (query_step, start_step, chunk)

    def command(self, step):
        q, start, chunk = self.pending
        if step >= start:
            self.current = (q, chunk)
        q, chunk = self.current
        return chunk[step - q] + 10.0


def test_executor_receives_each_chunk_with_its_takeover_and_decides_the_commands():
    ep = _episode()
    rec = _Recorder()
    ro = rollout(_Toy(ep, 0.0), ep, H, delay_steps=2, execution_steps=S, executor=rec)
    assert rec.taken == [(0, 0)] + [(q, q + 2) for q in range(4, 30, 4)]
    np.testing.assert_allclose(ro.executed, ep.actions + 10.0)  # the executor's output is what ran
    assert ro.seams == (6, 10, 14, 18, 22, 26)  # seams still describe the raw chunks
