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


def _stamp_s(stamp) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def test_task_end_with_reset_says_the_outcome_and_restarts_with_the_next_seed():
    """`on_task_end: reset`: at the time limit the outcome is published (latched) and reported, sim time stands
    still for `reset_pause_s`, then the next seed's scene starts from sim time 0. A controller command stamped in
    the old scene's time and delivered after the reset is ignored (WARN), never followed."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    from plan_stack.msg import TaskOutcome
    from plan_stack.ros.qos import DIAGNOSTICS_QOS, LATCHED_QOS

    limit = 1.5
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_rate_hz", value=0.0), Parameter("real_time_factor", value=1.0),
            Parameter("seed", value=7), Parameter("task_time_limit_s", value=limit),
            Parameter("on_task_end", value="reset"), Parameter("reset_pause_s", value=0.3)])
        probe = Node("probe", context=ctx)
        outcomes, states, boxes, diags = [], [], [], []
        probe.create_subscription(TaskOutcome, "ground_truth/task_outcome", outcomes.append, LATCHED_QOS)
        probe.create_subscription(JointState, "joint_states", states.append, SENSOR_QOS)
        probe.create_subscription(PoseStamped, "ground_truth/box/pose", boxes.append, SENSOR_QOS)
        probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diags.extend(m.status), DIAGNOSTICS_QOS)
        pub = probe.create_publisher(JointTrajectory, "left_arm_controller/joint_trajectory", RELIABLE_QOS)
        with executor_with(ctx, sim, probe) as ex:
            assert spin_until(ex, lambda: len(outcomes) >= 1, 30.0), "no task outcome at the time limit"
            first = outcomes[0]
            assert (first.task, first.episode, first.seed, first.success, first.reason) == (
                "transfer_cube", 1, 7, False, "time_limit")
            assert (first.next, first.next_seed) == ("reset", 8)
            assert first.duration_s == pytest.approx(limit, abs=0.05)
            assert _stamp_s(first.header.stamp) == pytest.approx(limit, abs=0.05)
            box_before = boxes[-1].pose.position
            # the reset: joint states start again near 0 s, from the start pose, with the next seed's box
            n = len(states)
            assert spin_until(ex, lambda: any(_stamp_s(s.header.stamp) < 0.5 for s in states[n:]), 20.0)
            assert np.allclose(states[-1].position[:6], START_ARM_POSE, atol=0.02)
            # a command of the old scene (due at its 1.7 s, 1.2 s after its end) delivered now: ignored
            old = JointTrajectory(joint_names=[f"left_{j}" for j in ("waist", "shoulder", "elbow", "forearm_roll",
                                                                      "wrist_angle", "wrist_rotate")])
            old.header.stamp.sec, old.header.stamp.nanosec = 1, 600_000_000
            old.points.append(JointTrajectoryPoint(positions=[0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
                                                   time_from_start=Duration(nanosec=100_000_000)))
            pub.publish(old)
            ignored = lambda: [s for s in diags if s.name == "aloha_sim: left_arm"]  # noqa: E731
            assert spin_until(ex, lambda: ignored(), 20.0)
            assert ignored()[0].level == DiagnosticStatus.WARN and "before the reset" in ignored()[0].message
            assert spin_until(ex, lambda: len(outcomes) >= 2, 30.0)
            second = outcomes[1]
            assert (second.episode, second.seed, second.next_seed) == (2, 8, 9)
            assert abs(states[-1].position[0] - START_ARM_POSE[0]) < 0.02  # the old command was never followed
            box_after = boxes[-1].pose.position
            assert (box_after.x, box_after.y) != pytest.approx((box_before.x, box_before.y), abs=1e-3)
            assert [o.episode for o in sim.outcomes][:2] == [1, 2]
            task = lambda: [s for s in diags if s.name == "aloha_sim: task"]  # noqa: E731
            assert spin_until(ex, lambda: any("task 2 (transfer_cube, seed 8): not solved (time limit)" in s.message
                                              for s in task()), 10.0), [s.message for s in task()]
            assert all(s.level == DiagnosticStatus.OK for s in task())
            # a late subscriber gets the last outcome (latched)
            late: list = []
            probe.create_subscription(TaskOutcome, "ground_truth/task_outcome", late.append, LATCHED_QOS)
            assert spin_until(ex, lambda: late, 10.0) and late[0].episode >= 2


def test_task_end_with_hold_stops_sim_time_until_set_otherwise():
    """`on_task_end: hold`: sim time stops at the task's end (nothing moves, nothing is published); set to
    `continue` at run time, the scene runs on and no second outcome comes for it."""
    from plan_stack.msg import TaskOutcome
    from plan_stack.ros.qos import LATCHED_QOS

    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_rate_hz", value=0.0), Parameter("real_time_factor", value=0.0),
            Parameter("task_time_limit_s", value=0.5), Parameter("on_task_end", value="hold")])
        probe = Node("probe", context=ctx)
        outcomes: list = []
        probe.create_subscription(TaskOutcome, "ground_truth/task_outcome", outcomes.append, LATCHED_QOS)
        with executor_with(ctx, sim, probe) as ex:
            assert spin_until(ex, lambda: outcomes, 30.0)
            assert (outcomes[0].reason, outcomes[0].next) == ("time_limit", "hold")
            held = sim.sim.time_s
            assert held == pytest.approx(0.5, abs=0.05)
            spin_until(ex, lambda: False, 0.5)
            assert sim.sim.time_s == held  # as fast as possible, yet not a step
            result = sim.set_parameters([Parameter("on_task_end", value="continue")])[0]
            assert result.successful, result.reason
            assert spin_until(ex, lambda: sim.sim.time_s > held + 1.0, 20.0)
            assert len(outcomes) == 1 and sim.episodes.seed == 0  # the same scene, its task said once
