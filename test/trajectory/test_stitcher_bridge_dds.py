"""stitcher + the real aloha_bridge over DDS: the stitcher stitches onto what the bridge executes.

The bridge reports every command it puts in force on `active_trajectory` (the curve its controllers follow) and
its command state on `bridge_state` (whether it follows commands, the last one it refused); with
`initial_state: bridge` the stitcher starts from the report (the bridge's hold at start-up), after the bridge
refused a trajectory stitches the next one onto the trajectory the bridge still executes, so the bridge accepts
it with no position jump, and publishes nothing while a protective stop refuses every command.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode  # noqa: E402
from plan_stack.embodiments.aloha.model import JOINT_NAMES, START_ARM_POSE  # noqa: E402
from plan_stack.msg import ActionChunk  # noqa: E402
from plan_stack.robot_config import load_robot_config  # noqa: E402
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.ros.time import stamp_to_ns  # noqa: E402
from plan_stack.ros.trajectory import trajectory_from_msg  # noqa: E402
from plan_stack.trajectory.stitcher_node import StitcherNode  # noqa: E402

H, DT = 50, 0.02
WAIST = JOINT_NAMES.index("left_waist")
FINGER = 0.03  # metres: gripper 0.30 in stack units


class _Peer(Node):
    """Plays the robot driver (joint_states in robot units) and the chunker; records both nodes' outputs."""

    def __init__(self, **kw):
        super().__init__("peer", **kw)
        self.chunks = self.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        self.states = self.create_publisher(JointState, "joint_states", SENSOR_QOS)
        self.trajs: list[JointTrajectory] = []
        self.active: list[JointTrajectory] = []
        self.diags: list = []
        self.create_subscription(JointTrajectory, "trajectory", self.trajs.append, RELIABLE_QOS)
        self.create_subscription(JointTrajectory, "active_trajectory", self.active.append, LATCHED_QOS)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diags.extend(m.status), 50)

    def state(self, q):
        msg = JointState(name=list(JOINT_NAMES), position=list(map(float, q)))
        msg.header.stamp = self.get_clock().now().to_msg()
        self.states.publish(msg)

    def chunk(self, positions: np.ndarray) -> ActionChunk:
        msg = ActionChunk(joint_names=list(JOINT_NAMES), dt=DT, horizon=len(positions),
                          positions=positions.ravel().tolist())
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def executing(self, msg: JointTrajectory) -> bool:
        """True when the bridge's latest active_trajectory is `msg` (the bridge accepted it)."""
        return bool(self.active) and abs(stamp_to_ns(self.active[-1].header.stamp)
                                         - stamp_to_ns(msg.header.stamp)) < 1000


def _params(name: str, **override) -> list[Parameter]:
    spec = next(s for s in load_robot_config("aloha").nodes if s.name == name)
    params = {k: v for k, v in spec.parameters.items() if k != "use_sim_time"}
    params.update(override)
    return [Parameter(k, value=v) for k, v in params.items()]


def _first_point_s(msg: JointTrajectory, epoch_ns: int) -> float:
    return (stamp_to_ns(msg.header.stamp) - epoch_ns + msg.points[0].time_from_start.sec * 1_000_000_000
            + msg.points[0].time_from_start.nanosec) * 1e-9


