"""Integer-nanosecond time, the one conversion between seconds and (sec, nanosec).

ROS stamps are (int32 sec, uint32 nanosec); a float of seconds cannot be split
by `floor` and `round` separately (1.9999999999 s would become 1 s and 0 ns, a
full second early). Everything goes through an integer count of nanoseconds:
seconds -> ns rounds once, ns -> (sec, nanosec) is an exact `divmod`. No ROS
imports; `plan_stack.ros.time` builds messages from these.
"""
from __future__ import annotations

import math

__all__ = ["NS_PER_S", "s_to_ns", "ns_to_s", "split_ns", "join_ns", "s_to_sec_nanosec", "sec_nanosec_to_s"]

NS_PER_S = 1_000_000_000


def s_to_ns(t_s: float) -> int:
    """Seconds -> nearest integer nanosecond (whole seconds kept exact, so large stamps keep ns precision)."""
    t_s = float(t_s)
    if not math.isfinite(t_s):
        raise ValueError(f"time must be finite, got {t_s!r}")
    whole = math.floor(t_s)
    return int(whole) * NS_PER_S + int(round((t_s - whole) * NS_PER_S))


def ns_to_s(ns: int) -> float:
    """Integer nanoseconds -> seconds (float)."""
    sec, nanosec = divmod(int(ns), NS_PER_S)
    return sec + nanosec * 1e-9


def split_ns(ns: int) -> tuple[int, int]:
    """Integer nanoseconds -> (sec, nanosec) with 0 <= nanosec < 1e9, as ROS stamps hold them."""
    return divmod(int(ns), NS_PER_S)


def join_ns(sec: int, nanosec: int) -> int:
    """(sec, nanosec) -> integer nanoseconds."""
    return int(sec) * NS_PER_S + int(nanosec)


def s_to_sec_nanosec(t_s: float) -> tuple[int, int]:
    """Seconds -> (sec, nanosec), rounding once to the nearest nanosecond."""
    return split_ns(s_to_ns(t_s))


def sec_nanosec_to_s(sec: int, nanosec: int) -> float:
    """(sec, nanosec) -> seconds."""
    return ns_to_s(join_ns(sec, nanosec))
