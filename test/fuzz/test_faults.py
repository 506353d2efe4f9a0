"""Faults over DDS with the real nodes: a stalled planner makes the chunker and stitcher stop (the
robot then holds through the bridge's watchdog), never extrapolate.

Node kills and restarts are tested with the bring-up (test/test_bringup.py), clock resets with the
bridges (test/embodiments/test_arm_bridge_clock_reset.py).
"""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from plan_stack.msg import ActionChunk, Observation, PlanFeatures  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.ros.time import duration_to_s, ns_to_stamp, stamp_to_s  # noqa: E402

JOINTS = ["left_waist", "left_shoulder", "left_elbow", "left_forearm_roll", "left_wrist_angle", "left_wrist_rotate",
          "left_gripper", "right_waist", "right_shoulder", "right_elbow", "right_forearm_roll", "right_wrist_angle",
          "right_wrist_rotate", "right_gripper"]
MAX_PLAN_AGE_S = 1.0


def test_stalled_planner_stops_chunks_and_trajectories_instead_of_extrapolating():
    from plan_stack.actions.chunker_node import ChunkerNode
    from plan_stack.trajectory.stitcher_node import StitcherNode

    with ros_context() as ctx:
        chunker = ChunkerNode(context=ctx, parameter_overrides=[
            Parameter("checkpoint", value="aloha/action_head/rtc"), Parameter("joint_names", value=JOINTS),
            Parameter("method", value="training_time"), Parameter("max_plan_age_s", value=MAX_PLAN_AGE_S),
            Parameter("torch_threads", value=1)])
        stitcher = StitcherNode(context=ctx, parameter_overrides=[
            Parameter("joint_names", value=JOINTS), Parameter("initial_state", value="chunk"),
            Parameter("backend", value="ruckig"),
            Parameter("discrete_joints", value=["left_gripper", "right_gripper"])])
        probe = Node("planner_stand_in", context=ctx)
        plans = probe.create_publisher(PlanFeatures, "plan_features", RELIABLE_QOS)
        observations = probe.create_publisher(Observation, "observation", RELIABLE_QOS)
        chunks, trajectories, stale = [], [], []
        probe.create_subscription(ActionChunk, "action_chunk", chunks.append, RELIABLE_QOS)
        probe.create_subscription(JointTrajectory, "trajectory", trajectories.append, RELIABLE_QOS)
        probe.create_subscription(
            DiagnosticArray, "/diagnostics",
            lambda m: stale.extend(s for s in m.status if s.name == "chunker: plan" and s.level != DiagnosticStatus.OK
                                   and "old" in s.message), DIAGNOSTICS_QOS)
        now = lambda: probe.get_clock().now().nanoseconds  # noqa: E731
        with executor_with(ctx, chunker, stitcher, probe, threads=4) as ex:
            assert spin_until(ex, lambda: plans.get_subscription_count() and observations.get_subscription_count()
                              and chunks is not None and len(probe.get_publishers_info_by_topic("trajectory")), 30.0)
            width = chunker.policy.cfg.cond_width
            plan = PlanFeatures(shape=[4, width], data=[0.1] * (4 * width))
            plan.header.stamp = plan.plan_stamp = ns_to_stamp(now())
            plan_s = stamp_to_s(plan.plan_stamp)
            plans.publish(plan)  # the planner's last word: then it stalls
            spin_until(ex, lambda: False, 0.2)

            def observe():
                obs = Observation(joint_state=JointState(name=JOINTS, position=[0.0] * len(JOINTS)))
                obs.header.stamp = ns_to_stamp(now())
                observations.publish(obs)

            deadline = time.monotonic() + MAX_PLAN_AGE_S + 2.0
            while time.monotonic() < deadline:
                observe()
                spin_until(ex, lambda: False, 0.1)
            assert chunks, "no chunk while the plan was fresh"
            assert spin_until(ex, lambda: bool(stale), 10.0), "the chunker did not say the plan went stale"
            n_chunks, n_traj = len(chunks), len(trajectories)
            for _ in range(10):  # the planner stays silent: observations keep coming
                observe()
                spin_until(ex, lambda: False, 0.1)
            assert len(chunks) == n_chunks, "chunks from a stale plan"
            assert len(trajectories) == n_traj, "trajectories without new chunks"
            assert all(stamp_to_s(c.header.stamp) - plan_s <= MAX_PLAN_AGE_S + 1e-6 for c in chunks)
            assert trajectories, "the stitcher stitched nothing while chunks came"
            # the last trajectory ends where the last chunk ends: nothing beyond it is invented
            last = trajectories[-1]
            end_s = stamp_to_s(last.header.stamp) + duration_to_s(last.points[-1].time_from_start)
            chunk_end = max(stamp_to_s(c.header.stamp) + c.dt * c.horizon for c in chunks)
            assert end_s <= chunk_end + 0.05
