"""aloha_bridge + aloha_sim over real DDS, on sim time (short motions, no rendering; the protective stop last)."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rcl_interfaces.msg import Log  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from plan_stack.action import ExecuteTrajectory  # noqa: E402
from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode  # noqa: E402
from plan_stack.embodiments.aloha.model import JOINT_NAMES, START_ARM_POSE, gripper_from_joint  # noqa: E402
from plan_stack.embodiments.aloha.sim_node import AlohaSimNode  # noqa: E402
from plan_stack.ros.diagnostics import ERROR, OK, WARN  # noqa: E402
from plan_stack.ros.qos import SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

WAIST = JOINT_NAMES.index("left_waist")
R_ELBOW = JOINT_NAMES.index("right_elbow")
R_SHOULDER = JOINT_NAMES.index("right_shoulder")
ARMS = np.array([not n.endswith("_gripper") for n in JOINT_NAMES])
START = np.array([*START_ARM_POSE, 0.0, *START_ARM_POSE, 0.0])
WATCHDOG_S = 0.4


class Probe(Node):
    """Test client: joint_states history (sim time, stack units), diagnostics, action client."""

    def __init__(self, context) -> None:
        super().__init__("probe", context=context, parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.states: list[tuple[float, np.ndarray]] = []
        self.diag: list = []
        self.create_subscription(JointState, "joint_states", self._js, SENSOR_QOS)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diag.extend(m.status), 50)
        self.logs: list[str] = []  # the bridge's console lines, as /rosout carries them
        self.create_subscription(Log, "/rosout", lambda m: self.logs.append(m.msg) if m.name == "aloha_bridge"
                                 else None, 100)
        self.client = ActionClient(self, ExecuteTrajectory, "execute_trajectory")
        self.stream = self.create_publisher(JointTrajectory, "trajectory", 10)
        self.reset = self.create_client(Trigger, "aloha_bridge/reset_protective_stop")

    def _js(self, msg: JointState) -> None:
        q = np.array(msg.position)
        q[[6, 13]] = gripper_from_joint(q[[6, 13]])
        self.states.append((msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, q))

    @property
    def q(self) -> np.ndarray:
        return self.states[-1][1]

    def now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def refused(self) -> int:
        """The bridge's own count of refused commands (diagnostics `commands`, value `refused`)."""
        return max((int(kv.value) for s in self.diag if s.name == "aloha_bridge: commands"
                    for kv in s.values if kv.key == "refused"), default=0)

    def stop_reports(self, level) -> list:
        return [s for s in self.diag if s.name == "aloha_bridge: protective_stop" and s.level == level]


@pytest.fixture(scope="module")
def graph():
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_rate_hz", value=0.0), Parameter("real_time_factor", value=1.0),
            Parameter("ground_truth_rate_hz", value=0.0)])
        bridge = AlohaBridgeNode(context=ctx, parameter_overrides=[
            Parameter("use_sim_time", value=True), Parameter("watchdog_timeout", value=WATCHDOG_S)])
        probe = Probe(ctx)
        with executor_with(ctx, sim, bridge, probe) as ex:
            assert spin_until(ex, lambda: len(probe.states) > 5 and bridge.ready, 15.0)
            assert probe.client.wait_for_server(timeout_sec=5.0)
            assert probe.reset.wait_for_service(timeout_sec=5.0)
            yield ex, probe, bridge


@pytest.fixture(scope="module")
def arm(graph, arm_goals):
    ex, probe, _ = graph
    return arm_goals(JOINT_NAMES, probe.client, lambda predicate, timeout_s: spin_until(ex, predicate, timeout_s))


def settle_target(probe) -> np.ndarray:
    q = probe.q.copy()
    q[[6, 13]] = 1.0
    return q


def test_trajectory_reaches_goal_within_tolerance(graph, arm):
    ex, probe, _ = graph
    target = settle_target(probe)
    target[WAIST] += 0.3
    target[R_ELBOW] -= 0.2
    feedback = []
    result = arm.result_of(arm.send(arm.rest_goal(target, 1.0), feedback=lambda m: feedback.append(m.feedback)))
    assert result.error_code == ExecuteTrajectory.Result.SUCCESSFUL, result.error_string
    t = [f.time_from_start for f in feedback]
    err = [f.max_tracking_error for f in feedback]
    assert len(feedback) >= 5 and np.all(np.diff(t) > 0) and t[-1] >= 0.9
    assert np.all(np.diff(err) >= 0) and 0.0 < err[-1] < 0.1  # tracking error against joint_states, non-decreasing max
    spin_until(ex, lambda: False, 0.3)
    err = np.abs(probe.q - target)
    assert err[WAIST] < 0.02 and err[R_ELBOW] < 0.02, err
    assert np.all(err[[0, 1, 2, 7, 8, 9]] < 0.05), err


