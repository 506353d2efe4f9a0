"""stitcher node over real DDS: chunks in from a publisher node, JointTrajectory out to a subscriber node."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from plan_stack.msg import ActionChunk  # noqa: E402
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.ros.time import s_to_stamp  # noqa: E402
from plan_stack.trajectory.stitcher_node import StitcherNode  # noqa: E402

NAMES = ["a", "b", "c", "grip"]
H, DT = 200, 0.02  # 4 s: the first trajectory is still running when the later chunks arrive


class _Peer(Node):
    """Plays chunker + robot driver (publishes) and bridge (subscribes)."""

    def __init__(self, **kw):
        super().__init__("peer", **kw)
        self.chunks = self.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        self.states = self.create_publisher(JointState, "joint_states", SENSOR_QOS)
        self.trajs: list[JointTrajectory] = []
        self.diags: list = []
        self.create_subscription(JointTrajectory, "trajectory", self.trajs.append, RELIABLE_QOS)
        self.create_subscription(DiagnosticArray, "/diagnostics",
                                 lambda m: self.diags.extend(m.status), 10)

    def chunk(self, positions: np.ndarray, names=NAMES, dt=DT, stamp_offset_s=0.0) -> ActionChunk:
        msg = ActionChunk()
        now = self.get_clock().now().nanoseconds + int(stamp_offset_s * 1e9)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now, 1_000_000_000)
        msg.joint_names = list(names)
        msg.dt = dt
        msg.horizon = positions.shape[0]
        msg.positions = positions.ravel().tolist()
        return msg

    def chunk_at(self, t_s: float, positions: np.ndarray) -> ActionChunk:
        msg = self.chunk(positions)
        msg.header.stamp = s_to_stamp(t_s)
        return msg

    def state(self, q):
        msg = JointState(name=NAMES, position=list(map(float, q)), velocity=[0.0] * len(NAMES))
        msg.header.stamp = self.get_clock().now().to_msg()
        self.states.publish(msg)

    def state_at(self, t_s: float, q) -> None:
        msg = JointState(name=NAMES, position=list(map(float, q)), velocity=[0.0] * len(NAMES))
        msg.header.stamp = s_to_stamp(t_s)
        self.states.publish(msg)


def _set_clock(ex, node, clock_pub, t_s: float) -> bool:
    """Publish /clock = t_s and wait until the node's clock reads it."""
    from builtin_interfaces.msg import Time
    from rosgraph_msgs.msg import Clock

    clock_pub.publish(Clock(clock=Time(sec=int(t_s), nanosec=int(round((t_s % 1) * 1e9)))))
    return spin_until(ex, lambda: abs(node.get_clock().now().nanoseconds * 1e-9 - t_s) < 1e-6, 15.0)


def _reference():
    t = np.arange(H) * DT
    ref = np.stack([0.1 * np.sin(2 * t), 0.05 * t, -0.2 + 0.0 * t, (t > 0.2).astype(float)], axis=1)
    return ref