def test_after_a_refused_trajectory_the_next_starts_where_the_bridge_holds():
    cfg = next(s for s in load_robot_config("aloha").nodes if s.name == "stitcher").parameters
    with ros_context() as ctx:
        # The stitcher's arm limits, and the bridge limits it checks its trajectories against, are made looser
        # than the bridge's so that it can emit a trajectory the bridge refuses (in the shipped config they are
        # 0.9x / 0.8x the bridge's, and the bridge's own).
        stitcher = StitcherNode(context=ctx, parameter_overrides=_params(
            "stitcher", initial_state="bridge", diagnostics_period_s=0.2,
            v_max=[10 * v for v in cfg["v_max"]], a_max=[10 * a for a in cfg["a_max"]],
            j_max=[10 * j for j in cfg["j_max"]], bridge_v_max=[10 * v for v in cfg["bridge_v_max"]],
            bridge_a_max=[10 * a for a in cfg["bridge_a_max"]]))
        bridge = AlohaBridgeNode(context=ctx, parameter_overrides=_params("aloha_bridge", watchdog_timeout=5.0))
        peer = _Peer(context=ctx)
        q_robot = np.array([*START_ARM_POSE, FINGER, *START_ARM_POSE, FINGER])
        with executor_with(ctx, stitcher, bridge, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and peer.states.get_subscription_count() >= 1
                              and peer.count_subscribers("trajectory") >= 1, 20.0)
            # Start-up: the bridge holds the first measured state and says so; the stitcher takes it.
            assert spin_until(ex, lambda: (peer.state(q_robot),
                                           stitcher.start.executing is not None and peer.active)[1], 20.0)
            hold = trajectory_from_msg(peer.active[-1]).positions[0]
            assert hold[6] == pytest.approx((FINGER - 0.01844) * 25.278, abs=1e-3)  # stack units

            ramp = np.linspace(0.0, 1.0, H)[:, None]
            slow = hold + ramp * np.eye(len(JOINT_NAMES))[WAIST] * 0.1
            peer.chunks.publish(peer.chunk(slow))
            assert spin_until(ex, lambda: len(peer.trajs) == 1 and peer.executing(peer.trajs[0]), 20.0)
            first = peer.trajs[0]
            np.testing.assert_allclose(first.points[0].positions, hold, atol=1e-9)  # from the hold, at rest

            # Too fast for the bridge: refused, the bridge keeps executing the first trajectory.
            fast = hold + np.minimum(ramp * 8.0, 1.5) * np.eye(len(JOINT_NAMES))[WAIST]
            peer.chunks.publish(peer.chunk(fast))
            assert spin_until(ex, lambda: len(peer.trajs) == 2, 20.0)
            assert spin_until(ex, lambda: any("rejected" in s.message for s in peer.diags
                                              if s.name == "aloha_bridge: commands"), 20.0)
            assert peer.executing(first)

            # The bridge names the refused trajectory on bridge_state: the stitcher knows at once (no waiting for
            # the acknowledgement timeout), and the next chunk is stitched onto what the bridge executes (the
            # first trajectory), not onto the refused one, and accepted.
            assert spin_until(ex, lambda: stitcher.start.refused is not None, 20.0)
            assert "left_waist" in stitcher.start.refused and "exceeds the limit" in stitcher.start.refused
            peer.chunks.publish(peer.chunk(slow + 0.02 * ramp * np.eye(len(JOINT_NAMES))[WAIST]))
            assert spin_until(ex, lambda: len(peer.trajs) == 3 and peer.executing(peer.trajs[2]), 20.0)
            third = peer.trajs[2]
            assert stitcher.counts["reanchored"] == 1
            assert spin_until(ex, lambda: any("the bridge refused the last trajectory" in s.message
                                              for s in peer.diags), 10.0)
            epoch_ns = stamp_to_ns(first.header.stamp) // 1_000_000_000 * 1_000_000_000  # float seconds resolve ns
            t_first = _first_point_s(third, epoch_ns)
            # the bridge's own account of the first trajectory (re-stamped by it: float seconds, ns rounding)
            echo = next(m for m in reversed(peer.active) if abs(stamp_to_ns(m.header.stamp)
                                                                 - stamp_to_ns(first.header.stamp)) < 1000)
            q, v, _ = trajectory_from_msg(echo, epoch_ns).sample(np.array([t_first]))
            np.testing.assert_allclose(third.points[0].positions, q[0], atol=1e-9)  # no position jump
            np.testing.assert_allclose(third.points[0].velocities, v[0], atol=1e-9)
            assert spin_until(ex, lambda: any("stitching onto what the bridge executes" in s.message
                                              for s in peer.diags), 10.0)