def test_replacement_mid_motion_has_no_position_jump(graph, arm):
    ex, probe, _ = graph
    start = settle_target(probe)
    # Grippers to their target first, so that the test does not depend on what ran before it.
    assert arm.result_of(arm.send(arm.rest_goal(start, 0.5))).error_code == ExecuteTrajectory.Result.SUCCESSFUL
    a = start.copy()
    a[WAIST] += 0.6
    b = start.copy()
    b[WAIST] -= 0.3
    # The first motion lasts long enough (4 s of sim time) that the replacement, sent 1.5 s in, always
    # arrives while it is still running, however slowly a loaded machine answers the action call.
    first = arm.send(arm.rest_goal(a, 4.0))
    t_switch = probe.now() + 1.5
    assert spin_until(ex, lambda: probe.now() >= t_switch, 60.0)
    n_before = len(probe.states)
    q_at_switch = probe.q[WAIST]
    assert q_at_switch > start[WAIST] + 0.05  # it was moving
    second = arm.send(arm.rest_goal(b, 1.5))
    r1 = arm.result_of(first, timeout=60.0)
    assert r1.error_code != ExecuteTrajectory.Result.SUCCESSFUL and "preempted" in r1.error_string
    r2 = arm.result_of(second, timeout=60.0)
    assert r2.error_code == ExecuteTrajectory.Result.SUCCESSFUL, r2.error_string
    t = np.array([s[0] for s in probe.states[n_before - 5:]])
    q = np.array([s[1][WAIST] for s in probe.states[n_before - 5:]])
    speed = np.abs(np.diff(q)) / np.maximum(np.diff(t), 1e-3)
    # The replacement (0.3 + at most 0.6 rad in 1.5 s, from the present velocity) stays below 1.5 rad/s;
    # a jump back to the old start (>= 0.05 rad within one 20 ms joint_states period) would be >= 2.5 rad/s.
    assert speed.max() < 1.5, speed.max()
    assert abs(probe.q[WAIST] - b[WAIST]) < 0.03


def test_cancel_decelerates_within_limits(graph, arm):
    ex, probe, bridge = graph
    start = settle_target(probe)
    target = start.copy()
    target[WAIST] += 1.2
    handle = arm.send(arm.rest_goal(target, 2.0))
    t_cancel = probe.now() + 0.9
    spin_until(ex, lambda: probe.now() >= t_cancel, 5.0)
    n0 = len(probe.states)
    with bridge._lock:
        ref = bridge.bridge.follower.sample(bridge._now())
    v0 = abs(ref.velocities[WAIST])
    assert v0 > 0.3
    fut = handle.cancel_goal_async()
    refs = []  # (time, reference velocity) of the bridge's controller mirror while stopping

    def sample_ref() -> bool:
        with bridge._lock:
            now = bridge._now()
            refs.append((now, bridge.bridge.follower.sample(now).velocities[WAIST]))
        return False

    assert spin_until(ex, lambda: sample_ref() or fut.done(), 5.0)
    result = arm.result_of(handle)
    assert "canceled" in result.error_string
    a_max = bridge.limits.a_max[WAIST]
    t_stop = v0 / (bridge.cfg.stop_deceleration_scale * a_max)
    t_end = probe.now() + t_stop + 0.6
    spin_until(ex, lambda: sample_ref() or probe.now() > t_end, 5.0)
    t = np.array([r[0] for r in refs])
    v = np.array([r[1] for r in refs])
    keep = np.diff(t) > 1e-4
    decel = np.abs(np.diff(v)[keep] / np.diff(t)[keep])
    assert decel.max() <= a_max * 1.01, decel.max()
    assert abs(v[-1]) < 1e-9  # the reference came to rest
    # Stopped well short of the goal, about one braking distance (+ cancel latency, servo lag) past the cancel point.
    q_cancel = probe.states[n0][1][WAIST]
    assert probe.q[WAIST] < target[WAIST] - 0.3
    assert abs(probe.q[WAIST] - q_cancel) < v0 * 0.25 + v0**2 / (2 * 0.8 * a_max) + 0.05
    ts = np.array([s[0] for s in probe.states[n0:]])
    q = np.array([s[1][WAIST] for s in probe.states[n0:]])
    late = ts > ts[-1] - 0.3
    assert np.ptp(q[late]) < 0.01  # standing still