def test_chunks_become_trajectories_and_bad_chunks_do_not():
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    with ros_context() as ctx:
        node = StitcherNode(context=ctx, parameter_overrides=[
            Parameter("joint_names", value=NAMES),
            Parameter("discrete_joints", value=["grip"]),
            Parameter("v_max", value=[2.0, 2.0, 2.0, 1.0]),
            Parameter("a_max", value=10.0),
            Parameter("j_max", value=100.0),
            Parameter("diagnostics_period_s", value=0.2),
            # the measured state stays at the start while the trajectory runs on: re-anchoring (tested below)
            # would depend on how late a loaded machine handles the later chunks
            Parameter("reanchor_tolerance", value=0.0),
        ])
        peer = _Peer(context=ctx)
        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and peer.count_publishers("trajectory") > 0
                              and peer.states.get_subscription_count() > 0, 20.0)
            ref = _reference()
            # No measured state yet: the chunk is refused, nothing is commanded.
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: node.counts["rejected"] == 1, 15.0)
            assert any("no_state" in s.message for s in peer.diags) or spin_until(
                ex, lambda: any("no_state" in s.message for s in peer.diags), 10.0)

            # A joint state lacking a joint is reported in diagnostics, never used as the measured state.
            lacking = JointState(name=NAMES[:3], position=[0.0] * 3)
            assert spin_until(ex, lambda: (peer.states.publish(lacking), any(
                s.name.endswith("joint_states") and "rejected: missing joints ['grip']" in s.message
                for s in peer.diags))[1], 10.0)
            assert node.start.measured is None and node.counts["bad_joint_states"] >= 1

            assert spin_until(ex, lambda: (peer.state(ref[0]), node.start.measured is not None)[1], 15.0)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)
            first = peer.trajs[0]
            assert first.joint_names == NAMES
            np.testing.assert_allclose(first.points[0].positions, ref[0], atol=1e-12)
            assert first.points[1].time_from_start.nanosec == int(DT * 1e9)
            assert all(len(p.accelerations) == len(NAMES) for p in first.points)

            # Malformed chunks: NaN, wrong joints, dt <= 0, too short -> diagnostics, no trajectory.
            bad_ref = ref.copy()
            bad_ref[3, 1] = np.nan
            bad = [peer.chunk(bad_ref), peer.chunk(ref[:, :3], names=NAMES[:3]),
                   peer.chunk(ref, dt=0.0), peer.chunk(ref[:2]),
                   peer.chunk(ref, stamp_offset_s=-10.0)]
            for msg in bad:
                peer.chunks.publish(msg)
            assert spin_until(ex, lambda: node.counts["rejected"] == 1 + len(bad), 15.0)
            spin_until(ex, lambda: False, 0.3)
            assert len(peer.trajs) == 1
            reasons = {s.message.split(":")[1].strip() for s in peer.diags if "rejected chunk" in s.message}
            assert {"non_finite", "joint_names", "dt", "horizon", "stale"} <= reasons

            # A later chunk is stitched onto the active one: it starts at the active state.
            ref2 = ref + 0.01
            peer.chunks.publish(peer.chunk(ref2))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 15.0)
            active_before = first
            second = peer.trajs[1]
            t_first = active_before.header.stamp.sec + active_before.header.stamp.nanosec * 1e-9
            t_second = second.header.stamp.sec + second.header.stamp.nanosec * 1e-9
            k = round((t_second - t_first) / DT)
            assert k >= 1 and abs((t_second - t_first) / DT - k) < 1e-4
            np.testing.assert_allclose(second.points[0].positions, active_before.points[k].positions, atol=1e-12)
            np.testing.assert_allclose(second.points[0].velocities[:3], active_before.points[k].velocities[:3],
                                       atol=1e-12)
            assert node.counts["published"] == 2


def test_trajectory_is_sent_to_the_bridge_action():
    from rclpy.action import ActionServer

    from plan_stack.action import ExecuteTrajectory

    with ros_context() as ctx:
        node = StitcherNode(context=ctx, parameter_overrides=[
            Parameter("joint_names", value=NAMES),
            Parameter("discrete_joints", value=["grip"]),
            Parameter("initial_state", value="chunk"),
            Parameter("execute_action", value="/bridge/execute_trajectory"),
        ])
        peer = _Peer(context=ctx)
        goals = []

        def execute(goal_handle):
            goals.append(goal_handle.request.trajectory)
            goal_handle.succeed()
            return ExecuteTrajectory.Result(error_code=0)

        server = ActionServer(peer, ExecuteTrajectory, "/bridge/execute_trajectory", execute)
        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and node.count_publishers("action_chunk") > 0, 20.0)
            ref = _reference()
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(goals) == 1 and len(peer.trajs) == 1, 20.0)
            assert goals[0].joint_names == NAMES
            assert len(goals[0].points) == len(peer.trajs[0].points)
            # initial_state=chunk: starts at the chunk's first sample, at rest.
            np.testing.assert_allclose(goals[0].points[0].positions, ref[0], atol=1e-12)
            np.testing.assert_array_equal(goals[0].points[0].velocities[:3], [0.0, 0.0, 0.0])
        server.destroy()


