"""RTC runtime: alignment, delay estimation, the horizon constraint d <= s <= H - d, the chunker state."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.actions.errors import RtcError
from plan_stack.actions.rtc.runtime import DelayEstimator, Method, RtcConfig, RtcRuntime, align_previous, plan_horizon
from plan_stack.config import ConfigError

# --- alignment -----------------------------------------------------------------------------------


def test_alignment_with_fractional_delta_matches_hand_computation():
    # previous chunk q_k = k^2 (one joint) and 10 k (another), dt 0.1 s, sample 0 at t = 1.0 s
    prev = np.array([[0.0, 0.0], [1.0, 10.0], [4.0, 20.0], [9.0, 30.0], [16.0, 40.0]])
    got = align_previous(prev, t_ref_s=1.0, t_query_s=1.25, dt_s=0.1, prefix_len=3)
    # delta = 2.5: samples at 2.5 and 3.5 remain -> (4+9)/2 = 6.5, (9+16)/2 = 12.5; then hold the last sample
    assert got.delta_steps == pytest.approx(2.5)
    assert got.valid_len == 2
    assert got.prefix_len == 2  # requested 3, clamped to what remains
    np.testing.assert_allclose(got.actions, [[6.5, 25.0], [12.5, 35.0], [16.0, 40.0], [16.0, 40.0],
                                             [16.0, 40.0]])


def test_alignment_integer_delta_is_a_shift_and_float_stamps_keep_the_sample():
    prev = np.arange(10.0)[:, None]
    # 0.3 / 0.1 = 2.9999999999999996 in floats: must still count as delta = 3
    got = align_previous(prev, 0.0, 0.3, 0.1, prefix_len=4)
    np.testing.assert_allclose(got.actions[:7, 0], [3, 4, 5, 6, 7, 8, 9], atol=1e-9)
    assert got.valid_len == 7 and got.prefix_len == 4
    np.testing.assert_allclose(got.actions[7:, 0], 9.0)


def test_alignment_past_the_end_has_nothing_to_lock():
    got = align_previous(np.arange(5.0)[:, None], 0.0, 1.0, 0.1, prefix_len=3)
    assert got.valid_len == 0 and got.prefix_len == 0
    np.testing.assert_allclose(got.actions, 4.0)


def test_alignment_rejects_a_query_before_the_chunk_and_bad_input():
    with pytest.raises(RtcError, match="precedes"):
        align_previous(np.zeros((5, 1)), 1.0, 0.9, 0.1, 1)
    with pytest.raises(RtcError, match="non-finite"):
        align_previous(np.full((5, 1), np.nan), 0.0, 0.1, 0.1, 1)
    with pytest.raises(RtcError, match="dt_s"):
        align_previous(np.zeros((5, 1)), 0.0, 0.1, 0.0, 1)
    with pytest.raises(RtcError, match="shape"):
        align_previous(np.zeros(5), 0.0, 0.1, 0.1, 1)


# --- delay estimation ----------------------------------------------------------------------------


def test_delay_estimator_ignores_the_cold_start_sample():
    est = DelayEstimator(dt_s=0.02, window=10, quantile=0.9, cold_start=1, initial_steps=2.0)
    assert est.estimate() == 2.0
    est.observe(1.5)  # first inference: 75 steps of warm-up, must not count
    assert est.num_samples == 0 and est.estimate() == 2.0
    for ms in (30, 31, 32, 33, 35):
        est.observe(ms / 1000)
    assert est.estimate() == pytest.approx(35 / 20)  # 'higher' quantile of the 5 warm samples
    assert est.steps() == 2


def test_delay_estimator_counts_consumed_steps_and_forgets_old_samples():
    est = DelayEstimator(dt_s=0.02, window=3, quantile=1.0, cold_start=0)
    est.observe(0.010, consumed_steps=3.0)  # fast compute but 3 steps actually elapsed (transport)
    assert est.estimate() == 3.0
    for _ in range(3):
        est.observe(0.010)
    assert est.estimate() == pytest.approx(0.5)
    with pytest.raises(RtcError, match="inference_s"):
        est.observe(-1.0)
    with pytest.raises(RtcError, match="consumed_steps"):
        est.observe(0.01, consumed_steps=math.nan)


@pytest.mark.parametrize("d,s,h,trained,expect", [
    (4, 10, 50, None, (4, 10, False)),
    (12, 10, 50, None, (12, 12, False)),  # s raised to d
    (4, 48, 50, None, (4, 46, False)),  # s lowered to H - d
    (30, 10, 50, None, (25, 25, True)),  # d beyond H/2
    (9, 10, 50, 8, (7, 10, True)),  # d beyond the trained range [0, 8)
])
def test_plan_horizon_enforces_d_le_s_le_h_minus_d(d, s, h, trained, expect):
    plan = plan_horizon(d, s, h, trained)
    assert (plan.delay_steps, plan.execution_steps, plan.clamped) == expect
    assert plan.delay_steps <= plan.execution_steps <= h - plan.delay_steps


# --- runtime ------------------------------------------------------------------------------------


def test_runtime_cold_start_then_aligned_prefix_with_estimated_delay():
    cfg = RtcConfig(method="training_time", execution_horizon_steps=4, initial_delay_steps=2.0,
                    cold_start_samples=1, delay_quantile=1.0)
    rt = RtcRuntime(cfg, horizon=10, dt_s=0.1, max_trained_delay=5)
    r0 = rt.request(1.0)
    assert r0.prefix is None and r0.prefix_len == 0 and rt.next_query_s() is None
    rt.commit(r0, np.arange(10.0)[:, None], inference_s=5.0)  # warm-up inference: excluded
    assert rt.next_query_s() == pytest.approx(1.4)
    r1 = rt.request(1.4)
    assert r1.delay_steps == 2.0 and r1.prefix_len == 2 and r1.delta_steps == pytest.approx(4.0)
    np.testing.assert_allclose(r1.prefix[:6, 0], [4, 5, 6, 7, 8, 9])
    assert r1.region_end == 6
    rt.commit(r1, np.arange(10.0)[:, None] + 4, inference_s=0.35)  # 3.5 steps
    r2 = rt.request(1.8)
    assert r2.prefix_len == 4 and not r2.clamped  # ceil(3.5)
    rt.commit(r2, np.zeros((10, 1)), inference_s=0.9)  # 9 steps: beyond the trained range [0, 5)
    r3 = rt.request(2.2)
    assert r3.clamped and r3.prefix_len == 4 and r3.execution_steps == 4


def test_runtime_naive_never_locks_and_config_is_validated():
    rt = RtcRuntime(RtcConfig(method="naive", execution_horizon_steps=5), horizon=10, dt_s=0.1)
    rt.commit(rt.request(0.0), np.ones((10, 2)), 0.01)
    assert rt.request(0.5).prefix is None
    with pytest.raises(ConfigError, match="method"):
        RtcConfig(method="magic")
    with pytest.raises(ConfigError, match="execution_horizon_steps"):
        RtcRuntime(RtcConfig(execution_horizon_steps=60), horizon=50, dt_s=0.02)
    with pytest.raises(RtcError, match="chunk"):
        rt.commit(rt.request(1.0), np.ones((9, 2)), 0.01)
    assert Method("test_time_vjp").uses_guidance and Method("hard_prefix").uses_prefix_conditioning
