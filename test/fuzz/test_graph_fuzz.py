"""Whole-graph fuzzing over DDS: real nodes receive malformed messages on every input.

Each entry of TARGETS starts real nodes (one rclpy context, each node on its
own executor thread, as `plan-stack up` runs them) and lists its inputs; every
input gets FUZZ_EXAMPLES hypothesis-generated malformed messages (wrong sizes
and encodings, NaN/inf, empty and huge arrays, unknown and duplicated names,
zero/negative dt, stamps far in the past/future or going backwards). After
every case: no node thread died, the rejection is visible in /diagnostics
(a WARN or ERROR status from the node that received it), and no output or
motion came of it; after all cases, valid input is still served.

Adding a node (e.g. the planner or viz): write an `Entry` (a `start` that
builds the node(s), `inputs` with a strategy of malformed messages per topic
or action, the `quiet` outputs that must stay silent, a `valid` check) and
append it to TARGETS; the tests are generated from the table.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.ros, pytest.mark.fuzz]

rclpy = pytest.importorskip("rclpy")

from builtin_interfaces.msg import Duration, Time  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from plan_stack.action import ExecuteTrajectory  # noqa: E402
from plan_stack.msg import ActionChunk, Observation, PlanFeatures  # noqa: E402
from plan_stack.ros.lifecycle import executor_for  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import ros_context  # noqa: E402
from plan_stack.ros.time import ns_to_stamp, s_to_duration  # noqa: E402

from .conftest import EXAMPLES  # noqa: E402

#: How long a rejection may take to show up in /diagnostics (s, wall; generous for loaded machines).
REJECTION_TIMEOUT_S = 10.0
#: Sim time (s) the graph runs before fuzzing, so that a trajectory stamped at the clock's origin is stale.
STALE_AFTER_S = 5.0
#: Sim joints may not move more than this (rad) while only bad input arrives.
MOTION_TOLERANCE = 0.01

# --- malformed values -----------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """A malformed message and what is wrong with it (the short repr keeps failure reports readable)."""

    defect: str
    msg: Any

    def __repr__(self) -> str:
        return f"Case({self.defect}: {type(self.msg).__name__} {str(self.msg)[:240]})"


BAD_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300])
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
ANY_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)
BAD_STAMPS_S = st.sampled_from([0, 1, 2**31 - 1, -(2**31)])  # epoch, far past, far future, negative


def _stamp(sec: int) -> Time:
    return Time(sec=int(sec), nanosec=0) if sec >= 0 else Time(sec=int(sec), nanosec=0)


def _names(known, defect):
    """Joint names with one defect: unknown, duplicated, missing or empty."""
    known = list(known)
    return st.sampled_from(["unknown", "duplicate", "missing", "empty"]).flatmap(lambda kind: {
        "unknown": st.just(known[:-1] + ["no_such_joint"]),
        "duplicate": st.just(known[:-1] + [known[0]]),
        "missing": st.just(known[:-1]),
        "empty": st.just([]),
    }[kind]) if defect else st.just(known)


@st.composite
def bad_trajectory(draw, joints, now_s):
    """A JointTrajectory for `joints` with at least one defect (stamps relative to the receiver's clock)."""
    defect = draw(st.sampled_from(["names", "sizes", "non_finite", "times", "stale", "future", "empty", "huge"]))
    names = draw(_names(joints, defect == "names"))
    n_points = draw(st.integers(1, 4)) if defect != "huge" else 5000
    if defect == "empty":
        n_points = 0
    msg = JointTrajectory(joint_names=names)
    if defect == "stale":  # started at the clock's origin: every point is long past
        msg.header.stamp = Time(sec=0, nanosec=1)
    elif defect == "future":  # a wrong clock: due in days or years
        msg.header.stamp = ns_to_stamp(int((now_s() + draw(st.sampled_from([1e5, 1e8]))) * 1e9))
    for i in range(n_points):
        width = len(names) + (draw(st.sampled_from([-1, 1])) if defect == "sizes" else 0)
        q = [0.0] * max(width, 0)
        if defect == "non_finite" and q:
            q[draw(st.integers(0, len(q) - 1))] = draw(BAD_FLOATS)
        t = (i + 1) * 0.5
        if defect == "times":
            t = draw(st.sampled_from([0.0, -1.0, 0.5])) if i else draw(st.sampled_from([-1.0, -1e6]))
        if defect == "huge":
            q = [1e3] * len(names)  # 5000 points far outside every joint limit
        msg.points.append(JointTrajectoryPoint(positions=q, time_from_start=_duration(t)))
    return Case(defect, msg)


def _duration(t: float) -> Duration:
    if t < 0:  # builtin Duration allows negative seconds
        whole = math.floor(t)
        return Duration(sec=int(whole), nanosec=int(round((t - whole) * 1e9)) % 1_000_000_000)
    return s_to_duration(t)


@st.composite
def bad_joint_state(draw, joints):
    defect = draw(st.sampled_from(["names", "sizes", "non_finite"]))
    names = draw(_names(joints, defect == "names"))
    n = len(names) + (draw(st.sampled_from([-1, 1, 1000])) if defect == "sizes" else 0)
    q = [0.0] * max(n, 0)
    if defect == "non_finite" and q:
        q[draw(st.integers(0, len(q) - 1))] = draw(BAD_FLOATS)
    msg = JointState(name=names, position=q)
    msg.header.stamp = _stamp(draw(BAD_STAMPS_S)) if draw(st.booleans()) else Time()
    return Case(defect, msg)


@st.composite
def bad_image(draw, now_s):
    """A camera frame that cannot be decoded, or stamped far from now (past/future/backwards)."""
    defect = draw(st.sampled_from(["encoding", "size", "step", "empty", "stamp"]))
    w, h = draw(st.integers(1, 64)), draw(st.integers(1, 48))
    enc = "rgb8" if defect != "encoding" else draw(st.sampled_from(["", "bogus", "32FC7", "yuv422_yuy2x"]))
    data = bytes(w * h * 3)
    step = w * 3
    if defect == "size":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if defect == "step":
        step = draw(st.sampled_from([0, 1, w * 3 - 1, 10**6]))
    if defect == "empty":
        w = h = 0
        data = b""
    msg = Image(width=w, height=h, encoding=enc, step=step, data=data)
    if defect == "stamp":
        offset = draw(st.sampled_from([-1e6, -50.0, 50.0, 1e6]))
        msg.header.stamp = ns_to_stamp(max(0, int((now_s() + offset) * 1e9)))
    else:
        msg.header.stamp = ns_to_stamp(int(now_s() * 1e9))
    return Case(defect, msg)


@st.composite
def bad_chunk(draw, joints, now_s, bad_floats=NON_FINITE):
    """An ActionChunk with one defect. Values far outside the joint limits (1e300) are not in the default
    `bad_floats`: the stitcher clamps chunk samples to its limits without a WARN (its owner's call)."""
    defect = draw(st.sampled_from(["names", "dt", "shape", "non_finite", "stale", "empty", "huge", "horizon"]))
    names = draw(_names(joints, defect == "names"))
    horizon = 10 if defect not in ("huge", "horizon") else (20000 if defect == "huge" else draw(st.integers(0, 2)))
    dt = 0.02 if defect != "dt" else draw(st.sampled_from([0.0, -0.02, math.nan, math.inf, -math.inf]))
    pos = [0.0] * (horizon * len(names))
    if defect == "shape":
        pos = pos + [0.0] * draw(st.integers(1, 3))
    if defect == "huge":  # 40,000 values that do not fill the stated horizon x joints
        pos = pos[:-1]
    if defect == "non_finite" and pos:
        pos[draw(st.integers(0, len(pos) - 1))] = draw(bad_floats)
    if defect == "empty":
        pos = []
    msg = ActionChunk(joint_names=names, dt=dt, horizon=horizon, positions=pos)
    stamp_s = now_s() - (draw(st.sampled_from([100.0, 1e5])) if defect == "stale" else 0.0)
    msg.header.stamp = ns_to_stamp(max(0, int(stamp_s * 1e9)))
    return Case(defect, msg)


@st.composite
def bad_plan_features(draw, width, now_s):
    defect = draw(st.sampled_from(["shape", "size", "non_finite", "empty", "huge"]))
    rows = draw(st.integers(1, 4))
    shape, n = [rows, width], rows * width
    if defect == "shape":
        shape = draw(st.sampled_from([[rows, width + 1], [rows], [rows, width, 1], [0, width]]))
    if defect == "size":
        n += draw(st.sampled_from([-1, 1]))
    if defect == "empty":
        shape, n = [], 0
    if defect == "huge":
        shape, n = [20000, width + 1], 20000 * (width + 1)
    data = [0.0] * max(n, 0)
    if defect == "non_finite":
        data[draw(st.integers(0, n - 1))] = draw(NON_FINITE)
    msg = PlanFeatures(shape=shape, data=data)
    msg.header.stamp = msg.plan_stamp = ns_to_stamp(int(now_s() * 1e9))
    return Case(defect, msg)


@st.composite
def bad_observation(draw, joints, now_s):
    """An Observation whose joint state cannot be used (the chunker's state input)."""
    case = draw(bad_joint_state(joints))
    msg = Observation(joint_state=case.msg)
    msg.header.stamp = ns_to_stamp(int(now_s() * 1e9))
    return Case(case.defect, msg)


# --- the graph under test ---------------------------------------------------------------------


@dataclasses.dataclass
class Input:
    """One fuzzed input: a topic (`msg_type` + `qos`) or an action (`action_type`)."""

    name: str
    strategy: Callable[[Graph], st.SearchStrategy]
    msg_type: Any = None
    qos: Any = None
    action_type: Any = None


@dataclasses.dataclass
class Entry:
    name: str
    start: Callable[[Any], list[Node]]  # ctx -> nodes (parameters given here)
    inputs: list[Input]
    reporter: dict[str, str]  # input name -> node whose diagnostics must show the rejection
    quiet: list[tuple[str, Any, Any]]  # outputs that bad input must not produce (topic, type, qos)
    ready: Callable[[Graph], bool]  # the graph is up (e.g. joint states flowing)
    valid: Callable[[Graph], None]  # sends valid input; asserts it is served
    motion: Callable[[Graph], float] | None = None  # how far the robot moved since `mark_still` (rad)
    clock_node: int = 0  # index of the node whose ROS time stamps are relative to


class Graph:
    """Real nodes on their own executor threads, plus a probe node that fuzzes and listens."""

    def __init__(self, ctx, entry: Entry) -> None:
        self.ctx, self.entry = ctx, entry
        self.nodes = entry.start(ctx)
        self.probe = Node("fuzzer", context=ctx)
        self.lock = threading.Lock()
        self.problems: list[DiagnosticStatus] = []
        self.outputs: dict[str, list] = {}
        self.latest: dict[str, Any] = {}
        self.probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, DIAGNOSTICS_QOS)
        for topic, typ, qos in entry.quiet:
            self.outputs[topic] = []
            self.probe.create_subscription(typ, topic, lambda m, t=topic: self._keep(t, m), qos)
        self.probe.create_subscription(JointState, "joint_states", self._on_joint_states, SENSOR_QOS)
        self.pubs = {i.name: self.probe.create_publisher(i.msg_type, i.name, i.qos)
                     for i in entry.inputs if i.msg_type is not None}
        self.actions = {i.name: ActionClient(self.probe, i.action_type, i.name)
                        for i in entry.inputs if i.action_type is not None}
        self.executors = [executor_for(n) for n in self.nodes] + [SingleThreadedExecutor(context=ctx)]
        self.threads = []
        for node, ex in zip(self.nodes + [self.probe], self.executors):
            ex.add_node(node)
            thread = threading.Thread(target=ex.spin, name=f"spin:{node.get_name()}", daemon=True)
            thread.start()
            self.threads.append(thread)
        self.still = None

    def _on_diag(self, msg):
        with self.lock:
            self.problems.extend(s for s in msg.status if s.level in (DiagnosticStatus.WARN, DiagnosticStatus.ERROR))

    def _keep(self, topic, msg):
        with self.lock:
            self.outputs[topic].append(msg)

    def _on_joint_states(self, msg):
        """The robot's own joint states (the fuzzer's malformed ones on the same topic are ignored here)."""
        from plan_stack.embodiments.aloha.model import JOINT_NAMES

        if list(msg.name) == list(JOINT_NAMES) and len(msg.position) == len(msg.name) and all(
                math.isfinite(q) for q in msg.position):
            with self.lock:
                self.latest["joint_states"] = msg

    def wait(self, predicate, timeout_s) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.005)
        return bool(predicate())

    def alive(self) -> bool:
        return all(t.is_alive() for t in self.threads) and not any(getattr(n, "fatal_error", None)
                                                                      for n in self.nodes)

    def now_s(self) -> float:
        """ROS time of the node that receives the inputs (the entry's `clock_node`)."""
        return self.nodes[self.entry.clock_node].get_clock().now().nanoseconds * 1e-9

    def problem_count(self, node_name: str) -> int:
        with self.lock:
            return sum(1 for s in self.problems if s.name.startswith(f"{node_name}:"))

    def output_count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.outputs.values())

    def send(self, inp: Input, msg) -> None:
        if inp.msg_type is not None:
            self.pubs[inp.name].publish(msg)
            return
        client = self.actions[inp.name]
        assert client.wait_for_server(timeout_sec=10.0)
        future = client.send_goal_async(inp.action_type.Goal(trajectory=msg))
        assert self.wait(future.done, REJECTION_TIMEOUT_S)
        handle = future.result()
        if handle.accepted:
            result = handle.get_result_async()
            assert self.wait(result.done, REJECTION_TIMEOUT_S)
            assert result.result().result.error_code != 0, "a malformed goal succeeded"

    def close(self) -> None:
        for node, ex in zip(self.nodes + [self.probe], self.executors):
            ex.remove_node(node)
            ex.shutdown(timeout_sec=2.0)
        for node in self.nodes:
            close = getattr(node, "close", None)
            if callable(close):
                close()
            node.destroy_node()
        self.probe.destroy_node()