def _node(ctx, **params):
    # generous state timeout: a loaded machine may take a while between a state and the next chunk
    base = dict(joint_names=NAMES, discrete_joints=["grip"], diagnostics_period_s=0.2, joint_state_timeout_s=5.0)
    base.update(params)
    return StitcherNode(context=ctx, parameter_overrides=[
        Parameter(k, value=v) for k, v in base.items() if v is not None])  # None: the default


def _measuring_reference_start(ex, node, peer) -> np.ndarray:
    """Wait until the peer and the node see each other and the node has measured the reference's start
    (the peer publishing it meanwhile); returns the reference."""
    assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                      and peer.states.get_subscription_count() > 0, 20.0)
    ref = _reference()
    assert spin_until(ex, lambda: (peer.state(ref[0]), node.start.measured is not None)[1], 15.0)
    return ref


def test_measured_joints_far_from_the_active_trajectory_re_anchor_the_next_one():
    with ros_context() as ctx:
        # The tolerance is above the reference's whole excursion from its start (<= 0.2 rad), so a state held at
        # the start stays "close" however late a loaded machine processes the next chunk; 0.5 rad is far.
        node = _node(ctx, reanchor_tolerance=0.3)
        peer = _Peer(context=ctx)
        with executor_with(ctx, node, peer) as ex:
            ref = _measuring_reference_start(ex, node, peer)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)
            # Close to the trajectory: stitched onto it, no re-anchoring.
            assert spin_until(ex, lambda: (peer.state(ref[0]), np.allclose(node.start.measured[1], ref[0]))[1], 15.0)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 15.0)
            assert node.counts["reanchored"] == 0
            # The robot stayed 0.5 rad away (say the bridge refused every trajectory): the next one starts
            # at the measured state instead of stitching onto a trajectory nobody executes.
            far = ref[0] + np.array([0.5, 0.0, 0.0, 0.0])
            assert spin_until(ex, lambda: (peer.state(far), np.allclose(node.start.measured[1], far))[1], 15.0)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 3, 15.0)
            assert node.counts["reanchored"] == 1
            np.testing.assert_allclose(peer.trajs[2].points[0].positions[:3], far[:3], atol=1e-12)
            assert spin_until(ex, lambda: any("re-anchored" in s.message for s in peer.diags), 10.0)


def test_a_goal_the_bridge_aborts_re_anchors_the_next_trajectory():
    from rclpy.action import ActionServer

    from plan_stack.action import ExecuteTrajectory

    with ros_context() as ctx:
        node = _node(ctx, execute_action="/bridge/execute_trajectory", reanchor_tolerance=0.0)
        peer = _Peer(context=ctx)

        def execute(goal_handle):
            goal_handle.abort()
            return ExecuteTrajectory.Result(error_code=-1, error_string="velocities: 57 rad/s above 3.14")

        server = ActionServer(peer, ExecuteTrajectory, "/bridge/execute_trajectory", execute)
        with executor_with(ctx, node, peer) as ex:
            ref = _measuring_reference_start(ex, node, peer)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: node.start.refused is not None, 20.0)
            assert spin_until(ex, lambda: (peer.state(ref[0]), np.allclose(node.start.measured[1], ref[0]))[1], 15.0)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 15.0)
            assert node.counts["reanchored"] == 1
            assert spin_until(ex, lambda: any("refused" in s.message for s in peer.diags), 10.0)
        server.destroy()


