"""builtin_interfaces Time/Duration conversions go through integer nanoseconds."""
from __future__ import annotations

from builtin_interfaces.msg import Duration, Time

from plan_stack.ros.time import (
    duration_to_s,
    ns_to_stamp,
    s_to_duration,
    s_to_stamp,
    stamp_to_ns,
    stamp_to_s,
)


def test_stamp_just_below_a_second_is_not_a_second_early():
    stamp = s_to_stamp(1.9999999999)
    assert isinstance(stamp, Time)
    assert (stamp.sec, stamp.nanosec) == (2, 0)


def test_round_trips():
    assert stamp_to_ns(ns_to_stamp(3_000_000_007)) == 3_000_000_007
    assert stamp_to_s(Time(sec=4, nanosec=250_000_000)) == 4.25
    d = s_to_duration(0.02)
    assert isinstance(d, Duration) and (d.sec, d.nanosec) == (0, 20_000_000)
    assert duration_to_s(d) == 0.02


def test_no_hand_written_stamp_arithmetic_left_in_the_package():
    """Conversions use plan_stack.stamps / plan_stack.ros.time (one rounding rule for the package)."""
    import pathlib
    import re

    src = pathlib.Path(__file__).resolve().parents[2] / "src" / "plan_stack"
    pattern = re.compile(r"nanosec\s*\*\s*1e-9|1e-9\s*\*\s*(float\()?\w*\.?nanosec|\.nanoseconds\s*\*\s*1e-9")
    helpers = {src / "stamps.py", src / "ros" / "time.py"}
    owned = [p for p in src.rglob("*.py") if "trajectory" not in p.parts and p not in helpers]
    offenders = [f"{p.relative_to(src)}:{i + 1}" for p in owned
                 for i, line in enumerate(p.read_text().splitlines()) if pattern.search(line)]
    assert not offenders, offenders