# --- entries -----------------------------------------------------------------------------------

ALOHA_ARM = ("left_waist", "left_shoulder", "left_elbow", "left_forearm_roll", "left_wrist_angle",
             "left_wrist_rotate")


def _aloha_start(ctx):
    from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode
    from plan_stack.embodiments.aloha.sim_node import AlohaSimNode

    sim = AlohaSimNode(context=ctx, parameter_overrides=[
        Parameter("camera_rate_hz", value=0.0), Parameter("ground_truth_rate_hz", value=0.0),
        Parameter("real_time_factor", value=1.0)])
    bridge = AlohaBridgeNode(context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True)])
    return [sim, bridge]


def _aloha_q(g: Graph) -> np.ndarray | None:
    with g.lock:
        js = g.latest.get("joint_states")
    return None if js is None else np.array(js.position)


def _aloha_ready(g: Graph) -> bool:
    bridge = g.nodes[1]
    return _aloha_q(g) is not None and bridge._measured is not None and g.now_s() > STALE_AFTER_S and all(
        p.get_subscription_count() > 0 for p in g.pubs.values())


def _aloha_motion(g: Graph) -> float:
    q = _aloha_q(g)
    arms = [i for i in range(14) if i not in (6, 13)]
    return float(np.max(np.abs(q[arms] - g.still[arms])))


