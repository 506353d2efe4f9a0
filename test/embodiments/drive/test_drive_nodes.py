"""drive_sim + drive_bridge over real DDS: sim-time topics, plan -> trajectory -> motion,
bad plans rejected with a diagnostic and no trajectory, watchdog stop."""
from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import Point, PoseArray  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image  # noqa: E402

from plan_stack.embodiments.drive.bridge_node import DriveBridgeNode  # noqa: E402
from plan_stack.embodiments.drive.sim_node import DriveSimNode  # noqa: E402
from plan_stack.msg import DriveTrajectory, Primitive, VisualPlan  # noqa: E402
from plan_stack.ros.diagnostics import ERROR  # noqa: E402
from plan_stack.ros.image import image_to_numpy  # noqa: E402
from plan_stack.ros.params import ParameterError  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

W, H = 64, 48


def _t(stamp) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def _plan(stamp, points, horizon_s, kind="drive_3d") -> VisualPlan:
    prim = Primitive(kind=kind, frame_id="base_link", horizon_s=float(horizon_s), fallback_from=-1,
                     points=[Point(x=float(x), y=float(y), z=0.0) for x, y in points])
    plan = VisualPlan(primitives=[Primitive(kind="box", uv=[1.0, 2.0, 3.0, 4.0]), prim])
    plan.header.stamp, plan.header.frame_id = stamp, "base_link"
    return plan


def test_sim_rejects_rates_above_physics():
    with ros_context() as ctx:
        with pytest.raises(ParameterError, match="^odom_rate_hz"):
            DriveSimNode(context=ctx, parameter_overrides=[Parameter("odom_rate_hz", value=100.0),
                                                           Parameter("scene.timestep_s", value=0.02)])


