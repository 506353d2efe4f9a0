"""Stream health: rate, timeout, recovery, bad-input warnings."""
from __future__ import annotations

import pytest

from plan_stack.ingest.monitor import Level, StreamMonitor


def test_rate_age_and_counts():
    m = StreamMonitor("cam", timeout_s=0.5, rate_window_s=1.0)
    m.start(0.0)
    for k in range(31):
        m.arrived(k / 30)
        m.valid(k / 30, k / 30)
    h = m.health(1.0)
    assert h.level is Level.OK and float(h.values["rate_hz"]) == pytest.approx(30.0)
    assert h.values["received"] == "31" and float(h.values["age_s"]) == pytest.approx(0.0, abs=1e-9)
    assert float(h.values["stamp_age_s"]) == pytest.approx(0.0, abs=1e-9)
    m.valid(1.1, 1.05)
    assert float(m.health(1.2).values["stamp_age_s"]) == pytest.approx(0.15)


def test_silence_is_an_error_until_a_valid_message_arrives():
    m = StreamMonitor("cam", timeout_s=0.5)
    m.start(10.0)
    assert m.health(10.4).level is Level.OK
    h = m.health(10.6)
    assert h.level is Level.ERROR and "no message yet" in h.message
    m.arrived(10.7)  # an invalid message does not end the silence
    assert m.timed_out(10.7)
    m.valid(10.7, 10.69)
    assert not m.timed_out(10.8) and m.health(10.8).level is Level.OK
    assert m.timed_out(11.3) and "no valid message for 0.60 s" in m.health(11.3).message


def test_bad_input_warns_once_and_is_counted_by_reason():
    m = StreamMonitor("cam", timeout_s=1.0)
    m.start(0.0)
    m.dropped("bad_input", bad_input="data length 5 != step*height")
    m.dropped("unmatched")
    h = m.health(0.1)
    assert h.level is Level.WARN and "data length 5" in h.message
    assert h.values["dropped_bad_input"] == "1" and h.values["dropped_unmatched"] == "1"
    assert h.values["dropped"] == "2"
    assert m.health(0.2).level is Level.OK


def test_reset_clock_forgets_the_old_time_line():
    m = StreamMonitor("cam", timeout_s=1.0)
    m.start(100.0)
    m.valid(100.0, 100.0)
    m.reset_clock(0.5)  # simulator reset: time went back
    assert not m.timed_out(1.0) and m.timed_out(1.6)