def _aloha_valid(g: Graph) -> None:
    """A valid ExecuteTrajectory goal (left waist +0.1 rad over 1 s) is executed and the sim follows."""
    bridge = g.nodes[1]
    with bridge._lock:
        q0 = np.array(bridge._measured)
    q1 = q0.copy()
    q1[0] += 0.1
    traj = JointTrajectory(joint_names=list(bridge.names))
    for t, q in ((0.5, q0), (1.5, q1)):
        traj.points.append(JointTrajectoryPoint(positions=q.tolist(), time_from_start=s_to_duration(t)))
    client = g.actions["execute_trajectory"]
    future = client.send_goal_async(ExecuteTrajectory.Goal(trajectory=traj))
    assert g.wait(future.done, 10.0) and future.result().accepted
    result = future.result().get_result_async()
    assert g.wait(result.done, 30.0)
    assert result.result().result.error_code == 0, result.result().result.error_string
    assert g.wait(lambda: abs(_aloha_q(g)[0] - g.still[0] - 0.1) < 0.03, 10.0)


def _stitcher_start(ctx):
    from plan_stack.trajectory.stitcher_node import StitcherNode

    return [StitcherNode(context=ctx, parameter_overrides=[
        Parameter("joint_names", value=["a", "b"]), Parameter("initial_state", value="chunk"),
        Parameter("backend", value="ruckig"), Parameter("q_min", value=[-3.0, -3.0]),
        Parameter("q_max", value=[3.0, 3.0])])]