def test_clock_jumping_back_drops_the_active_trajectory_and_measured_state():
    """Simulator reset: /clock goes from 50 s back to 1 s. The trajectory and joint state from before are
    dropped (WARN `clock`, counted), a chunk stamped before the reset is rejected, and the next chunk starts
    from joint_states measured after the reset."""
    from rosgraph_msgs.msg import Clock

    from plan_stack.ros.qos import LATCHED_QOS

    with ros_context() as ctx:
        node = _node(ctx, use_sim_time=True)
        peer = _Peer(context=ctx)
        clock_pub = peer.create_publisher(Clock, "/clock", LATCHED_QOS)
        ref = _reference()[:50]

        def chunk_at(t_s, positions=ref):
            return peer.chunk_at(t_s, positions)

        def state_at(t_s, q):
            peer.state_at(t_s, q)
            return node.start.measured is not None and np.allclose(node.start.measured[1], q)

        def clock(t_s):
            return _set_clock(ex, node, clock_pub, t_s)

        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and peer.states.get_subscription_count() > 0
                              and peer.count_subscribers("/clock") >= 1, 20.0)
            assert clock(50.0)
            assert spin_until(ex, lambda: state_at(50.0, ref[0]), 15.0)
            peer.chunks.publish(chunk_at(50.0))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)
            assert node.stitcher.active is not None

            assert clock(1.0)  # the simulator was reset
            assert spin_until(ex, lambda: any(s.name == "stitcher: clock" and "jumped back" in s.message
                                              for s in peer.diags), 15.0)
            assert node.counts["clock_resets"] == 1
            assert node.stitcher.active is None and node.start.measured is None
            peer.chunks.publish(chunk_at(50.02))  # in flight from before the reset
            assert spin_until(ex, lambda: node.counts["rejected"] == 1, 15.0)
            assert any("future" in s.message for s in peer.diags if "rejected chunk" in s.message) or spin_until(
                ex, lambda: any("future" in s.message for s in peer.diags if "rejected chunk" in s.message), 10.0)
            # No measured state from the new world yet: refused, nothing from the old one is used.
            peer.chunks.publish(chunk_at(1.0))
            assert spin_until(ex, lambda: node.counts["rejected"] == 2, 15.0)
            assert len(peer.trajs) == 1

            moved = ref[0] + np.array([0.3, -0.2, 0.1, 0.0])  # where the reset left the robot
            assert spin_until(ex, lambda: state_at(1.0, moved), 15.0)
            peer.chunks.publish(chunk_at(1.0, ref + (moved - ref[0])))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 15.0)
            after = peer.trajs[1]
            assert after.header.stamp.sec == 1
            np.testing.assert_allclose(after.points[0].positions[:3], moved[:3], atol=1e-12)


def test_gripper_samples_past_their_range_saturate_and_arm_samples_are_rejected():
    """A gripper commanded 0.18 past fully open is clamped and counted (`clamped` in /diagnostics);
    an arm joint as far out drops the chunk with a WARN."""
    from diagnostic_msgs.msg import DiagnosticStatus

    with ros_context() as ctx:
        node = _node(ctx, discrete_joints=None, v_max=[2.0, 2.0, 2.0, 5.0], q_min=[-1.0, -1.0, -1.0, 0.0],
                     q_max=[1.0, 1.0, 1.0, 1.0], saturate_joints=["grip"])
        peer = _Peer(context=ctx)
        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and peer.states.get_subscription_count() > 0, 20.0)
            ref = _reference()
            ref[:, 3] = 0.5 + 0.68 * np.sin(2 * np.pi * np.arange(H) * DT / 1.2)  # 0.18 beyond [0, 1]
            beyond = int(np.count_nonzero((ref[:, 3] > 1.0) | (ref[:, 3] < 0.0)))
            assert spin_until(ex, lambda: (peer.state(ref[0]), node.start.measured is not None)[1], 15.0)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)
            grip = [p.positions[3] for p in peer.trajs[0].points]
            assert min(grip) >= 0.0 and max(grip) <= 1.0
            assert node.counts["clamped_samples"] > 0 and node.counts["clamped_samples"] <= beyond
            assert spin_until(ex, lambda: any(
                s.name == "stitcher: solve" and any(kv.key == "clamped" and int(kv.value) > 0 for kv in s.values)
                for s in peer.diags), 10.0)

            arm = ref.copy()
            arm[:, 3] = 0.5
            arm[:, 1] = 1.18
            peer.chunks.publish(peer.chunk(arm))
            assert spin_until(ex, lambda: node.counts["rejected"] == 1, 15.0)
            assert spin_until(ex, lambda: any(
                s.level == DiagnosticStatus.WARN and "position_limits" in s.message and " b " in s.message
                for s in peer.diags), 10.0)
            assert len(peer.trajs) == 1


