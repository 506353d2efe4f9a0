"""Scripted expert: seeded transfer-cube episodes succeed on the joint-controlled rig (no rendering)."""
from __future__ import annotations

import numpy as np

from plan_stack.embodiments.aloha.expert import plan_episode, replay
from plan_stack.embodiments.aloha.sim import AlohaSim


def test_transfer_cube_expert_succeeds_in_at_least_9_of_10_seeds():
    sim = AlohaSim("transfer_cube")
    rewards = [replay(plan_episode("transfer_cube", seed), sim) for seed in range(10)]
    assert sum(r == 4 for r in rewards) >= 9, rewards


def test_episode_is_deterministic_and_well_formed():
    a, b = plan_episode("transfer_cube", 3), plan_episode("transfer_cube", 3)
    assert np.array_equal(a.commands, b.commands)
    assert a.commands.shape == (400, 14) and np.all(np.isfinite(a.commands))
    assert np.all((a.commands[:, [6, 13]] >= 0) & (a.commands[:, [6, 13]] <= 1))
    assert a.subtasks[0].start_s == 0.0 and np.isclose(a.subtasks[-1].end_s, 8.0)
    assert all(s.end_s == n.start_s for s, n in zip(a.subtasks, a.subtasks[1:]))
    # No lurch at the start: the first command is the start pose.
    assert np.max(np.abs(np.diff(a.commands[:5, :6], axis=0))) < 0.05


def test_expert_commands_and_replayed_joints_stay_within_the_urdf_velocity_limits():
    """Seeds 1 and 3 pass the wrist near-singularity: undamped, their roll commands spun at 7.6 and 7.2 rad/s."""
    from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits
    from plan_stack.embodiments.aloha.model import GRIPPER_INDICES

    arm = [j for j in range(14) if j not in GRIPPER_INDICES]
    v_max = np.asarray(load_limits(AlohaBridgeConfig()).v_max)[arm]  # the URDF's, velocity_scale 1.0
    sim = AlohaSim("transfer_cube")
    for seed in (1, 3):
        episode = plan_episode("transfer_cube", seed)
        commanded = np.abs(np.diff(episode.commands[:, arm], axis=0)) / episode.dt_s
        assert np.all(commanded <= v_max), (seed, commanded.max(axis=0))
        measured: list[np.ndarray] = []
        reward = replay(episode, sim, on_step=lambda k, s: measured.append(s.joint_velocities()[arm]))
        assert reward == 4, seed
        assert np.all(np.abs(np.array(measured)) <= v_max), (seed, np.abs(np.array(measured)).max(axis=0))


def test_insertion_expert_succeeds_in_at_least_4_of_5_seeds():
    sim = AlohaSim("insertion")
    rewards = [replay(plan_episode("insertion", seed), sim) for seed in range(5)]
    assert sum(r == 4 for r in rewards) >= 4, rewards


def test_recovery_pulses_push_only_the_chosen_joints_inside_their_windows_and_die_out():
    import pytest

    from plan_stack.embodiments.aloha.expert import (
        PUSH_DECAY_S,
        PUSH_RISE_S,
        PUSHED_JOINTS,
        RECOVERY_WINDOWS,
        recovery_pulses,
    )

    ep = plan_episode("transfer_cube", 5)
    pulses = recovery_pulses(ep, 0.1)
    again = recovery_pulses(ep, 0.1)
    assert [p.onset_s for p in pulses] == [p.onset_s for p in again]  # seeded by the episode
    assert all(np.array_equal(a.offsets, b.offsets) for a, b in zip(pulses, again))
    assert [p.onset_s for p in pulses] == sorted(p.onset_s for p in pulses)
    windows = RECOVERY_WINDOWS["transfer_cube"]
    assert len(pulses) == sum(n for _, _, n in windows.values())
    for p in pulses:
        lo, hi, _ = windows[p.arm]
        assert lo <= p.onset_s <= hi
        a = 0 if p.arm == "left" else 1
        moved = np.flatnonzero(np.abs(p.offsets).max(axis=0) > 0)
        assert set(moved) <= {7 * a + j for j in PUSHED_JOINTS} and len(moved) > 0
        before = ep.times_s <= p.onset_s
        after = ep.times_s >= p.onset_s + PUSH_RISE_S + PUSH_DECAY_S[1]
        assert np.all(p.offsets[before] == 0) and np.allclose(p.offsets[after], 0)
        assert np.abs(p.offsets).max() < 0.6  # pushes of a few cm, not flung arms
    assert recovery_pulses(plan_episode("transfer_cube", 6), 0.1)[0].onset_s != pulses[0].onset_s
    with pytest.raises(ValueError, match="scale"):
        recovery_pulses(ep, 0.0)
    with pytest.raises(ValueError, match="insertion"):
        recovery_pulses(plan_episode("insertion", 0), 0.1)