def _stitcher_valid(g: Graph) -> None:
    n0 = g.output_count()
    t = np.linspace(0.0, 0.2, 10)
    pos = np.stack([0.1 * t, -0.1 * t], axis=1).ravel().tolist()
    msg = ActionChunk(joint_names=["a", "b"], dt=0.02, horizon=10, positions=pos)
    msg.header.stamp = ns_to_stamp(int(g.now_s() * 1e9))
    g.pubs["action_chunk"].publish(msg)
    assert g.wait(lambda: g.output_count() > n0, 10.0), "a valid chunk was not stitched"


ALOHA_JOINTS = ("left_waist", "left_shoulder", "left_elbow", "left_forearm_roll", "left_wrist_angle",
                "left_wrist_rotate", "left_gripper", "right_waist", "right_shoulder", "right_elbow",
                "right_forearm_roll", "right_wrist_angle", "right_wrist_rotate", "right_gripper")


def _chunker_start(ctx):
    from plan_stack.actions.chunker_node import ChunkerNode

    return [ChunkerNode(context=ctx, parameter_overrides=[
        Parameter("checkpoint", value="aloha/action_head/rtc"), Parameter("joint_names", value=list(ALOHA_JOINTS)),
        Parameter("method", value="training_time"), Parameter("torch_threads", value=1)])]


