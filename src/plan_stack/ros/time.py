"""builtin_interfaces Time/Duration <-> seconds or integer nanoseconds, for every node.

Built on `plan_stack.stamps` (one rounding to integer nanoseconds, then an
exact split), so no node hand-writes `sec + nanosec * 1e-9` or its inverse.
Works on any object with `sec`/`nanosec` fields (rclpy messages and rosbags
messages alike) for the readers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from builtin_interfaces.msg import Duration, Time

from plan_stack.stamps import join_ns, ns_to_s, s_to_ns, split_ns

if TYPE_CHECKING:
    from rclpy.node import Node

__all__ = ["stamp_to_ns", "stamp_to_s", "ns_to_stamp", "s_to_stamp", "duration_to_s", "s_to_duration",
           "ns_to_duration", "duration_to_ns", "clock_s", "clock_ns"]


class Stamp(Protocol):
    """A builtin_interfaces Time or Duration from rclpy or rosbags: whole seconds plus nanoseconds."""

    @property
    def sec(self) -> int: ...

    @property
    def nanosec(self) -> int: ...


def stamp_to_ns(stamp: Stamp) -> int:
    return join_ns(stamp.sec, stamp.nanosec)


def stamp_to_s(stamp: Stamp) -> float:
    return ns_to_s(stamp_to_ns(stamp))


def ns_to_stamp(ns: int) -> Time:
    sec, nanosec = split_ns(ns)
    return Time(sec=sec, nanosec=nanosec)


def s_to_stamp(t_s: float) -> Time:
    return ns_to_stamp(s_to_ns(t_s))


duration_to_ns = stamp_to_ns
duration_to_s = stamp_to_s


def ns_to_duration(ns: int) -> Duration:
    sec, nanosec = split_ns(ns)
    return Duration(sec=sec, nanosec=nanosec)


def s_to_duration(t_s: float) -> Duration:
    return ns_to_duration(s_to_ns(t_s))


def clock_ns(node: Node) -> int:
    """The node's ROS time (sim time when `use_sim_time`) in integer nanoseconds."""
    return node.get_clock().now().nanoseconds


def clock_s(node: Node) -> float:
    """The node's ROS time in seconds."""
    return ns_to_s(clock_ns(node))
