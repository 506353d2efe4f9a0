"""Integer-nanosecond time: one rounding, then an exact split (never a stamp a second early)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plan_stack.stamps import join_ns, ns_to_s, s_to_ns, s_to_sec_nanosec, sec_nanosec_to_s, split_ns


def test_just_below_a_whole_second_rounds_up_to_it():
    # The old split (floor, then round the fraction) gave (1, 0): a full second early.
    assert s_to_sec_nanosec(1.9999999999) == (2, 0)
    assert s_to_sec_nanosec(0.9999999996) == (1, 0)
    assert s_to_sec_nanosec(1.5) == (1, 500_000_000)


def test_negative_times_split_with_a_positive_nanosecond_part():
    assert s_to_sec_nanosec(-0.25) == (-1, 750_000_000)


def test_epoch_scale_stamps_keep_nanosecond_precision():
    assert s_to_sec_nanosec(1_700_000_000.5) == (1_700_000_000, 500_000_000)


def test_non_finite_time_is_refused():
    with pytest.raises(ValueError):
        s_to_ns(math.nan)


@given(st.integers(min_value=-(2**40), max_value=2**62))
def test_ns_split_and_join_are_exact_inverses(ns):
    sec, nanosec = split_ns(ns)
    assert 0 <= nanosec < 1_000_000_000
    assert join_ns(sec, nanosec) == ns


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_seconds_round_trip_within_half_a_nanosecond_plus_float_error(t):
    sec, nanosec = s_to_sec_nanosec(t)
    assert 0 <= nanosec < 1_000_000_000
    assert abs(sec_nanosec_to_s(sec, nanosec) - t) <= 0.5e-9 + abs(t) * 4e-16
    assert ns_to_s(s_to_ns(t)) == pytest.approx(t, abs=1e-9)