def test_a_bridge_mode_stitcher_starts_only_from_the_bridge_report_at_start_up_and_after_a_clock_reset():
    """initial_state bridge: at start-up and after a simulator reset the bridge has no state until its first
    joint state, so a trajectory started from joint_states that reached the stitcher first would be refused
    (seen in closed-loop runs: "no joint_states received yet"). The stitcher rejects chunks, saying why,
    until the bridge reports, then starts from that report."""
    from rosgraph_msgs.msg import Clock
    from trajectory_msgs.msg import JointTrajectoryPoint

    from plan_stack.ros.qos import LATCHED_QOS

    with ros_context() as ctx:
        node = _node(ctx, use_sim_time=True, initial_state="bridge")
        peer = _Peer(context=ctx)
        clock_pub = peer.create_publisher(Clock, "/clock", LATCHED_QOS)
        active = peer.create_publisher(JointTrajectory, "active_trajectory", LATCHED_QOS)
        ref = _reference()[:50]

        def chunk_at(t_s, positions=ref):
            return peer.chunk_at(t_s, positions)

        def hold_at(t_s, q):
            msg = JointTrajectory(joint_names=NAMES, points=[JointTrajectoryPoint(positions=list(map(float, q)))])
            msg.header.stamp = s_to_stamp(t_s)
            active.publish(msg)

        def clock(t_s):
            return _set_clock(ex, node, clock_pub, t_s)

        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and peer.states.get_subscription_count() > 0
                              and active.get_subscription_count() > 0
                              and peer.count_subscribers("/clock") >= 1, 20.0)
            assert clock(50.0)
            assert spin_until(ex, lambda: peer.state_at(50.0, ref[0]) or node.start.measured is not None, 15.0)
            peer.chunks.publish(chunk_at(50.0))  # joint_states, no report yet: refused with the reason
            assert spin_until(ex, lambda: node.counts["rejected"] == 1, 15.0)
            assert spin_until(ex, lambda: any("waiting for the bridge" in s.message for s in peer.diags), 10.0)
            assert not peer.trajs
            hold_at(50.0, ref[0])
            assert spin_until(ex, lambda: node.start.executing is not None, 15.0)
            peer.chunks.publish(chunk_at(50.0))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)

            assert clock(1.0)  # the simulator was reset
            assert spin_until(ex, lambda: node.counts["clock_resets"] == 1, 15.0)
            moved = ref[0] + np.array([0.3, -0.2, 0.1, 0.0])  # where the reset left the robot
            assert spin_until(ex, lambda: peer.state_at(1.0, moved) or node.start.measured is not None, 15.0)
            # joint_states are here, the bridge has not reported: refused with the reason, no trajectory
            peer.chunks.publish(chunk_at(1.0, ref + (moved - ref[0])))
            assert spin_until(ex, lambda: node.counts["rejected"] == 2, 15.0)
            assert len(peer.trajs) == 1

            hold_at(1.0, moved)  # the bridge's first joint state after the reset: its hold
            assert spin_until(ex, lambda: node.start.executing is not None, 15.0)
            peer.chunks.publish(chunk_at(1.0, ref + (moved - ref[0])))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 15.0)
            assert peer.trajs[1].header.stamp.sec == 1
            np.testing.assert_allclose(peer.trajs[1].points[0].positions, moved, atol=1e-12)
            assert node.counts["rejected"] == 2


