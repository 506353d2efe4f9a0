"""aloha_sim over real DDS: every topic is published, controllers follow trajectories."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from builtin_interfaces.msg import Duration  # noqa: E402
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState  # noqa: E402
from std_msgs.msg import Int32  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from plan_stack.config import ConfigError  # noqa: E402
from plan_stack.embodiments.aloha.model import CAMERAS, JOINT_NAMES, START_ARM_POSE, camera_model  # noqa: E402
from plan_stack.embodiments.aloha.sim_node import AlohaSimConfig, AlohaSimNode  # noqa: E402
from plan_stack.ros.image import image_to_numpy  # noqa: E402
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

W, H = 96, 72


def test_config_rejects_unknown_camera():
    with pytest.raises(ConfigError, match="^cameras: unknown camera"):
        AlohaSimConfig(cameras=("cam_low",))
    with pytest.raises(ConfigError, match="^task:"):
        AlohaSimConfig(task="stack_blocks")


def test_sim_publishes_all_topics_and_follows_a_controller():
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_width", value=W), Parameter("camera_height", value=H),
            Parameter("camera_rate_hz", value=10.0), Parameter("real_time_factor", value=0.0)])
        probe = Node("probe", context=ctx)
        got: dict[str, list] = {}

        def keep(key):
            return lambda msg: got.setdefault(key, []).append(msg)

        probe.create_subscription(Clock, "/clock", keep("clock"), RELIABLE_QOS)
        probe.create_subscription(JointState, "joint_states", keep("js"), SENSOR_QOS)
        for cam in CAMERAS:
            probe.create_subscription(Image, f"cameras/{cam}/image_raw", keep(cam), SENSOR_QOS)
            probe.create_subscription(CameraInfo, f"cameras/{cam}/camera_info", keep(cam + "/info"), SENSOR_QOS)
        for gt in ("box", "left_gripper", "right_gripper"):
            probe.create_subscription(PoseStamped, f"ground_truth/{gt}/pose", keep(gt), SENSOR_QOS)
        probe.create_subscription(Int32, "ground_truth/reward", keep("reward"), RELIABLE_QOS)
        pub = probe.create_publisher(JointTrajectory, "left_arm_controller/joint_trajectory", RELIABLE_QOS)
        keys = ["clock", "js", *CAMERAS, *(c + "/info" for c in CAMERAS), "box", "left_gripper", "right_gripper", "reward"]
        with executor_with(ctx, sim, probe) as ex:
            assert spin_until(ex, lambda: all(got.get(k) for k in keys), 20.0), [k for k in keys if not got.get(k)]
            js = got["js"][-1]
            assert list(js.name) == list(JOINT_NAMES) and len(js.position) == 14
            for cam in CAMERAS:
                img = got[cam][-1]
                assert (img.width, img.height, img.encoding) == (W, H, "rgb8")
                assert image_to_numpy(img).std() > 1.0  # a real picture, not a blank buffer
                info = got[cam + "/info"][-1]
                expected = camera_model(sim.sim.model, cam, W, H)
                assert np.allclose(info.k, expected.K.reshape(-1))
                assert info.header.stamp == img.header.stamp
                assert img.header.frame_id == f"{cam}_optical_frame"
            stamps = [c.clock.sec + 1e-9 * c.clock.nanosec for c in got["clock"]]
            assert np.all(np.diff(stamps) > 0)
            box = got["box"][-1].pose.position
            assert 0.015 < box.z <= 0.05 and 0.0 <= box.x <= 0.2  # placed at z=0.05, settles to 0.02

            # A quintic point 0.4 s ahead on the left arm controller (header stamp 0 = now).
            q0 = np.array(got["js"][-1].position[:6])
            goal = q0 + np.array([0.3, 0.1, -0.1, 0.0, 0.2, 0.0])
            msg = JointTrajectory(joint_names=[f"left_{j}" for j in
                                               ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")])
            msg.points.append(JointTrajectoryPoint(positions=goal.tolist(), velocities=[0.0] * 6,
                                                   accelerations=[0.0] * 6, time_from_start=Duration(nanosec=400_000_000)))
            t_sent = sim.sim.time_s
            pub.publish(msg)
            assert spin_until(ex, lambda: got["js"][-1].header.stamp.sec + 1e-9 * got["js"][-1].header.stamp.nanosec
                              > t_sent + 1.2, 20.0)
            q = np.array(got["js"][-1].position[:6])
            assert np.all(np.abs(q - goal) < 0.03), q - goal
            # The right arm was not commanded and holds its start pose.
            assert np.all(np.abs(np.array(got["js"][-1].position[7:13]) - np.array(js.position[7:13])) < 0.02)


@pytest.mark.parametrize("threshold_n", [40.0, 1e6])
def test_arms_colliding_are_reported_as_a_safety_error_once_and_cleared(threshold_n):
    """Both arms driven into each other: one ERROR `aloha_sim: safety` naming the geoms and the force, at once;
    apart again: OK. Under `arm_collision_force_n` (here: an absurd 1 MN) a contact is no collision."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    from plan_stack.ros.qos import DIAGNOSTICS_QOS

    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_rate_hz", value=0.0), Parameter("real_time_factor", value=2.0),
            Parameter("arm_collision_force_n", value=threshold_n)])
        probe = Node("probe", context=ctx)
        safety: list = []
        probe.create_subscription(
            DiagnosticArray, "/diagnostics",
            lambda m: safety.extend(s for s in m.status if s.name == "aloha_sim: safety"), DIAGNOSTICS_QOS)
        pubs = {a: probe.create_publisher(JointTrajectory, f"{a}_arm_controller/joint_trajectory", RELIABLE_QOS)
                for a in ("left", "right")}
        joints = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")

        def move(pose, after_s):
            for arm, pub in pubs.items():
                msg = JointTrajectory(joint_names=[f"{arm}_{j}" for j in joints])
                msg.points.append(JointTrajectoryPoint(positions=list(pose), velocities=[0.0] * 6,
                                                       accelerations=[0.0] * 6,
                                                       time_from_start=Duration(nanosec=int(after_s * 1e9))))
                pub.publish(msg)

        start = list(START_ARM_POSE)
        meet = [START_ARM_POSE[0], 0.15, -0.68, *START_ARM_POSE[3:]]  # both grippers into each other
        errors = lambda: [s for s in safety if s.level == DiagnosticStatus.ERROR]  # noqa: E731
        with executor_with(ctx, sim, probe) as ex:
            assert spin_until(ex, lambda: probe.count_subscribers("left_arm_controller/joint_trajectory") > 0
                              and sim.count_publishers("/diagnostics") > 0, 10.0)
            move(meet, 0.8)
            if threshold_n > 1e3:
                t_meet = sim.sim.time_s
                assert spin_until(ex, lambda: sim.sim.time_s > t_meet + 1.5, 20.0)
                assert not errors()  # the same collision as with 40 N (below), under this threshold
                return
            assert spin_until(ex, lambda: errors(), 20.0), "no safety report while the arms collided"
            first = errors()[0]
            assert "arms collided at" in first.message and "vx300s_left/" in first.message
            assert float(dict((kv.key, kv.value) for kv in first.values)["force_n"]) > threshold_n
            move(start, 0.8)
            assert spin_until(ex, lambda: safety[-1].level == DiagnosticStatus.OK, 20.0)
            assert safety[-1].message == "arms apart"
            # one collision, one report (the periodic republication repeats the same message)
            assert len({s.message for s in errors()}) == 1
