"""Replay metrics on hand-made cases with known answers."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.eval import replay_metrics as M


def test_summary_statistics_and_empty_sets():
    s = M.summarize(range(1, 101))
    assert s["count"] == 100 and s["mean"] == 50.5 and s["min"] == 1 and s["max"] == 100
    assert s["p50"] == pytest.approx(50.5) and s["p95"] == pytest.approx(95.05) and s["p99"] == pytest.approx(99.01)
    assert M.summarize([math.nan, 2.0])["count"] == 1
    assert M.summarize([]) == {"count": 0, "mean": None, "min": None, "max": None, "p50": None, "p95": None,
                               "p99": None}


def test_curve_distances():
    a = np.array([[0, 0], [1, 0], [2, 0]], float)
    assert M.discrete_frechet(a, a + [0, 1]) == pytest.approx(1.0)
    assert M.hausdorff(a, a + [0, 1]) == pytest.approx(1.0)
    # Fréchet respects order, Hausdorff does not
    assert M.discrete_frechet(a, a[::-1]) == pytest.approx(2.0) and M.hausdorff(a, a[::-1]) == 0.0
    with_oof = np.array([[0, 0], [np.nan, np.nan], [2, 0]], float)
    assert M.hausdorff(with_oof, a) == pytest.approx(1.0)
    assert math.isnan(M.discrete_frechet(np.full((2, 2), np.nan), a))


def _line_chunk(t0, offset=0.0, dt=0.1, h=10):
    t = t0 + dt * np.arange(h)
    return M.Chunk(t0, dt, np.stack([t + offset, 2 * t], axis=1))


def test_chunk_seams_and_churn():
    smooth = [_line_chunk(0.0), _line_chunk(0.4), _line_chunk(0.8)]
    seams = M.chunk_seams(smooth)
    assert np.allclose(seams["seam_jump_pos"], 0) and np.allclose(seams["seam_jump_vel"], 0, atol=1e-9)
    assert np.allclose(M.chunk_churn(smooth), 0)
    jumpy = [_line_chunk(0.0), _line_chunk(0.4, offset=0.3)]
    assert M.chunk_seams(jumpy)["seam_jump_pos"] == [pytest.approx(0.3)]
    assert M.chunk_churn(jumpy) == [pytest.approx(0.15)]  # 0.3 on one of two joints
    assert M.chunk_seams([_line_chunk(0.0), _line_chunk(5.0)]) == {"seam_jump_pos": [], "seam_jump_vel": []}


def test_jerk_of_a_cubic_is_its_constant_third_derivative():
    dt = 0.01
    t = dt * np.arange(50)
    q = np.stack([t ** 3, 2 * t ** 3], axis=1)  # jerk 6 and 12
    assert M.jerk_rms(q, dt) == pytest.approx(math.sqrt((36 + 144) / 2))
    assert math.isnan(M.jerk_rms(q[:3], dt))


def test_trajectory_limits_and_c2_seams():
    t = np.linspace(0, 1, 11)
    q = np.stack([t ** 2], axis=1)
    traj = M.TrajectorySamples(0.0, t, q, 2 * t[:, None], np.full((11, 1), 2.0))
    lim = M.trajectory_limits(traj, np.array([1.0]), np.array([4.0]), np.array([-1.0]), np.array([0.5]))
    assert lim["v_ratio"] == pytest.approx(2.0) and lim["a_ratio"] == pytest.approx(0.5)
    assert lim["q_excess"] == pytest.approx(0.5) and lim["violated"] == 1.0
    later = M.TrajectorySamples(0.5, t[:6], q[5:], 2 * t[5:, None], np.full((6, 1), 2.0))
    seams = M.trajectory_seams([traj, later])
    assert seams["c2_jump_pos"] == [pytest.approx(0.0)] and seams["c2_jump_vel"] == [pytest.approx(0.0)]
    jumped = M.TrajectorySamples(0.5, t[:6], q[5:] + 0.1, 2 * t[5:, None], np.full((6, 1), 2.0))
    assert M.trajectory_seams([traj, jumped])["c2_jump_pos"] == [pytest.approx(0.1)]


def test_conditions_pass_fail_and_missing_metrics_fail():
    report = {"plan": {"ade_3d_m": {"mean": 0.02}}, "latency": {"e2e_ms": {"p95": None}}}
    res = {r["metric"]: r for r in M.check_conditions(report, {
        "plan.ade_3d_m.mean": {"max": 0.05}, "plan.ade_3d_m.min": {"max": 1},
        "latency.e2e_ms.p95": {"max": 100}, "plan.ade_3d_m": {"min": 0.0}})}
    assert res["plan.ade_3d_m.mean"]["passed"]
    assert not res["plan.ade_3d_m.min"]["passed"] and "not computed" in res["plan.ade_3d_m.min"]["reason"]
    assert not res["latency.e2e_ms.p95"]["passed"]
    assert not res["plan.ade_3d_m"]["passed"]  # a mapping, not a number
    with pytest.raises(M.ConditionError, match="expected a mapping"):
        M.check_conditions(report, {"x": {"below": 3}})