def test_a_malformed_active_trajectory_is_never_stitched_onto():
    from trajectory_msgs.msg import JointTrajectoryPoint

    from plan_stack.ros.qos import LATCHED_QOS

    with ros_context() as ctx:
        node = _node(ctx, initial_state="bridge")
        peer = _Peer(context=ctx)
        pub = peer.create_publisher(JointTrajectory, "active_trajectory", LATCHED_QOS)
        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: pub.get_subscription_count() > 0, 20.0)
            bad = [JointTrajectory(joint_names=NAMES[:3], points=[JointTrajectoryPoint(positions=[0.0] * 3)]),
                   JointTrajectory(joint_names=NAMES, points=[JointTrajectoryPoint(positions=[0.0, np.nan, 0.0, 0.0])])]
            for k, msg in enumerate(bad, 1):
                msg.header.stamp = peer.get_clock().now().to_msg()
                pub.publish(msg)
                assert spin_until(ex, lambda k=k: node.counts["bad_active_trajectories"] >= k, 15.0)
            assert spin_until(ex, lambda: node.counts["bad_active_trajectories"] == 2, 15.0)
            assert node.start.executing is None
            # nothing reported and no joint_states: a chunk is refused, never turned into motion
            peer.chunks.publish(peer.chunk(_reference()))
            assert spin_until(ex, lambda: node.counts["rejected"] == 1, 15.0)
            assert not peer.trajs
            good = JointTrajectory(joint_names=NAMES, points=[JointTrajectoryPoint(positions=[0.1, 0.0, -0.2, 0.0])])
            good.header.stamp = peer.get_clock().now().to_msg()
            pub.publish(good)
            assert spin_until(ex, lambda: node.start.executing is not None, 15.0)
            peer.chunks.publish(peer.chunk(_reference()))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)
            np.testing.assert_allclose(peer.trajs[0].points[0].positions, [0.1, 0.0, -0.2, 0.0], atol=1e-12)


def test_after_the_bridge_reported_ours_a_later_hold_is_stitched_onto_without_a_refusal():
    """The bridge echoes our trajectory (accepted), later puts a hold in force (its watchdog after the end, a
    cancel's stop): the next trajectory starts from that hold and nothing counts as refused."""
    from trajectory_msgs.msg import JointTrajectoryPoint

    from plan_stack.ros.qos import LATCHED_QOS

    with ros_context() as ctx:
        node = _node(ctx, initial_state="bridge")
        peer = _Peer(context=ctx)
        pub = peer.create_publisher(JointTrajectory, "active_trajectory", LATCHED_QOS)

        def hold(q):
            msg = JointTrajectory(joint_names=NAMES, points=[JointTrajectoryPoint(positions=list(q))])
            msg.header.stamp = peer.get_clock().now().to_msg()
            pub.publish(msg)

        with executor_with(ctx, node, peer) as ex:
            assert spin_until(ex, lambda: pub.get_subscription_count() > 0 and peer.chunks.get_subscription_count()
                              > 0, 20.0)
            ref = _reference()
            hold(ref[0])
            assert spin_until(ex, lambda: node.start.executing is not None, 15.0)
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 1, 15.0)
            pub.publish(peer.trajs[0])  # the bridge reports ours: accepted
            assert spin_until(ex, lambda: node.start.acked, 15.0)
            stop_at = ref[0] + np.array([0.05, -0.02, 0.01, 0.0])
            hold(stop_at)  # then something else is in force
            assert spin_until(ex, lambda: not node.start.executing_ours, 15.0)
            spin_until(ex, lambda: False, 0.3)  # beyond bridge_ack_timeout_s
            peer.chunks.publish(peer.chunk(ref))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 15.0)
            np.testing.assert_allclose(peer.trajs[1].points[0].positions, stop_at, atol=1e-12)
            assert node.counts["reanchored"] == 0


def test_ok_outcomes_are_reported_once_a_period_and_the_latest_always_arrives():
    """A burst of chunks faster than diagnostics_period_s: OK outcomes are not built per chunk, but the counts of
    the last one reach /diagnostics within a period (the flush timer), with no chunk after it."""
    with ros_context() as ctx:
        node = _node(ctx, diagnostics_period_s=0.5, reanchor_tolerance=0.0)
        peer = _Peer(context=ctx)
        with executor_with(ctx, node, peer) as ex:
            ref = _measuring_reference_start(ex, node, peer)
            for k in range(1, 4):
                peer.chunks.publish(peer.chunk(ref))
                assert spin_until(ex, lambda k=k: len(peer.trajs) == k, 15.0)
            assert node.counts["published"] == 3

            def published(s) -> int:
                return next((int(kv.value) for kv in s.values if kv.key == "published"), -1)

            assert spin_until(ex, lambda: any(s.name == "stitcher: solve" and published(s) == 3 for s in peer.diags),
                              10.0)
