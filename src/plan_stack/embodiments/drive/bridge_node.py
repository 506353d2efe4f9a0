"""`drive_bridge`: VisualPlan drive waypoints -> `drive_trajectory` for a driving stack's follower.

Subscribes `plan` (plan_stack/VisualPlan) and `odom` (nav_msgs/Odometry);
publishes `drive_trajectory` (plan_stack/DriveTrajectory, Autoware
Trajectory-compatible, poses in the odometry frame, stamp = the plan's
stamp). The first `drive_3d`/`drive_2d3d` primitive is converted and
checked (`embodiments.drive.trajectory`), anchored with the ego pose at the
plan's stamp and forwarded; infeasible, malformed, stale or unanchorable
plans are reported on /diagnostics and publish nothing; every `plans` status
carries the count of plans by outcome so far (`forwarded`, `smoothed`,
`rejected`, `stale`, `no_primitive`, `no_odometry`). A watchdog timer
commands a smooth stop once no valid plan covers the present
(`embodiments.drive.bridge`). Run on the sim/vehicle clock; when it jumps
back (simulator reset) the odometry history and the forwarded plan are
dropped (WARN `clock`, counted).
"""
from __future__ import annotations

import threading

from nav_msgs.msg import Odometry
from rclpy.node import Node

from plan_stack.embodiments.drive.bridge import DriveBridge, DriveBridgeConfig, Outcome
from plan_stack.embodiments.drive.errors import DriveError
from plan_stack.embodiments.drive.msg_convert import ego_from_odometry, primitives_of, trajectory_to_msg
from plan_stack.embodiments.drive.trajectory import DriveTrajectoryConfig
from plan_stack.embodiments.drive.vehicle import VehicleParams
from plan_stack.msg import DriveTrajectory as DriveTrajectoryMsg
from plan_stack.msg import VisualPlan
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, STALE, WARN, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.time import clock_s, stamp_to_s

__all__ = ["DriveBridgeNode", "main"]

_LEVEL = {Outcome.FORWARDED: OK, Outcome.SMOOTHED: WARN}


class DriveBridgeNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("drive_bridge", **kwargs)
        self.cfg = declare_config(self, DriveBridgeConfig)
        self.vehicle = declare_config(self, VehicleParams, prefix="vehicle")
        self.conversion = declare_config(self, DriveTrajectoryConfig, prefix="limits")
        self.bridge = DriveBridge(self.vehicle, self.conversion, self.cfg)
        self._lock = threading.Lock()
        self.diagnostics = Diagnostics(self, 1.0)
        self._pub = self.create_publisher(DriveTrajectoryMsg, "drive_trajectory", RELIABLE_QOS)
        self.create_subscription(Odometry, "odom", self._on_odom, SENSOR_QOS)
        self.create_subscription(VisualPlan, "plan", self._on_plan, RELIABLE_QOS)
        self.create_timer(self.cfg.watchdog_timeout / 4.0, self._watchdog)
        self.clock_resets = 0
        on_clock_reset(self, self._on_clock_reset)

    def _on_clock_reset(self) -> None:
        with self._lock:
            self.bridge.reset()
            self.clock_resets += 1
        self.get_logger().warning("clock jumped back (simulator reset?): dropped odometry and the forwarded plan")
        self.diagnostics.report("clock", WARN, "clock jumped back: odometry and plan dropped", now=True,
                                clock_resets=self.clock_resets)

    def _now(self) -> float:
        return clock_s(self)

    def _on_odom(self, msg: Odometry) -> None:
        try:
            ego = ego_from_odometry(msg)
            with self._lock:
                self.bridge.add_odometry(ego, self._now())
        except DriveError as exc:
            self.diagnostics.report("odometry", ERROR, str(exc), now=True)

    def _on_plan(self, msg: VisualPlan) -> None:
        with self._lock:
            decision = self.bridge.on_plan(primitives_of(msg), stamp_to_s(msg.header.stamp), self._now())
            counts = {o.value: n for o, n in self.bridge.plan_outcomes.items()}
        if decision.trajectory is not None:
            self._pub.publish(trajectory_to_msg(decision.trajectory, decision.stamp_s))
            self.diagnostics.report("plans", _LEVEL[decision.outcome],
                                    decision.outcome.value + (f": {decision.message}" if decision.message else ""),
                                    now=decision.outcome is Outcome.SMOOTHED, points=len(decision.trajectory),
                                    duration_s=f"{decision.trajectory.duration_s:.3f}", **counts)
            return
        self.get_logger().warning(f"plan {decision.outcome.value}: {decision.message}")
        self.diagnostics.report("plans", ERROR, f"{decision.outcome.value}: {decision.message}", now=True,
                                outcome=decision.outcome.value, **counts)

    def _watchdog(self) -> None:
        with self._lock:
            decision = self.bridge.watchdog(self._now())
        if decision is None:
            if self.bridge.history.latest is None:
                self.diagnostics.report("watchdog", STALE, "waiting for odometry")
            elif not self.bridge.stopped:
                self.diagnostics.report("watchdog", OK, "a valid plan covers the present")
            return
        stop = decision.trajectory
        assert stop is not None  # a watchdog decision always carries its stop trajectory
        self._pub.publish(trajectory_to_msg(stop, decision.stamp_s))
        self.diagnostics.report("watchdog", WARN, decision.message, now=True, stop_duration_s=f"{stop.duration_s:.3f}")


main = node_main(DriveBridgeNode)