def _chunker_valid(g: Graph) -> None:
    """Fresh plan features, then an observation: a chunk comes out."""
    n0 = g.output_count()
    width = g.nodes[0].policy.cfg.cond_width

    def served():
        plan = PlanFeatures(shape=[4, width], data=[0.1] * (4 * width))
        plan.header.stamp = plan.plan_stamp = ns_to_stamp(int(g.now_s() * 1e9))
        g.pubs["plan_features"].publish(plan)
        time.sleep(0.1)
        obs = Observation(joint_state=JointState(name=list(ALOHA_JOINTS), position=[0.0] * len(ALOHA_JOINTS)))
        obs.header.stamp = ns_to_stamp(int(g.now_s() * 1e9))
        g.pubs["observation"].publish(obs)
        return g.wait(lambda: g.output_count() > n0, 1.0)

    assert g.wait(served, 30.0), "valid plan features + observation gave no chunk"


INGEST_CAMERA = "cam"
INGEST_JOINTS = ("j0", "j1")


def _ingest_start(ctx):
    from plan_stack.ingest.ingest_node import IngestNode

    return [IngestNode(context=ctx, parameter_overrides=[
        Parameter("camera_names", value=[INGEST_CAMERA]), Parameter("joint_names", value=list(INGEST_JOINTS)),
        Parameter("output_size", value=[16, 16]), Parameter("joint_qos", value="reliable"),
        Parameter("min_interval", value=0.0)])]


def _ingest_valid(g: Graph) -> None:
    n0 = g.output_count()

    def served():
        stamp = ns_to_stamp(int(g.now_s() * 1e9))
        img = Image(width=8, height=6, encoding="rgb8", step=24, data=bytes(8 * 6 * 3))
        img.header.stamp = stamp
        js = JointState(name=list(INGEST_JOINTS), position=[0.0, 0.0])
        js.header.stamp = stamp
        g.pubs["joint_states"].publish(js)
        g.pubs[f"cameras/{INGEST_CAMERA}/image_raw"].publish(img)
        return g.wait(lambda: g.output_count() > n0, 0.2)

    assert g.wait(served, 20.0), "valid frames were not turned into an Observation"