def test_drive_stack_end_to_end(wait_for):
    with ros_context() as ctx:
        sim = DriveSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_width", value=W), Parameter("camera_height", value=H),
            Parameter("camera_rate_hz", value=2.0), Parameter("real_time_factor", value=1.0),
            Parameter("clock_rate_hz", value=50.0), Parameter("odom_rate_hz", value=25.0),
            Parameter("scene.road_length_m", value=300.0), Parameter("scene.obstacles", value=2)])
        bridge = DriveBridgeNode(context=ctx, parameter_overrides=[
            Parameter("use_sim_time", value=True), Parameter("watchdog_timeout", value=1.0)])
        probe = Node("probe", context=ctx)
        got: dict[str, list] = {}

        def keep(key):
            return lambda msg: got.setdefault(key, []).append(msg)

        probe.create_subscription(Clock, "/clock", keep("clock"), RELIABLE_QOS)
        probe.create_subscription(Odometry, "odom", keep("odom"), SENSOR_QOS)
        probe.create_subscription(Image, "cameras/front/image_raw", keep("image"), SENSOR_QOS)
        probe.create_subscription(CameraInfo, "cameras/front/camera_info", keep("info"), SENSOR_QOS)
        probe.create_subscription(PoseArray, "ground_truth/obstacles", keep("obstacles"), LATCHED_QOS)
        probe.create_subscription(DriveTrajectory, "drive_trajectory", keep("traj"), RELIABLE_QOS)
        probe.create_subscription(DiagnosticArray, "/diagnostics", keep("diag"), DIAGNOSTICS_QOS)
        plans = probe.create_publisher(VisualPlan, "plan", RELIABLE_QOS)
        with executor_with(ctx, sim, bridge, probe) as ex:
            spinner = threading.Thread(target=ex.spin, daemon=True)
            spinner.start()
            keys = ["clock", "odom", "image", "info", "obstacles"]
            assert wait_for(lambda: all(got.get(k) for k in keys), 20.0), [k for k in keys if not got.get(k)]
            img, info = got["image"][-1], got["info"][-1]
            assert (img.width, img.height, img.encoding) == (W, H, "rgb8") and image_to_numpy(img).std() > 5.0
            assert info.header.stamp == img.header.stamp and info.k[0] > 0 and info.width == W
            assert len(got["obstacles"][-1].poses) == 2
            odom = got["odom"][-1]
            assert (odom.header.frame_id, odom.child_frame_id) == ("odom", "base_link")
            clocks = [_t(c.clock) for c in got["clock"]]
            assert np.all(np.diff(clocks) > 0)
            # With no plan the watchdog's stop (at rest: one point) is the only trajectory so far.
            assert wait_for(lambda: got.get("traj"), 10.0)
            assert all(len(t.points) == 1 and t.points[0].longitudinal_velocity_mps == 0.0 for t in got["traj"])

            # A valid plan: accelerate to 6 m/s straight ahead, 20 points over 5 s, sent every 0.5 s sim time.
            def send(points, horizon, kind="drive_3d"):
                stamp = got["odom"][-1].header.stamp
                plans.publish(_plan(stamp, points, horizon, kind))
                return _t(stamp)

            def plan_now(accel=1.5, v_max=6.0):
                v0 = got["odom"][-1].twist.twist.linear.x
                t = np.arange(1, 21) * 0.25
                tc = max(v_max - v0, 0.0) / accel  # when v_max is reached
                tt = np.minimum(t, tc)
                x = v0 * tt + 0.5 * accel * tt**2 + v_max * (t - tt)
                return np.c_[x, np.zeros(20)]

            n0 = len(got["traj"])
            t_sent = send(plan_now(), 5.0)
            assert wait_for(lambda: len(got["traj"]) > n0, 10.0)
            traj = got["traj"][-1]
            assert traj.header.frame_id == "odom" and _t(traj.header.stamp) == pytest.approx(t_sent, abs=1e-6)
            assert len(traj.points) == 51 and _t(traj.points[-1].time_from_start) == pytest.approx(5.0)
            p5 = traj.points[5]
            assert p5.longitudinal_velocity_mps > 0 and p5.acceleration_mps2 == pytest.approx(1.5, abs=0.3)
            assert abs(p5.front_wheel_angle_rad) < 1e-3 and p5.lateral_velocity_mps == 0.0
            y0 = got["odom"][-1].pose.pose.position.y
            last = t_sent
            while _t(got["odom"][-1].header.stamp) < t_sent + 6.0:
                now = _t(got["odom"][-1].header.stamp)
                if now - last >= 0.5:
                    last = send(plan_now(), 5.0)
                time.sleep(0.01)
            odom = got["odom"][-1]
            assert odom.twist.twist.linear.x == pytest.approx(6.0, abs=0.3)
            assert abs(odom.pose.pose.position.y - y0) < 0.2

            # A plan with a NaN waypoint: error diagnostic, no trajectory.
            n0, d0 = len(got["traj"]), len(got.get("diag", []))
            bad = plan_now()
            bad[4, 0] = math.nan
            send(bad, 5.0, kind="drive_2d3d")

            def rejected():
                return any("non-finite waypoint 4" in s.message and s.level == ERROR
                           for d in got.get("diag", [])[d0:] for s in d.status)

            assert wait_for(rejected, 5.0)
            # A plan older than its horizon: stale, no trajectory; the plans status counts both refusals by kind.
            now = got["odom"][-1].header.stamp
            old = type(now)(sec=now.sec - 6, nanosec=now.nanosec)
            plans.publish(_plan(old, plan_now(), 5.0))

            def counted():
                found = [dict((kv.key, kv.value) for kv in s.values) for d in got.get("diag", [])[d0:]
                         for s in d.status if s.name == "drive_bridge: plans" and "beyond its 5 s horizon" in s.message]
                return found[-1] if found else None

            assert wait_for(counted, 5.0)
            assert (counted()["outcome"], counted()["stale"], counted()["rejected"]) == ("stale", "1", "1")
            # No more plans: the watchdog brakes the car to a stop (and the NaN plan produced nothing).
            assert wait_for(lambda: got["odom"][-1].twist.twist.linear.x < 1e-3, 15.0)
            stops = got["traj"][n0:]
            assert len(stops) == 1 and stops[0].points[-1].longitudinal_velocity_mps == 0.0
            assert stops[0].points[0].longitudinal_velocity_mps > 4.0
            assert sim.sim.collided_with is None and not sim.sim.left_road