def test_watchdog_holds_last_commanded_position(graph, arm):
    ex, probe, bridge = graph
    target = settle_target(probe)
    target[WAIST] -= 0.2
    probe.diag.clear()
    result = arm.result_of(arm.send(arm.rest_goal(target, 0.5)))
    assert result.error_code == 0
    t_end = probe.now()
    spin_until(ex, lambda: probe.now() > t_end + WATCHDOG_S + 0.5, 5.0)
    n0 = len(probe.states)
    spin_until(ex, lambda: probe.now() > t_end + WATCHDOG_S + 1.5, 5.0)
    held = np.array([s[1] for s in probe.states[n0:]])
    assert np.all(np.abs(held[:, WAIST] - target[WAIST]) < 0.02)
    warn = [s for s in probe.diag if s.name.endswith("watchdog") and s.level == WARN]
    assert warn and "holding the last commanded position" in warn[-1].message
    assert bridge.bridge.hold_sent


MESSAGES = {"nan": "non-finite", "unknown": "unknown joint", "missing": "missing joint", "times": "strictly increasing",
            "position": "outside", "velocity": "velocity", "acceleration": "acceleration", "jump": "due now"}


@pytest.mark.parametrize("case", ["nan", "unknown", "missing", "times", "position", "velocity", "acceleration", "jump"])
def test_invalid_goals_are_rejected_without_motion(graph, case, arm):
    ex, probe, _ = graph
    spin_until(ex, lambda: False, 0.2)
    q0 = probe.q.copy()
    target = settle_target(probe)
    names = list(JOINT_NAMES)
    times, pos, vel, acc = [0.5, 1.0], np.stack([target, target]), None, None
    expected = ExecuteTrajectory.Result.INVALID_GOAL
    if case == "nan":
        pos[1, WAIST] = np.nan
    elif case == "unknown":
        names[3] = "left_elbowz"
        expected = ExecuteTrajectory.Result.INVALID_JOINTS
    elif case == "missing":
        names, pos = names[:-1], pos[:, :-1]
        expected = ExecuteTrajectory.Result.INVALID_JOINTS
    elif case == "times":
        times = [1.0, 1.0]
    elif case == "position":
        pos[1, WAIST] = 3.5  # beyond +-3.14158
    elif case == "velocity":
        pos[1, WAIST] = target[WAIST] + 0.5
        times = [0.5, 0.6]  # 5 rad/s > pi
    elif case == "acceleration":
        vel, acc = np.zeros((2, 14)), np.zeros((2, 14))
        pos[1, WAIST] += 0.05  # quintic rest-to-rest 0.05 rad in 0.1 s: 0.94 rad/s but 29 rad/s^2 > 25
        times = [0.5, 0.6]
    elif case == "jump":
        pos = pos[:1].copy()
        pos[0, WAIST] += 0.3
        times = [0.0]
    result = arm.result_of(arm.send(arm.make_goal(times, pos, vel, acc, names)))
    assert result.error_code == expected, result.error_string
    assert MESSAGES[case] in result.error_string, result.error_string
    spin_until(ex, lambda: False, 0.4)
    assert np.all(np.abs((probe.q - q0)[[0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]]) < 0.01)


def test_streamed_trajectory_is_followed(graph, arm):
    ex, probe, _ = graph
    target = settle_target(probe)
    target[WAIST] += 0.2
    goal = arm.rest_goal(target, 0.6)
    probe.stream.publish(goal.trajectory)
    t0, wall0 = probe.now(), time.monotonic()
    # sim time may run slower than the wall clock on a loaded machine: wait for it, never for the wall
    assert spin_until(ex, lambda: probe.now() > t0 + 1.0, 30.0), "sim time did not advance 1 s"
    assert abs(probe.q[WAIST] - target[WAIST]) < 0.03
    # real_time_factor 1: sim time never runs ahead of the wall clock.
    assert probe.now() - t0 <= (time.monotonic() - wall0) * 1.05 + 0.05


