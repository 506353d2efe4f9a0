"""Diagnostics on the absolute /diagnostics topic."""
from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node

from plan_stack.ros.diagnostics import WARN, Diagnostics
from plan_stack.ros.testing import executor_with, ros_context, spin_until


@pytest.mark.ros
def test_diagnostics_publish_on_absolute_topic():
    with ros_context() as ctx:
        node = Node("diag_src", namespace="/robot", context=ctx)
        listener = Node("diag_listener", context=ctx)
        got = []
        listener.create_subscription(DiagnosticArray, "/diagnostics", got.append, 10)
        diag = Diagnostics(node, period_s=0.05, hardware_id="sim")
        diag.report("camera", WARN, "stale frame", age_s=1.5)
        with executor_with(ctx, node, listener) as ex:
            assert spin_until(ex, lambda: bool(got), 5.0)
        status = got[-1].status[0]
        assert status.name == "diag_src: camera" and status.message == "stale frame"
        assert status.level == WARN and status.hardware_id == "sim"
        assert [(kv.key, kv.value) for kv in status.values] == [("age_s", "1.5")]
        assert diag.level("camera") == WARN and diag.level("other") is None
