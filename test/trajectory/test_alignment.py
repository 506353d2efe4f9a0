"""Aligner: chunks checked against the config and laid on the output grid, joined to the active trajectory."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.trajectory.alignment import Aligner, Chunk, ChunkError
from plan_stack.trajectory.core import Trajectory

NAMES = ("j0", "j1", "j2", "grip")
DT = 0.02
STILL = (np.zeros(4), np.zeros(4), np.zeros(4))


def _ref(H=20):
    r = np.zeros((H, 4))
    r[:, 0] = np.linspace(0, 0.1, H)
    return r


def _active(t0_s, n=40):
    q = np.zeros((n, 4))
    q[:, 1] = np.linspace(0.0, 0.4, n)
    v = np.zeros((n, 4))
    v[:, 1] = 0.4 / ((n - 1) * DT)
    return Trajectory.on_grid(t0_s, DT, NAMES, q, v, np.zeros((n, 4)))


def test_flat_layout_and_shape_errors():
    c = Chunk.from_flat(1.0, NAMES, DT, 2, list(range(8)))
    assert c.positions.shape == (2, 4) and c.positions[1, 0] == 4
    with pytest.raises(ChunkError, match="^shape"):
        Chunk.from_flat(1.0, NAMES, DT, 3, list(range(8)))
    with pytest.raises(ChunkError, match="^joint_names"):
        Chunk.from_flat(1.0, (), DT, 0, [])


def test_reordered_joint_names_come_back_in_config_order(stitcher_config):
    perm = [3, 1, 0, 2]
    ref = _ref() + np.arange(4)
    R, clamped = Aligner(stitcher_config()).validate(Chunk(0.0, tuple(NAMES[i] for i in perm), DT, ref[:, perm]), 0.0)
    np.testing.assert_array_equal(R, ref)
    assert clamped == 0


def test_horizon_bounds_are_configurable(stitcher_config):
    al = Aligner(stitcher_config(min_horizon=10, max_horizon=12))
    for H, ok in ((9, False), (10, True), (12, True), (13, False)):
        if ok:
            assert al.validate(Chunk(0.0, NAMES, DT, _ref(H)), 0.0)[0].shape == (H, 4)
        else:
            with pytest.raises(ChunkError, match="^horizon"):
                al.validate(Chunk(0.0, NAMES, DT, _ref(H)), 0.0)


def test_a_late_chunk_starts_at_the_first_grid_time_after_now_plus_the_latency(stitcher_config):
    al = Aligner(stitcher_config(stitch_len=1, command_latency_s=0.03))
    chunk = Chunk(0.0, NAMES, DT, _ref(30))
    a = al.align(chunk, chunk.positions, 0.101, STILL, None)
    assert a.t_start == pytest.approx(0.14) and a.trimmed == 7  # ceil((0.101 + 0.03) / 0.02) samples passed
    np.testing.assert_array_equal(a.reference, chunk.positions[7:])  # the grids coincide: copied, not resampled
    assert a.bridge_len == 1 and a.lead is None
    np.testing.assert_array_equal(a.x_end, np.array(STILL))  # the measured state starts it


def test_without_an_active_trajectory_a_measured_state_is_needed(stitcher_config):
    chunk = Chunk(0.0, NAMES, DT, _ref())
    with pytest.raises(ChunkError, match="^no_state"):
        Aligner(stitcher_config()).align(chunk, chunk.positions, 0.0, None, None)


def test_the_bridge_samples_are_the_active_trajectorys_on_its_grid(stitcher_config):
    act = _active(-0.1)
    chunk = Chunk(0.0, NAMES, DT, _ref(30))
    a = Aligner(stitcher_config(stitch_len=3)).align(chunk, chunk.positions, 0.011, None, act)
    assert a.t_start == pytest.approx(0.02) and a.bridge_len == 3  # on the active trajectory's grid
    q, v, acc = act.sample(a.t_start + DT * np.arange(3))
    np.testing.assert_array_equal(a.bridge[0], q)
    np.testing.assert_array_equal(a.bridge[1], v)
    np.testing.assert_array_equal(a.x_end, np.array([q[-1], v[-1], acc[-1]]))
    np.testing.assert_array_equal(a.exec_state, np.array([q[0], v[0], acc[0]]))


def test_with_a_lead_the_active_samples_inside_it_come_first(stitcher_config):
    act = _active(-0.2)
    chunk = Chunk(0.0, NAMES, DT, _ref(30))
    a = Aligner(stitcher_config(stitch_len=2), lead_s=0.05).align(chunk, chunk.positions, 0.0, None, act)
    assert a.t_start == pytest.approx(0.0) and a.lead is not None and len(a.lead[0]) == 3  # ceil(0.05 / 0.02)
    q, _, _ = act.sample(a.t_start - DT * np.arange(3, 0, -1))
    np.testing.assert_array_equal(a.lead[0], q)
    np.testing.assert_array_equal(a.initial[0], act.sample(np.array([a.t_start - 0.06]))[0][0])


def test_a_chunk_on_another_grid_is_read_by_linear_interpolation(stitcher_config):
    ref = np.zeros((11, 4))
    ref[:, 0] = np.linspace(0.0, 0.2, 11)  # 0.2 rad over 0.4 s at dt 0.04
    chunk = Chunk(0.0, NAMES, 0.04, ref)
    a = Aligner(stitcher_config(stitch_len=1)).align(chunk, ref, 0.0, STILL, None)
    assert len(a.reference) == 21
    np.testing.assert_allclose(a.reference[:, 0], np.linspace(0.0, 0.2, 21), atol=1e-12)