def test_a_second_joint_states_publisher_is_named(graph):
    """Two simulators or robots on one ROS domain both publish joint_states, and the tracking check reads the
    jumps between them as a collision: the bridge names the publishers on /diagnostics (and in a stop)."""
    ex, probe, _ = graph

    def said(level) -> list[str]:
        return [s.message for s in probe.diag if s.name == "aloha_bridge: joint_states_publishers"
                and s.level == level]

    assert spin_until(ex, lambda: said(OK), 5.0) and not said(WARN)
    second = probe.create_publisher(JointState, "joint_states", SENSOR_QOS)  # it need not publish to be there
    try:
        assert spin_until(ex, lambda: any("2 publishers on /joint_states (/aloha_sim, /probe)" in m
                                          for m in said(WARN)), 10.0), said(WARN)
    finally:
        probe.destroy_publisher(second)
    ok = len(said(OK))
    assert spin_until(ex, lambda: len(said(OK)) > ok, 10.0)


def _reset(ex, probe) -> Trigger.Response:
    fut = probe.reset.call_async(Trigger.Request())
    assert spin_until(ex, fut.done, 10.0)
    return fut.result()


def test_an_arm_pushed_into_the_table_is_stopped_and_held_until_reset(graph, arm):
    """Last in the module (it moves the right arm to the table). A goal inside every limit the bridge checks
    (the right shoulder forward at 0.5 rad/s): the simulated table stops the gripper, the servo falls behind its
    reference, and the shipped `collision_tracking_error` must stop the arm, refuse commands until
    `~/reset_protective_stop`, and accept them again after it."""
    ex, probe, bridge = graph
    assert not _reset(ex, probe).success  # nothing to clear yet
    start = probe.states[-1][1].copy()
    into_table = start.copy()
    into_table[R_SHOULDER] = 0.3  # from -0.96: the gripper meets the table near 0 rad

    result = arm.result_of(arm.send(arm.rest_goal(into_table, 3.0)))
    assert result.error_code == ExecuteTrajectory.Result.PATH_TOLERANCE_VIOLATED, result.error_string
    assert "protective stop" in result.error_string and "collision" in result.error_string
    stop = bridge.bridge.protective_stop
    assert stop is not None and stop.joint.startswith("right_")
    assert spin_until(ex, lambda: bool(probe.stop_reports(ERROR)), 5.0)

    # Held where it was measured: no pushing on, no rebound.
    n0 = len(probe.states)
    assert spin_until(ex, lambda: len(probe.states) > n0 + 50, 10.0)  # 1 s of joint states at 50 Hz
    held = np.array([q for _, q in probe.states[n0:]])[:, ARMS]
    assert np.ptp(held, axis=0).max() < 0.05, np.ptp(held, axis=0)
    assert probe.states[-1][1][R_SHOULDER] < 0.15  # stopped short of the 0.3 rad commanded

    # Every command is refused while the stop holds; each refusal is counted and answered with its reason, the
    # console says the reason once (the stop's own ERROR line names the reset service) and counts the repeats
    refused_before = probe.refused()
    back = arm.make_goal([2.0], start[None, :], np.zeros((1, 14)), np.zeros((1, 14)))
    for _ in range(4):
        refused = arm.result_of(arm.send(back))
        assert refused.error_code == ExecuteTrajectory.Result.INVALID_GOAL
        assert "protective stop" in refused.error_string
    assert spin_until(ex, lambda: probe.refused() == refused_before + 4, 5.0), (refused_before, probe.refused())
    assert spin_until(ex, lambda: any("reset_protective_stop std_srvs/srv/Trigger" in m for m in probe.logs), 5.0)
    said = [m for m in probe.logs if m.startswith("rejected goal") and "protective stop" in m]
    assert len(said) == 1, probe.logs

    # ... and accepted again once an operator clears it.
    cleared = _reset(ex, probe)
    assert cleared.success and "collision" in cleared.message and bridge.bridge.protective_stop is None
    assert spin_until(ex, lambda: bool(probe.stop_reports(OK)), 5.0)
    result = arm.result_of(arm.send(back))
    assert result.error_code == ExecuteTrajectory.Result.SUCCESSFUL, result.error_string
    assert np.abs(probe.states[-1][1][ARMS] - start[ARMS]).max() < 0.05
