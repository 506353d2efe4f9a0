"""Per-node diagnostics: `Diagnostics` publishes `diagnostic_msgs/DiagnosticArray` on `/diagnostics`
(absolute, as diagnostic_aggregator expects); levels `OK`, `WARN`, `ERROR`, `STALE`.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from plan_stack.ros.qos import DIAGNOSTICS_QOS

OK = DiagnosticStatus.OK
WARN = DiagnosticStatus.WARN
ERROR = DiagnosticStatus.ERROR
STALE = DiagnosticStatus.STALE


class Diagnostics:
    """Per-node diagnostics on `/diagnostics`.

    Each named status keeps its latest level, message and values; a timer
    republishes all of them every `period_s`, and `report(..., now=True)`
    publishes at once (use it for rejections, so none is lost between ticks).
    Thread-safe: callbacks in different callback groups may report.
    """

    def __init__(self, node: Node, period_s: float = 1.0, hardware_id: str = "") -> None:
        self._node = node
        self._hardware_id = hardware_id
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", DIAGNOSTICS_QOS)
        self._lock = threading.Lock()
        self._status: dict[str, DiagnosticStatus] = {}
        # A zero-argument callback: rclpy's EventsExecutor hands a TimerInfo to any callback that
        # takes an argument, and `publish(only=...)` would take it for a status list.
        self._timer = node.create_timer(period_s, lambda: self.publish())

    def report(self, name: str, level: int, message: str, *, now: bool = False, **values: Any) -> None:
        status = DiagnosticStatus(
            level=level,
            name=f"{self._node.get_name()}: {name}",
            message=message,
            hardware_id=self._hardware_id,
            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()],
        )
        with self._lock:
            self._status[name] = status
        if now:
            self.publish(only=[status])

    def level(self, name: str) -> bytes | None:
        """Latest level of a status (a DiagnosticStatus level byte), None if never reported."""
        with self._lock:
            st = self._status.get(name)
        return None if st is None else st.level

    def publish(self, only: Iterable[DiagnosticStatus] | None = None) -> None:
        with self._lock:
            status = list(only) if only is not None else list(self._status.values())
        if not status or not rclpy.ok(context=self._node.context):
            return
        msg = DiagnosticArray(status=status)
        msg.header.stamp = self._node.get_clock().now().to_msg()
        self._pub.publish(msg)
