"""Whole-graph fuzzing over DDS: real nodes receive malformed messages on every input.

Each entry of TARGETS starts real nodes (one rclpy context, each node on its
own executor thread, as `plan-stack up` runs them) and lists its inputs; every
input gets FUZZ_EXAMPLES hypothesis-generated malformed messages (wrong sizes
and encodings, NaN/inf, empty and huge arrays, unknown and duplicated names,
zero/negative dt, stamps far in the past/future or going backwards). After
every case: no node thread died, the rejection is visible in /diagnostics
(a WARN or ERROR status from the node that received it), and no output or
motion came of it; after all cases, valid input is still served.

Adding a node: write an `Entry` (a `start` that builds the node(s), `inputs`
with a strategy of malformed messages per topic or action, the `quiet`
outputs that must stay silent, a `valid` check) and append it to TARGETS;
the tests are generated from the table. An input can narrow the outputs that
must stay silent (`Input.quiet`) and send a companion message after each bad
one (`Input.follow`: viz draws an overlay only when a plan meets its
Observation).
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
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

from action_msgs.msg import GoalStatus  # noqa: E402
from builtin_interfaces.msg import Duration, Time  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from geometry_msgs.msg import Point  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402
from visualization_msgs.msg import MarkerArray  # noqa: E402

from plan_stack.action import ExecuteTrajectory, PlanRequest  # noqa: E402
from plan_stack.msg import (  # noqa: E402
    ActionChunk,
    BridgeState,
    DriveTrajectory,
    Observation,
    PlanFeatures,
    Primitive,
    VisualPlan,
)
from plan_stack.ros.diagnostics import Diagnostics  # noqa: E402
from plan_stack.ros.lifecycle import executor_for  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import ros_context  # noqa: E402
from plan_stack.ros.time import ns_to_stamp, s_to_duration  # noqa: E402

from .conftest import EXAMPLES  # noqa: E402

#: How long a rejection may take to show up in /diagnostics (s, wall; generous for loaded machines).
REJECTION_TIMEOUT_S = 10.0
#: Sim time (s) the graph runs before fuzzing, so that a trajectory stamped at the clock's origin is stale.
STALE_AFTER_S = 5.0
#: A best-effort input whose rejection has not shown up after this long is sent again (s, wall).
RESEND_S = 0.5
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


TRAJECTORY_DEFECTS = ("names", "sizes", "non_finite", "times", "stale", "future", "empty", "huge")


@st.composite
def bad_trajectory(draw, joints, now_s, defects=TRAJECTORY_DEFECTS):
    """A JointTrajectory for `joints` with at least one defect (stamps relative to the receiver's clock)."""
    defect = draw(st.sampled_from(list(defects)))
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
def bad_bridge_state(draw):
    """A bridge_state whose state is none of WAITING, READY, PROTECTIVE_STOP (with any refusal fields)."""
    msg = BridgeState(state=draw(st.integers(3, 255)), reason=draw(st.text(max_size=20)),
                      refused=draw(st.integers(0, 2**32 - 1)), refused_code=draw(st.integers(-(2**31), 2**31 - 1)))
    msg.refused_stamp = _stamp(draw(BAD_STAMPS_S))
    return Case("state", msg)


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
    """An ActionChunk with one defect (the receiver's position limits are +-3)."""
    defect = draw(st.sampled_from(["names", "dt", "shape", "non_finite", "stale", "future", "empty", "huge",
                                   "horizon", "long", "beyond_limits"]))
    names = draw(_names(joints, defect == "names"))
    horizon = {"huge": 20000, "long": 2000, "horizon": draw(st.integers(0, 2))}.get(defect, 10)
    dt = 0.02 if defect != "dt" else draw(st.sampled_from([0.0, -0.02, math.nan, math.inf, -math.inf]))
    pos = [0.0] * (horizon * len(names))
    if defect == "shape":
        pos = pos + [0.0] * draw(st.integers(1, 3))
    if defect == "huge":  # 40,000 values that do not fill the stated horizon x joints
        pos = pos[:-1]
    if defect == "non_finite" and pos:
        pos[draw(st.integers(0, len(pos) - 1))] = draw(bad_floats)
    if defect == "beyond_limits":
        pos[draw(st.integers(0, len(pos) - 1))] = draw(st.sampled_from([3.5, -4.0, 1e300, -1e300]))
    if defect == "empty":
        pos = []
    msg = ActionChunk(joint_names=names, dt=dt, horizon=horizon, positions=pos)
    stamp_s = now_s() - (draw(st.sampled_from([100.0, 1e5])) if defect == "stale" else 0.0)
    if defect == "future":
        stamp_s = now_s() + draw(st.sampled_from([5.0, 1e5]))
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


@st.composite
def bad_drive_plan(draw, now_s):
    """A VisualPlan whose drive primitive cannot be followed, or that has none."""
    defect = draw(st.sampled_from(["no_drive", "empty", "origin", "reverse", "non_finite", "horizon", "future",
                                   "stale", "huge"]))
    pts = [(2.5 * k, 0.0, 0.0) for k in range(1, 9)]
    horizon_s = 4.0
    if defect == "empty":
        pts = []
    if defect == "origin":
        pts = [(0.0, 0.0, 0.0)] * 8
    if defect == "reverse":
        pts = [(2.0, 0.0, 0.0), (4.0, 0.0, 0.0), (1.0, 0.0, 0.0)]
    if defect == "non_finite":
        i = draw(st.integers(0, len(pts) - 1))
        pts[i] = (pts[i][0], draw(NON_FINITE), 0.0)
    if defect == "horizon":
        horizon_s = draw(st.sampled_from([-1.0, math.nan, math.inf]))
    if defect == "huge":  # 20,000 waypoints, all at the ego origin
        pts = [(0.0, 0.0, 0.0)] * 20000
    kind = "box" if defect == "no_drive" else draw(st.sampled_from(["drive_3d", "drive_2d3d"]))
    prim = Primitive(kind=kind, frame_id="base_link", horizon_s=horizon_s, fallback_from=-1,
                     points=[Point(x=float(x), y=float(y), z=float(z)) for x, y, z in pts])
    if kind == "box":
        prim.uv = [1.0, 2.0, 3.0, 4.0]
    msg = VisualPlan(primitives=[prim])
    offset = {"future": draw(st.sampled_from([10.0, 1e5])), "stale": -draw(st.sampled_from([30.0, 1e5]))}
    msg.header.stamp = ns_to_stamp(max(0, int((now_s() + offset.get(defect, 0.0)) * 1e9)))
    msg.header.frame_id = "base_link"
    return Case(defect, msg)


@st.composite
def bad_odometry(draw, now_s):
    defect = draw(st.sampled_from(["non_finite_pose", "non_finite_twist", "future"]))
    msg = Odometry()
    msg.pose.pose.orientation.w = 1.0
    msg.twist.twist.linear.x = 1.0
    if defect == "non_finite_pose":
        msg.pose.pose.position.x = draw(NON_FINITE)
    if defect == "non_finite_twist":
        msg.twist.twist.linear.x = draw(NON_FINITE)
    msg.header.stamp = ns_to_stamp(int((now_s() + (draw(st.sampled_from([10.0, 1e5])) if defect == "future"
                                                 else 0.0)) * 1e9))
    return Case(defect, msg)


def _rgb(w: int, h: int, stamp: Time | None = None) -> Image:
    im = Image(width=w, height=h, encoding="rgb8", step=3 * w, data=bytes(3 * w * h))
    if stamp is not None:
        im.header.stamp = stamp
    return im


PLANNER_OBSERVATION_DEFECTS = ("names", "missing_camera", "encoding", "size", "data", "empty_image", "non_finite",
                               "joint_sizes", "stale", "future")
#: viz draws on any decodable image and ignores joints and stamps (a plan picks its Observation by stamp)
VIZ_OBSERVATION_DEFECTS = ("names", "missing_camera", "encoding", "data")


@st.composite
def bad_camera_observation(draw, cameras, size, now_s, defects=PLANNER_OBSERVATION_DEFECTS):
    """An Observation whose images, joint state or stamp cannot be used (planner, viz)."""
    defect = draw(st.sampled_from(defects))
    w, h = size
    names = list(cameras)
    images = [_rgb(w, h) for _ in names]
    q, joints = [0.1, 0.2], ["j0", "j1"]
    if defect == "names":
        names = names + ["extra"]
    if defect == "missing_camera":
        names = ["other"] + names[1:]
    i = draw(st.integers(0, len(images) - 1))
    if defect == "encoding":
        images[i].encoding = draw(st.sampled_from(["", "bogus", "32FC7", "mono8"]))
    if defect == "size":
        images[i] = _rgb(w + draw(st.sampled_from([-1, 1, 100])), h)
    if defect == "data":
        images[i].data = bytes(draw(st.integers(0, 3 * w * h - 1)))
    if defect == "empty_image":
        images[i] = Image(encoding="rgb8")
    if defect == "non_finite":
        q[draw(st.integers(0, 1))] = draw(NON_FINITE)
    if defect == "joint_sizes":
        q = q + [0.0]
    msg = Observation(camera_names=names, images=images, joint_state=JointState(name=joints, position=q))
    offset = {"stale": -draw(st.sampled_from([60.0, 1e5])), "future": draw(st.sampled_from([60.0, 1e5]))}
    msg.header.stamp = ns_to_stamp(max(0, int((now_s() + offset.get(defect, 0.0)) * 1e9)))
    return Case(defect, msg)


@st.composite
def bad_plan_request(draw, kinds):
    """A PlanRequest goal asking for kinds the model does not emit."""
    defect = draw(st.sampled_from(["unknown", "mixed", "empty_name", "huge"]))
    wanted = {"unknown": ["no_such_kind"], "mixed": [kinds[0], "bogus"], "empty_name": [""],
              "huge": [f"k{i}" for i in range(1000)]}[defect]
    return Case(defect, PlanRequest.Goal(instruction="pick", primitive_kinds=wanted))


@st.composite
def bad_viz_plan(draw, now_s):
    """A VisualPlan viz cannot draw faithfully."""
    defect = draw(st.sampled_from(["kind", "arm", "non_finite", "no_frame", "box_uv", "box_order", "odd_uv",
                                   "half_pair", "inf_uv", "nothing", "huge"]))
    pts = [Point(x=0.1 * k, y=0.0, z=0.0) for k in range(3)]
    prim = Primitive(kind="robot_2d3d", frame_id="world", points=pts, uv=[1.0, 2.0] * 3, fallback_from=-1)
    if defect == "kind":
        prim.kind = draw(st.sampled_from(["", "bogus", "ROBOT_3D"]))
    if defect == "arm":
        prim.arm = "middle"
    if defect == "non_finite":
        prim.points[draw(st.integers(0, 2))].y = draw(NON_FINITE)
    if defect == "no_frame":
        prim.frame_id = ""
    if defect in ("box_uv", "box_order"):
        prim = Primitive(kind="box", uv=[1.0, 2.0, 3.0] if defect == "box_uv" else [5.0, 5.0, 1.0, 1.0])
    if defect == "odd_uv":
        prim.uv = [1.0, 2.0, 3.0]
    if defect == "half_pair":
        prim.uv = [1.0, math.nan, 3.0, 4.0, 5.0, 6.0]
    if defect == "inf_uv":
        prim.uv = [1.0, math.inf, 3.0, 4.0, 5.0, 6.0]
    if defect == "nothing":
        prim = Primitive(kind="points", fallback_from=-1)
    if defect == "huge":  # 20,000 points, the last one NaN
        prim = Primitive(kind="robot_3d", frame_id="world", fallback_from=-1,
                         points=[Point(x=0.0, y=0.0, z=0.0)] * 19999 + [Point(x=math.nan)])
    msg = VisualPlan(primitives=[Primitive(kind="box", uv=[1.0, 2.0, 3.0, 4.0]), prim])
    msg.header.stamp = ns_to_stamp(int(now_s() * 1e9))
    return Case(defect, msg)


# --- the graph under test ---------------------------------------------------------------------


@dataclasses.dataclass
class Input:
    """One fuzzed input: a topic (`msg_type` + `qos`) or an action (`action_type`)."""

    name: str
    strategy: Callable[[Graph], st.SearchStrategy]
    msg_type: Any = None
    qos: Any = None
    action_type: Any = None
    quiet: tuple[str, ...] | None = None  # the entry's quiet outputs that must stay silent (None: all)
    follow: Callable[[Graph, Any], None] | None = None  # sends a companion message after each bad one


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
        self.lock = threading.Lock()
        self.fuzzed_states: set[tuple] = set()  # positions of the fuzzer's own joint_states (not the robot's)
        self.reports: dict[str, int] = {}  # node name -> WARN/ERROR reports published at once (now=True)
        for node in self.nodes:
            for diag in {id(v): v for v in vars(node).values() if isinstance(v, Diagnostics)}.values():
                self._count_reports(node.get_name(), diag)
        self.probe = Node("fuzzer", context=ctx)
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

    def _count_reports(self, name: str, diag) -> None:
        """Count the node's fresh rejections: its periodic republishing repeats a WARN that is still in force,
        so a WARN arriving over DDS alone does not show that *this* input was rejected."""
        report = diag.report

        def counted(status, level, message, now=False, **values):
            if now and level in (DiagnosticStatus.WARN, DiagnosticStatus.ERROR):
                with self.lock:
                    self.reports[name] = self.reports.get(name, 0) + 1
            return report(status, level, message, now=now, **values)

        diag.report = counted

    def report_count(self, node_name: str) -> int:
        with self.lock:
            return self.reports.get(node_name, 0)

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
                math.isfinite(q) for q in msg.position) and tuple(msg.position) not in self.fuzzed_states:
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

    def output_count(self, topics=None) -> int:
        with self.lock:
            return sum(len(v) for t, v in self.outputs.items() if topics is None or t in topics)

    def send(self, inp: Input, msg) -> None:
        if isinstance(msg, JointState):
            with self.lock:
                self.fuzzed_states.add(tuple(msg.position))
        if inp.msg_type is not None:
            self.pubs[inp.name].publish(msg)
        else:
            client = self.actions[inp.name]
            assert client.wait_for_server(timeout_sec=10.0)
            goal = msg if isinstance(msg, inp.action_type.Goal) else inp.action_type.Goal(trajectory=msg)
            future = client.send_goal_async(goal)
            assert self.wait(future.done, REJECTION_TIMEOUT_S)
            handle = future.result()
            if handle.accepted:
                result = handle.get_result_async()
                assert self.wait(result.done, REJECTION_TIMEOUT_S)
                assert result.result().status != GoalStatus.STATUS_SUCCEEDED, "a malformed goal succeeded"
                assert getattr(result.result().result, "error_code", -1) != 0, "a malformed goal succeeded"
        if inp.follow is not None:
            inp.follow(self, msg)

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
    return _aloha_q(g) is not None and bridge.bridge.measured is not None and g.now_s() > STALE_AFTER_S and all(
        p.get_subscription_count() > 0 for p in g.pubs.values())


