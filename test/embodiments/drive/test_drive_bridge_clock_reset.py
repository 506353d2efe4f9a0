"""drive_bridge over DDS on a /clock that jumps back (simulator reset): nothing from before the reset is used."""
from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from geometry_msgs.msg import Point  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402

from plan_stack.embodiments.drive.bridge_node import DriveBridgeNode  # noqa: E402
from plan_stack.msg import DriveTrajectory, Primitive, VisualPlan  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.ros.time import s_to_stamp, stamp_to_s  # noqa: E402


def _plan(t_s: float) -> VisualPlan:
    prim = Primitive(kind="drive_3d", frame_id="base_link", horizon_s=4.0, fallback_from=-1,
                     points=[Point(x=2.5 * k, y=0.0, z=0.0) for k in range(1, 9)])
    plan = VisualPlan(primitives=[prim])
    plan.header.stamp, plan.header.frame_id = s_to_stamp(t_s), "base_link"
    return plan


def _odom(t_s: float, x: float) -> Odometry:
    msg = Odometry()
    msg.header.stamp = s_to_stamp(t_s)
    msg.pose.pose.position.x = x
    msg.pose.pose.orientation.w = 1.0
    msg.twist.twist.linear.x = 5.0
    return msg


def test_clock_jumping_back_drops_odometry_and_the_forwarded_plan():
    with ros_context() as ctx:
        bridge = DriveBridgeNode(context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True),
                                                                   Parameter("watchdog_timeout", value=30.0)])
        probe = Node("drive_clock_probe", context=ctx)
        clock_pub = probe.create_publisher(Clock, "/clock", LATCHED_QOS)
        odom = probe.create_publisher(Odometry, "odom", SENSOR_QOS)
        plans = probe.create_publisher(VisualPlan, "plan", RELIABLE_QOS)
        out: list[DriveTrajectory] = []
        diags: list = []
        probe.create_subscription(DriveTrajectory, "drive_trajectory", out.append, RELIABLE_QOS)
        probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(m.status), DIAGNOSTICS_QOS)

        def clock(t_s):
            clock_pub.publish(Clock(clock=s_to_stamp(t_s)))
            return spin_until(ex, lambda: abs(bridge.get_clock().now().nanoseconds * 1e-9 - t_s) < 1e-6, 15.0)

        def plan_outcome(text):
            return any(s.name == "drive_bridge: plans" and text in s.message for s in diags)

        with executor_with(ctx, bridge, probe) as ex:
            assert spin_until(ex, lambda: odom.get_subscription_count() > 0 and plans.get_subscription_count() > 0
                              and probe.count_subscribers("/clock") >= 1, 20.0)
            assert clock(50.0)
            assert spin_until(ex, lambda: (odom.publish(_odom(50.0, 100.0)),
                                           bridge.bridge.history.latest is not None)[1], 15.0, step_s=0.05)
            plans.publish(_plan(50.0))
            assert spin_until(ex, lambda: len(out) == 1, 15.0)
            assert out[0].points[0].pose.position.x == pytest.approx(100.0, abs=1e-6)

            assert clock(1.0)  # the simulator was reset
            assert spin_until(ex, lambda: any(s.name == "drive_bridge: clock" and s.level == DiagnosticStatus.WARN
                                              for s in diags), 15.0)
            assert bridge.clock_resets == 1 and bridge.bridge.history.latest is None
            # No odometry from the new world yet: a fresh plan cannot be anchored (the old pose is gone).
            plans.publish(_plan(1.0))
            assert spin_until(ex, lambda: plan_outcome("no_odometry"), 15.0)
            # A plan in flight from before the reset is stamped in the future now.
            plans.publish(_plan(50.0))
            assert spin_until(ex, lambda: plan_outcome("in the future"), 15.0)
            assert len(out) == 1

            assert spin_until(ex, lambda: (odom.publish(_odom(1.0, 3.0)),
                                           bridge.bridge.history.latest is not None)[1], 15.0, step_s=0.05)
            plans.publish(_plan(1.0))
            assert spin_until(ex, lambda: len(out) >= 2, 15.0)
            anchored = [m for m in out[1:] if math.isclose(stamp_to_s(m.header.stamp), 1.0)]
            assert anchored and anchored[0].points[0].pose.position.x == pytest.approx(3.0, abs=1e-6)