def test_a_protective_stop_pauses_the_stitcher_until_it_is_reset():
    """The bridge stops the arms (a joint measured 0.5 rad from its reference: a collision) and refuses every
    command until ~/reset_protective_stop. It says so on `bridge_state`; the stitcher publishes nothing while the
    stop holds (each chunk dropped, counted, a `bridge` WARN), so the bridge refuses nothing of it (it refused
    every trajectory of the stream before), and once the stop is reset the next chunk becomes a trajectory from
    the hold the bridge put in force, which the bridge accepts."""
    from std_srvs.srv import Trigger

    from plan_stack.msg import BridgeState

    with ros_context() as ctx:
        stitcher = StitcherNode(context=ctx, parameter_overrides=_params("stitcher", diagnostics_period_s=0.2))
        bridge = AlohaBridgeNode(context=ctx, parameter_overrides=_params("aloha_bridge", watchdog_timeout=5.0))
        peer = _Peer(context=ctx)
        states: list[BridgeState] = []
        peer.create_subscription(BridgeState, "bridge_state", states.append, LATCHED_QOS)
        reset = peer.create_client(Trigger, "aloha_bridge/reset_protective_stop")
        q_robot = np.array([*START_ARM_POSE, FINGER, *START_ARM_POSE, FINGER])
        ramp = np.linspace(0.0, 1.0, H)[:, None] * np.eye(len(JOINT_NAMES))[WAIST] * 0.05
        with executor_with(ctx, stitcher, bridge, peer) as ex:
            assert spin_until(ex, lambda: peer.chunks.get_subscription_count() > 0
                              and peer.states.get_subscription_count() >= 1
                              and peer.count_subscribers("trajectory") >= 1 and reset.service_is_ready(), 20.0)
            assert spin_until(ex, lambda: (peer.state(q_robot), stitcher.start.executing is not None and peer.active
                                           and states and states[-1].state == BridgeState.READY)[1], 20.0)
            hold = trajectory_from_msg(peer.active[-1]).positions[0]
            peer.chunks.publish(peer.chunk(hold + ramp))
            assert spin_until(ex, lambda: len(peer.trajs) == 1 and peer.executing(peer.trajs[0]), 20.0)

            # Pushed back 0.5 rad on the left shoulder: a collision. The bridge holds the arms where measured.
            pushed = q_robot.copy()
            pushed[1] -= 0.5
            assert spin_until(ex, lambda: (peer.state(pushed), bridge.bridge.protective_stop is not None)[1], 20.0)
            assert spin_until(ex, lambda: states[-1].state == BridgeState.PROTECTIVE_STOP
                              and stitcher.start.paused is not None, 20.0)
            assert "protective stop" in states[-1].reason and "reset_protective_stop" in states[-1].reason
            refused = states[-1].refused
            published = len(peer.trajs)
            for k in range(1, 6):  # the stream goes on: dropped, not published
                peer.state(pushed)
                peer.chunks.publish(peer.chunk(hold + ramp))
                assert spin_until(ex, lambda k=k: stitcher.counts["paused"] == k, 20.0)
            assert len(peer.trajs) == published and stitcher.counts["published"] == published
            assert spin_until(ex, lambda: any(s.name == "stitcher: bridge" and "paused" in s.message
                                              and s.level == b"\x01" for s in peer.diags), 10.0)
            spin_until(ex, lambda: False, 0.3)
            assert states[-1].refused == refused  # nothing of the stitcher's reached the bridge to be refused

            # Cleared by an operator: the next chunk starts from the bridge's hold and is accepted.
            fut = reset.call_async(Trigger.Request())
            assert spin_until(ex, fut.done, 10.0) and fut.result().success
            assert spin_until(ex, lambda: states[-1].state == BridgeState.READY and stitcher.start.paused is None,
                              20.0)
            stop_hold = trajectory_from_msg(peer.active[-1]).positions[0]
            peer.chunks.publish(peer.chunk(stop_hold + ramp))
            assert spin_until(ex, lambda: len(peer.trajs) == published + 1
                              and peer.executing(peer.trajs[-1]), 20.0)
            np.testing.assert_allclose(peer.trajs[-1].points[0].positions, stop_hold, atol=1e-9)
            assert states[-1].refused == refused
            assert spin_until(ex, lambda: any("follows commands again" in s.message for s in peer.diags), 10.0)
