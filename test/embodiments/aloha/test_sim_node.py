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
from plan_stack.embodiments.aloha.model import CAMERAS, JOINT_NAMES, camera_model  # noqa: E402
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
