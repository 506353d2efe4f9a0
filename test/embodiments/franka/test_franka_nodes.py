"""franka_sim + franka_bridge over real DDS on sim time: topics, goals within tolerance, gripper,
replacement without a jump, cancel, watchdog hold, invalid goals rejected without motion."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState  # noqa: E402

from plan_stack.action import ExecuteTrajectory  # noqa: E402
from plan_stack.embodiments.franka.bridge_node import FrankaBridgeNode  # noqa: E402
from plan_stack.embodiments.franka.model import READY_POSE  # noqa: E402
from plan_stack.embodiments.franka.sim_node import FrankaSimNode  # noqa: E402
from plan_stack.ros.diagnostics import WARN  # noqa: E402
from plan_stack.ros.image import image_to_numpy  # noqa: E402
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

NAMES = [f"fr3_joint{i}" for i in range(1, 8)] + ["fr3_gripper"]
WATCHDOG_S = 0.4


class Probe(Node):
    def __init__(self, context, wait_for) -> None:
        super().__init__("probe", context=context, parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.states: list[tuple[float, np.ndarray]] = []
        self.diag: list = []
        self.moves: list = []
        self.create_subscription(JointState, "joint_states", self._js, SENSOR_QOS)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diag.extend(m.status), 50)
        self.create_subscription(JointState, "franka_gripper/move", self.moves.append, RELIABLE_QOS)
        self.client = ActionClient(self, ExecuteTrajectory, "execute_trajectory")
        self.wait_for = wait_for

    def _js(self, msg: JointState) -> None:
        p = list(msg.position)
        q = np.array(p[:7] + [p[7] + p[8]])
        self.states.append((msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, q))

    @property
    def q(self) -> np.ndarray:
        return self.states[-1][1]

    def now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def sleep_sim(self, dt: float) -> None:
        t_end = self.now() + dt
        assert self.wait_for(lambda: self.now() >= t_end, 10.0 + 3 * dt)


@pytest.fixture(scope="module")
def graph(wait_for):
    with ros_context() as ctx:
        sim = FrankaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_rate_hz", value=0.0), Parameter("ground_truth_rate_hz", value=0.0),
            Parameter("clock_rate_hz", value=100.0), Parameter("joint_state_rate_hz", value=50.0)])
        bridge = FrankaBridgeNode(context=ctx, parameter_overrides=[
            Parameter("use_sim_time", value=True), Parameter("watchdog_timeout", value=WATCHDOG_S)])
        probe = Probe(ctx, wait_for)
        with executor_with(ctx, sim, bridge, probe) as ex:
            spinner = threading.Thread(target=ex.spin, daemon=True)
            spinner.start()
            assert wait_for(lambda: len(probe.states) > 5 and bridge._follower is not None, 15.0)
            assert probe.client.wait_for_server(timeout_sec=5.0)
            yield probe, bridge, sim


@pytest.fixture(scope="module")
def arm(graph, arm_goals, wait_for):
    probe, _, _ = graph
    return arm_goals(NAMES, probe.client, wait_for, result_timeout_s=20.0)


def test_sim_publishes_its_topics_on_sim_time(wait_for):
    with ros_context() as ctx:
        sim = FrankaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_width", value=48), Parameter("camera_height", value=36),
            Parameter("camera_rate_hz", value=5.0), Parameter("arm_joint_names", value=[f"panda_joint{i}" for i in range(1, 8)])])
        probe = Node("probe", context=ctx)
        got: dict[str, list] = {}

        def keep(key):
            return lambda msg: got.setdefault(key, []).append(msg)

        probe.create_subscription(Clock, "/clock", keep("clock"), RELIABLE_QOS)
        probe.create_subscription(JointState, "joint_states", keep("js"), SENSOR_QOS)
        for cam in ("external", "wrist"):
            probe.create_subscription(Image, f"cameras/{cam}/image_raw", keep(cam), SENSOR_QOS)
            probe.create_subscription(CameraInfo, f"cameras/{cam}/camera_info", keep(cam + "/info"), SENSOR_QOS)
        probe.create_subscription(PoseStamped, "ground_truth/cube/pose", keep("cube"), SENSOR_QOS)
        probe.create_subscription(PoseStamped, "ground_truth/target/pose", keep("target"), LATCHED_QOS)
        keys = ["clock", "js", "external", "wrist", "external/info", "wrist/info", "cube", "target"]
        with executor_with(ctx, sim, probe) as ex:
            threading.Thread(target=ex.spin, daemon=True).start()
            assert wait_for(lambda: all(got.get(k) for k in keys), 20.0), [k for k in keys if not got.get(k)]
            js = got["js"][-1]
            assert list(js.name) == [f"panda_joint{i}" for i in range(1, 8)] + ["fr3_finger_joint1", "fr3_finger_joint2"]
            assert np.allclose(js.position[:7], READY_POSE, atol=1e-3) and js.position[7] == pytest.approx(0.04, abs=1e-3)
            for cam in ("external", "wrist"):
                img, info = got[cam][-1], got[cam + "/info"][-1]
                assert (img.width, img.height) == (48, 36) and image_to_numpy(img).std() > 3.0
                assert info.header.stamp == img.header.stamp and info.k[0] > 0
            stamps = [c.clock.sec + 1e-9 * c.clock.nanosec for c in got["clock"]]
            assert np.all(np.diff(stamps) > 0)
            assert got["cube"][-1].pose.position.z == pytest.approx(0.02, abs=0.003)


def test_goal_reaches_target_with_feedback_and_gripper(graph, arm, wait_for):
    probe, bridge, sim = graph
    target = probe.q.copy()
    target[[0, 3, 6]] += [0.3, 0.2, -0.3]
    target[7] = 0.03
    fb = []
    n_moves = len(probe.moves)
    result = arm.result_of(arm.send(arm.rest_goal(target, 1.0), feedback=lambda m: fb.append(m.feedback)))
    assert result.error_code == ExecuteTrajectory.Result.SUCCESSFUL, result.error_string
    t = [f.time_from_start for f in fb]
    err = [f.max_tracking_error for f in fb]
    assert len(fb) >= 5 and np.all(np.diff(t) > 0) and np.all(np.diff(err) >= 0) and 0.0 < err[-1] < 0.15
    probe.sleep_sim(0.6)
    assert np.abs(probe.q[:7] - target[:7]).max() < 0.02
    # the hand follows the width channel at its own speed limit: give it sim time, not wall time
    t_hand = probe.now()
    assert wait_for(lambda: abs(probe.q[7] - 0.03) <= 0.003 or probe.now() > t_hand + 1.0, 30.0)
    assert probe.q[7] == pytest.approx(0.03, abs=0.003)  # the hand followed the width channel
    moves = probe.moves[n_moves:]
    assert len(moves) >= 2 and moves[-1].position[0] == pytest.approx(0.03, abs=0.003)
    assert all(0 < m.velocity[0] <= 0.1 for m in moves)


def test_replacement_mid_motion_has_no_jump(graph, arm):
    probe, _, _ = graph
    start = probe.q.copy()
    a, b = start.copy(), start.copy()
    a[0] += 0.6
    b[0] -= 0.3
    first = arm.send(arm.rest_goal(a, 1.5))
    probe.sleep_sim(0.7)
    n_before = len(probe.states)
    assert probe.q[0] > start[0] + 0.1
    second = arm.send(arm.rest_goal(b, 1.5))
    r1 = arm.result_of(first)
    assert r1.error_code != 0 and "preempted" in r1.error_string
    assert arm.result_of(second).error_code == 0
    t = np.array([s[0] for s in probe.states[n_before - 5:]])
    q = np.array([s[1][0] for s in probe.states[n_before - 5:]])
    speed = np.abs(np.diff(q)) / np.maximum(np.diff(t), 1e-3)
    assert speed.max() < 1.5, speed.max()  # quintic 0.6 rad / 1.5 s peaks at 0.75 rad/s


def test_cancel_stops_short_of_the_goal(graph, arm, wait_for):
    probe, bridge, _ = graph
    start = probe.q.copy()
    target = start.copy()
    target[0] += 1.2
    handle = arm.send(arm.rest_goal(target, 2.0))
    probe.sleep_sim(0.9)
    fut = handle.cancel_goal_async()
    assert wait_for(fut.done, 5.0)
    assert "canceled" in arm.result_of(handle).error_string
    probe.sleep_sim(1.0)
    n0 = len(probe.states)
    probe.sleep_sim(0.3)
    q = np.array([s[1][0] for s in probe.states[n0:]])
    assert q.max() < target[0] - 0.2 and np.ptp(q) < 0.01  # stopped, standing still


def test_watchdog_holds_last_commanded_position(graph, arm):
    probe, bridge, _ = graph
    target = probe.q.copy()
    target[1] -= 0.2
    probe.diag.clear()
    assert arm.result_of(arm.send(arm.rest_goal(target, 0.5))).error_code == 0
    probe.sleep_sim(WATCHDOG_S + 0.5)
    n0 = len(probe.states)
    probe.sleep_sim(0.5)
    held = np.array([s[1] for s in probe.states[n0:]])
    assert np.all(np.abs(held[:, 1] - target[1]) < 0.02)
    warn = [s for s in probe.diag if s.name.endswith("watchdog") and s.level == WARN]
    assert warn and "holding the last commanded position" in warn[-1].message and bridge._hold_sent


@pytest.mark.parametrize("case", ["nan", "unknown", "position", "velocity", "acceleration", "gripper"])
def test_invalid_goals_are_rejected_without_motion(graph, case, arm):
    probe, _, _ = graph
    probe.sleep_sim(0.1)
    q0 = probe.q.copy()
    target = q0.copy()
    names = list(NAMES)
    times, pos, vel, acc = [0.5, 1.0], np.stack([target, target]), None, None
    expected = ExecuteTrajectory.Result.INVALID_GOAL
    if case == "nan":
        pos[1, 2] = np.nan
    elif case == "unknown":
        names[7] = "panda_gripper"
        expected = ExecuteTrajectory.Result.INVALID_JOINTS
    elif case == "position":
        pos[1, 3] = 0.1  # joint 4 upper limit is -0.0698
    elif case == "velocity":
        pos[1, 0] += 0.5
        times = [0.5, 0.6]  # 5 rad/s > 2.175
    elif case == "acceleration":
        vel, acc = np.zeros((2, 8)), np.zeros((2, 8))
        pos[1, 1] += 0.05  # quintic 0.05 rad in 0.1 s: 0.94 rad/s, 28.9 rad/s^2 > 7.5
        times = [0.5, 0.6]
    elif case == "gripper":
        pos[1, 7] = 0.0
        times = [0.5, 0.6]  # 0.08 m in 0.1 s > 0.1 m/s
    result = arm.result_of(arm.send(arm.make_goal(times, pos, vel, acc, names)))
    assert result.error_code == expected, result.error_string
    probe.sleep_sim(0.3)
    assert np.abs(probe.q - q0).max() < 0.005