TARGETS = [
    Entry(
        name="aloha_sim+aloha_bridge",
        start=_aloha_start,
        inputs=[
            Input("trajectory", lambda g: bad_trajectory(g.nodes[1].names, g.now_s), JointTrajectory, RELIABLE_QOS),
            Input("execute_trajectory", lambda g: bad_trajectory(g.nodes[1].names, g.now_s),
                  action_type=ExecuteTrajectory),
            Input("left_arm_controller/joint_trajectory", lambda g: bad_trajectory(ALOHA_ARM, g.now_s),
                  JointTrajectory, RELIABLE_QOS),
            Input("joint_states", lambda g: bad_joint_state(g.nodes[1].state_joint_names), JointState, SENSOR_QOS),
        ],
        reporter={"trajectory": "aloha_bridge", "execute_trajectory": "aloha_bridge",
                  "left_arm_controller/joint_trajectory": "aloha_sim", "joint_states": "aloha_bridge"},
        quiet=[],
        ready=_aloha_ready,
        valid=_aloha_valid,
        motion=_aloha_motion,
        clock_node=1,  # the bridge, on sim time (the simulator's own controllers run on the same sim time)
    ),
    Entry(
        name="stitcher",
        start=_stitcher_start,
        inputs=[Input("action_chunk", lambda g: bad_chunk(("a", "b"), g.now_s), ActionChunk, RELIABLE_QOS)],
        reporter={"action_chunk": "stitcher"},
        quiet=[("trajectory", JointTrajectory, RELIABLE_QOS)],
        ready=lambda g: all(p.get_subscription_count() > 0 for p in g.pubs.values()),
        valid=_stitcher_valid,
    ),
    Entry(
        name="ingest",
        start=_ingest_start,
        inputs=[
            Input(f"cameras/{INGEST_CAMERA}/image_raw", lambda g: bad_image(g.now_s), Image, SENSOR_QOS),
            Input("joint_states", lambda g: bad_joint_state(INGEST_JOINTS), JointState, RELIABLE_QOS),
        ],
        reporter={f"cameras/{INGEST_CAMERA}/image_raw": "ingest", "joint_states": "ingest"},
        quiet=[("observation", Observation, RELIABLE_QOS)],
        ready=lambda g: all(p.get_subscription_count() > 0 for p in g.pubs.values()),
        valid=_ingest_valid,
    ),
]

TARGETS.append(Entry(
    name="chunker",
    start=_chunker_start,
    inputs=[
        Input("plan_features", lambda g: bad_plan_features(g.nodes[0].policy.cfg.cond_width, g.now_s),
              PlanFeatures, RELIABLE_QOS),
        Input("observation", lambda g: bad_observation(ALOHA_JOINTS, g.now_s), Observation, RELIABLE_QOS),
    ],
    reporter={"plan_features": "chunker", "observation": "chunker"},
    quiet=[("action_chunk", ActionChunk, RELIABLE_QOS)],
    ready=lambda g: all(p.get_subscription_count() > 0 for p in g.pubs.values()),
    valid=_chunker_valid,
))


@pytest.fixture(scope="module", params=TARGETS, ids=lambda e: e.name)
def graph(request):
    entry = request.param
    with ros_context() as ctx:
        g = Graph(ctx, entry)
        try:
            assert g.wait(lambda: entry.ready(g), 60.0), f"{entry.name}: graph did not come up"
            if entry.motion is not None:
                time.sleep(0.5)  # let the robot settle before measuring stillness
                g.still = _aloha_q(g)
            yield g
            # valid input afterwards is still served
            assert g.alive(), f"{entry.name}: a node died"
            entry.valid(g)
        finally:
            g.close()


def test_malformed_inputs_are_rejected_visibly_without_output_or_motion(graph, fuzz_cases):
    entry = graph.entry
    for inp in entry.inputs:
        strategy = inp.strategy(graph)
        reporter = entry.reporter[inp.name]

        # No shrinking: a failing case is reported as generated (shrinking would replay against changed state).
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
        @given(bad=strategy)
        def case(bad):
            msg = bad.msg
            before = graph.problem_count(reporter)
            outputs = graph.output_count()
            graph.send(inp, msg)
            visible = graph.wait(lambda: graph.problem_count(reporter) > before, REJECTION_TIMEOUT_S)
            fuzz_cases[f"{entry.name} <- {inp.name}"] += 1
            assert graph.alive(), f"{entry.name}: a node died on {bad!r}"
            assert visible, f"{reporter}: no WARN/ERROR in /diagnostics for {bad!r}"
            assert graph.output_count() == outputs, f"{entry.name}: bad input produced output: {bad!r}"
            if entry.motion is not None:
                moved = entry.motion(graph)
                assert moved < MOTION_TOLERANCE, f"{entry.name}: robot moved {moved:.4f} rad on {bad!r}"

        case()