def _aloha_motion(g: Graph) -> float:
    q = _aloha_q(g)
    arms = [i for i in range(14) if i not in (6, 13)]
    return float(np.max(np.abs(q[arms] - g.still[arms])))


def _aloha_valid(g: Graph) -> None:
    """A valid ExecuteTrajectory goal (left waist +0.1 rad over 1 s) is executed and the sim follows."""
    bridge = g.nodes[1]
    with bridge._lock:
        q0 = np.array(bridge.bridge.measured)
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


def _stitcher_start(ctx, initial_state="chunk"):
    from plan_stack.trajectory.stitcher_node import StitcherNode

    return [StitcherNode(context=ctx, parameter_overrides=[
        Parameter("joint_names", value=["a", "b"]), Parameter("initial_state", value=initial_state),
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


def _stitcher_bridge_valid(g: Graph) -> None:
    """The bridge reports a hold, then a valid chunk: stitched onto the hold."""
    n0 = g.output_count()
    hold = JointTrajectory(joint_names=["a", "b"], points=[JointTrajectoryPoint(positions=[0.0, 0.0],
                                                                                 time_from_start=_duration(0.0))])
    hold.header.stamp = ns_to_stamp(int(g.now_s() * 1e9))
    g.pubs["active_trajectory"].publish(hold)
    # two topics, no order between them: the chunk must not overtake the hold it is to be stitched onto
    assert g.wait(lambda: g.nodes[0].start.executing is not None, 10.0), "the bridge's hold was not received"
    assert g.nodes[0].start.paused is None, "an unknown bridge_state was taken for a protective stop"
    if "action_chunk" not in g.pubs:  # valid input only: action_chunk itself is fuzzed by the "stitcher" entry
        g.pubs["action_chunk"] = g.probe.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        assert g.wait(lambda: g.pubs["action_chunk"].get_subscription_count() > 0, 10.0)
    _stitcher_valid(g)
    assert g.output_count() > n0


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
            Input("joint_states", lambda g: bad_joint_state(g.nodes[1].cfg.state_joint_names), JointState, SENSOR_QOS),
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
        # what the bridge reports executing; a stamp in the past is no defect here (the bridge holds at its
        # last point), so the stale case is not sent
        name="stitcher_bridge_mode",
        start=lambda ctx: _stitcher_start(ctx, initial_state="bridge"),
        inputs=[Input("active_trajectory",
                      lambda g: bad_trajectory(("a", "b"), g.now_s,
                                               tuple(d for d in TRAJECTORY_DEFECTS if d != "stale")),
                      JointTrajectory, LATCHED_QOS),
                Input("bridge_state", lambda g: bad_bridge_state(), BridgeState, LATCHED_QOS)],
        reporter={"active_trajectory": "stitcher", "bridge_state": "stitcher"},
        quiet=[("trajectory", JointTrajectory, RELIABLE_QOS)],
        ready=lambda g: all(p.get_subscription_count() > 0 for p in g.pubs.values()),
        valid=_stitcher_bridge_valid,
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


# drive_bridge: driving plans and odometry (wall clock; the probe plays the vehicle's odometry).


def _drive_start(ctx):
    from plan_stack.embodiments.drive.bridge_node import DriveBridgeNode

    return [DriveBridgeNode(context=ctx, parameter_overrides=[Parameter("watchdog_timeout", value=60.0)])]


def _drive_odom(g: Graph, t_s: float | None = None) -> None:
    msg = Odometry()
    msg.header.stamp = ns_to_stamp(int((g.now_s() if t_s is None else t_s) * 1e9))
    msg.pose.pose.orientation.w = 1.0
    msg.twist.twist.linear.x = 5.0
    g.pubs["odom"].publish(msg)


def _drive_ready(g: Graph) -> bool:
    """Odometry known and the watchdog's first stop (nothing covers the present yet) received, so that
    every later output would come from the fuzzed input."""
    if not all(p.get_subscription_count() > 0 for p in g.pubs.values()):
        return False
    if g.nodes[0].bridge.history.latest is None:
        _drive_odom(g)
        return False
    return g.nodes[0].bridge.stopped and g.output_count() >= 1


def _drive_valid(g: Graph) -> None:
    n0 = g.output_count()

    def served():
        now = g.now_s()
        _drive_odom(g, now)
        time.sleep(0.05)
        prim = Primitive(kind="drive_3d", frame_id="base_link", horizon_s=4.0, fallback_from=-1,
                         points=[Point(x=2.5 * k, y=0.0, z=0.0) for k in range(1, 9)])
        plan = VisualPlan(primitives=[prim])
        plan.header.stamp, plan.header.frame_id = ns_to_stamp(int(now * 1e9)), "base_link"
        g.pubs["plan"].publish(plan)
        return g.wait(lambda: g.output_count() > n0, 1.0)

    assert g.wait(served, 20.0), "a valid plan was not turned into a drive trajectory"


# planner: a tiny random model directory built here (the real loading path; PREFIX forces one primitive).


def _planner_start(ctx):
    from plan_stack.planning.planner_node import PlannerNode
    from plan_stack.planning.tiny_models import PREFIX, make_model_dir

    path = make_model_dir(f"{tempfile.mkdtemp(prefix='fuzz_planner_')}/m", budget=40)
    return [PlannerNode(context=ctx, parameter_overrides=[
        Parameter("model_dir", value=str(path)), Parameter("response_prefix", value=PREFIX),
        Parameter("max_observation_age_s", value=5.0), Parameter("torch_threads", value=1)])]


def _planner_observation(g: Graph) -> Observation:
    from plan_stack.planning.tiny_models import CAMERAS, images
    from plan_stack.ros.image import numpy_to_image

    msg = Observation(camera_names=list(CAMERAS), images=[numpy_to_image(im, "rgb8") for im in images(0)],
                      joint_state=JointState(name=["j0", "j1"], position=[0.1, 0.2]))
    msg.header.stamp = ns_to_stamp(int(g.now_s() * 1e9))
    return msg


def _planner_valid(g: Graph) -> None:
    n0 = g.output_count()

    def served():
        g.pubs["observation"].publish(_planner_observation(g))
        return g.wait(lambda: g.output_count() > n0, 5.0)

    assert g.wait(served, 60.0), "a valid observation was not planned from"


def _planner_strategy(kind):
    from plan_stack.planning.tiny_models import CAMERAS, SIZE

    if kind == "observation":
        return lambda g: bad_camera_observation(CAMERAS, SIZE, g.now_s)
    return lambda g: bad_plan_request(sorted(g.nodes[0].runtime.emitted_kinds))


# viz: plans it cannot draw; Observations it cannot draw on (each followed by a drawable plan of its stamp).

VIZ_CAMERA = "cam"


def _viz_start(ctx):
    from plan_stack.viz.viz_node import VizNode

    return [VizNode(context=ctx, parameter_overrides=[
        Parameter("overlay_camera", value=VIZ_CAMERA), Parameter("watcher_check_period", value=0.1)])]


def _viz_plan(stamp: Time) -> VisualPlan:
    msg = VisualPlan(primitives=[Primitive(kind="box", uv=[1.0, 2.0, 6.0, 5.0])])
    msg.header.stamp = stamp
    return msg


def _viz_follow(g: Graph, obs: Observation) -> None:
    g.pubs["plan"].publish(_viz_plan(obs.header.stamp))


def _viz_valid(g: Graph) -> None:
    n0 = g.output_count(("viz/plan_overlay",))

    def served():
        stamp = ns_to_stamp(int(g.now_s() * 1e9))
        obs = Observation(camera_names=[VIZ_CAMERA], images=[_rgb(16, 12)])
        obs.header.stamp = stamp
        g.pubs["observation"].publish(obs)
        g.pubs["plan"].publish(_viz_plan(stamp))
        return g.wait(lambda: g.output_count(("viz/plan_overlay",)) > n0, 1.0)

    assert g.wait(served, 20.0), "a valid plan and its Observation gave no overlay"


TARGETS += [
    Entry(
        name="drive_bridge",
        start=_drive_start,
        inputs=[
            Input("plan", lambda g: bad_drive_plan(g.now_s), VisualPlan, RELIABLE_QOS),
            Input("odom", lambda g: bad_odometry(g.now_s), Odometry, SENSOR_QOS),
        ],
        reporter={"plan": "drive_bridge", "odom": "drive_bridge"},
        quiet=[("drive_trajectory", DriveTrajectory, RELIABLE_QOS)],
        ready=_drive_ready,
        valid=_drive_valid,
    ),
    Entry(
        name="planner",
        start=_planner_start,
        inputs=[
            Input("observation", _planner_strategy("observation"), Observation, RELIABLE_QOS),
            Input("plan_request", _planner_strategy("plan_request"), action_type=PlanRequest),
        ],
        reporter={"observation": "planner", "plan_request": "planner"},
        quiet=[("plan", VisualPlan, RELIABLE_QOS), ("plan_features", PlanFeatures, RELIABLE_QOS)],
        ready=lambda g: all(p.get_subscription_count() > 0 for p in g.pubs.values()),
        valid=_planner_valid,
    ),
    Entry(
        name="viz",
        start=_viz_start,
        inputs=[
            Input("plan", lambda g: bad_viz_plan(g.now_s), VisualPlan, RELIABLE_QOS),
            Input("observation", lambda g: bad_camera_observation([VIZ_CAMERA], (16, 12), g.now_s,
                                                                  VIZ_OBSERVATION_DEFECTS),
                  Observation, RELIABLE_QOS, quiet=("viz/plan_overlay",), follow=_viz_follow),
        ],
        reporter={"plan": "viz", "observation": "viz"},
        quiet=[("viz/markers", MarkerArray, RELIABLE_QOS), ("viz/plan_overlay", Image, RELIABLE_QOS)],
        ready=lambda g: all(p.get_subscription_count() > 0 for p in g.pubs.values())
        and g.nodes[0]._observation_sub is not None,
        valid=_viz_valid,
    ),
]


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
        best_effort = inp.qos is not None and inp.qos.reliability == ReliabilityPolicy.BEST_EFFORT

        # No shrinking: a failing case is reported as generated (shrinking would replay against changed state).
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
        @given(bad=strategy)
        def case(bad):
            msg = bad.msg
            before, reported = graph.problem_count(reporter), graph.report_count(reporter)
            outputs = graph.output_count(inp.quiet)
            graph.send(inp, msg)
            sent = [time.monotonic()]

            def rejected() -> bool:
                """This input's rejection was reported at once, and a WARN/ERROR reached /diagnostics over DDS.
                Best-effort inputs may be dropped on the way (as on a real network): they are sent again."""
                if graph.report_count(reporter) > reported and graph.problem_count(reporter) > before:
                    return True
                if best_effort and time.monotonic() - sent[0] > RESEND_S:
                    graph.send(inp, msg)
                    sent[0] = time.monotonic()
                return False

            visible = graph.wait(rejected, REJECTION_TIMEOUT_S)
            fuzz_cases[f"{entry.name} <- {inp.name}"] += 1
            assert graph.alive(), f"{entry.name}: a node died on {bad!r}"
            assert visible, f"{reporter}: no WARN/ERROR in /diagnostics for {bad!r}"
            if inp.follow is not None:  # give the companion's output, if any, time to arrive
                graph.wait(lambda: False, 0.2)
            assert graph.output_count(inp.quiet) == outputs, f"{entry.name}: bad input produced output: {bad!r}"
            if entry.motion is not None:
                moved = entry.motion(graph)
                assert moved < MOTION_TOLERANCE, f"{entry.name}: robot moved {moved:.4f} rad on {bad!r}"

        case()
