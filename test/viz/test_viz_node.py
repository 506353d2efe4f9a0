"""viz node over real DDS: markers replace each other, overlays match their Observation, bad plans WARN."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from builtin_interfaces.msg import Time  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from geometry_msgs.msg import Point  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from visualization_msgs.msg import Marker, MarkerArray  # noqa: E402

from plan_stack.msg import Observation, Primitive, VisualPlan  # noqa: E402
from plan_stack.ros.image import image_to_numpy, numpy_to_image  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, RELIABLE_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.viz.config import VizStyle  # noqa: E402
from plan_stack.viz.viz_node import VizNode  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

H, W = 48, 64
NAN = float("nan")
FRAME = "cam_high_optical_frame"


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)


def _observation(sec: int, seed: int) -> Observation:
    obs = Observation(camera_names=["cam_high", "cam_left_wrist"])
    obs.header.stamp = Time(sec=sec, nanosec=500)
    obs.images = [numpy_to_image(_image(seed), "rgb8"), numpy_to_image(_image(seed + 100), "rgb8")]
    obs.images[0].header.frame_id = FRAME
    return obs


def _prim(kind, arm, pts, uv=()):
    return Primitive(kind=kind, arm=arm, frame_id=FRAME, points=[Point(x=float(a), y=float(b), z=float(c))
                                                                  for a, b, c in pts], uv=list(map(float, uv)))


def _plan(sec: int, prims, subtask="grasp") -> VisualPlan:
    plan = VisualPlan(subtask=subtask, primitives=prims)
    plan.header.stamp = Time(sec=sec, nanosec=500)
    return plan


LEFT = _prim("robot_2d3d", "left", [[0.1, 0.0, 0.5], [0.12, 0.01, 0.52], [0.15, 0.02, 0.55]],
             [10, 30, 20.4, 30, NAN, NAN])
RIGHT = _prim("robot_2d3d", "right", [[-0.1, 0.0, 0.5], [-0.2, 0.0, 0.6]], [50, 40, 55, 35])


class Probe:
    def __init__(self, ctx):
        self.node = Node("probe", context=ctx)
        self.markers: list[MarkerArray] = []
        self.overlays: list[Image] = []
        self.diags: list[DiagnosticStatus] = []
        self.plan_pub = self.node.create_publisher(VisualPlan, "plan", RELIABLE_QOS)
        self.obs_pub = self.node.create_publisher(Observation, "observation", RELIABLE_QOS)

    def watch(self, markers=True, overlay=True, diagnostics=True):
        if markers:
            self.node.create_subscription(MarkerArray, "viz/markers", self.markers.append, RELIABLE_QOS)
        if overlay:
            self.overlay_sub = self.node.create_subscription(Image, "viz/plan_overlay", self.overlays.append,
                                                             RELIABLE_QOS)
        if diagnostics:
            self.node.create_subscription(
                DiagnosticArray, "/diagnostics", lambda m: self.diags.extend(m.status), DIAGNOSTICS_QOS)


def _connected(viz: VizNode, probe: Probe, markers: bool = True, overlay: bool = True):
    """Discovery done: viz sees the probe's subscriptions, the probe sees viz's (observation only if watched)."""
    return lambda: (probe.plan_pub.get_subscription_count() > 0
                    and (viz._markers_pub.get_subscription_count() > 0) == markers
                    and (viz._overlay_pub.get_subscription_count() > 0) == overlay
                    and (probe.obs_pub.get_subscription_count() > 0) == overlay)


def _apply(live: dict, array: MarkerArray) -> None:
    """What RViz does with a MarkerArray: DELETEALL clears, ADD inserts or replaces by (ns, id)."""
    for m in array.markers:
        if m.action == Marker.DELETEALL:
            live.clear()
        elif m.action == Marker.ADD:
            live[(m.ns, m.id)] = m
        elif m.action == Marker.DELETE:
            live.pop((m.ns, m.id), None)


def test_markers_replace_the_previous_plan_and_carry_its_points():
    with ros_context() as ctx:
        viz = VizNode(context=ctx)
        probe = Probe(ctx)
        probe.watch(overlay=False, diagnostics=False)
        with executor_with(ctx, viz, probe.node) as ex:
            assert spin_until(ex, _connected(viz, probe, overlay=False), 10.0)
            probe.plan_pub.publish(_plan(1, [LEFT, RIGHT]))
            assert spin_until(ex, lambda: len(probe.markers) == 1, 10.0)
            probe.plan_pub.publish(_plan(2, [RIGHT], subtask="place"))
            assert spin_until(ex, lambda: len(probe.markers) == 2, 10.0)
    live: dict = {}
    _apply(live, probe.markers[0])
    first = dict(live)
    strips = [m for m in first.values() if m.type == Marker.LINE_STRIP]
    assert sorted(m.ns for m in strips) == ["plan/0_robot_2d3d_left", "plan/1_robot_2d3d_right"]
    for m, prim in zip(sorted(strips, key=lambda m: m.ns), (LEFT, RIGHT)):
        assert m.header.frame_id == FRAME and m.header.stamp == Time(sec=1, nanosec=500)
        assert [(p.x, p.y, p.z) for p in m.points] == [(p.x, p.y, p.z) for p in prim.points]
    assert [m.text for m in first.values() if m.type == Marker.TEXT_VIEW_FACING] == ["grasp"]
    assert probe.markers[1].markers[0].action == Marker.DELETEALL
    _apply(live, probe.markers[1])
    # nothing of the first plan lingers: only the right arm and the new sub-task remain
    assert {m.ns for m in live.values()} == {"plan/0_robot_2d3d_right", "plan/subtask"}
    assert all(m.header.stamp == Time(sec=2, nanosec=500) for m in live.values())
    assert [m.text for m in live.values() if m.type == Marker.TEXT_VIEW_FACING] == ["place"]
    assert len(live) == 5


def test_overlay_is_drawn_on_the_observation_with_the_plans_stamp():
    style = VizStyle()
    with ros_context() as ctx:
        viz = VizNode(context=ctx, parameter_overrides=[Parameter("overlay_camera", value="cam_high")])
        probe = Probe(ctx)
        probe.watch(markers=False, diagnostics=False)
        with executor_with(ctx, viz, probe.node) as ex:
            assert spin_until(ex, _connected(viz, probe, markers=False), 10.0)
            probe.obs_pub.publish(_observation(1, seed=1))
            probe.obs_pub.publish(_observation(2, seed=2))
            assert spin_until(ex, lambda: len(viz._observations) == 2, 10.0)
            probe.plan_pub.publish(_plan(1, [LEFT, RIGHT]))
            assert spin_until(ex, lambda: len(probe.overlays) == 1, 10.0)
            # a plan whose Observation comes later is drawn when it arrives
            probe.plan_pub.publish(_plan(3, [RIGHT]))
            assert spin_until(ex, lambda: viz._waiting is not None, 10.0)
            probe.obs_pub.publish(_observation(3, seed=3))
            assert spin_until(ex, lambda: len(probe.overlays) == 2, 10.0)
            # the last overlay viewer leaves: viz stops taking Observations
            probe.node.destroy_subscription(probe.overlay_sub)
            assert spin_until(ex, lambda: viz._observation_sub is None and not viz._observations, 10.0)
    first, second = probe.overlays
    assert first.header.stamp == Time(sec=1, nanosec=500) and first.header.frame_id == FRAME
    assert second.header.stamp == Time(sec=3, nanosec=500)
    for msg, seed, prims in ((first, 1, (LEFT, RIGHT)), (second, 3, (RIGHT,))):
        src, out = _image(seed), image_to_numpy(msg)
        assert out.shape == src.shape
        for prim in prims:
            for u, v in np.asarray(prim.uv).reshape(-1, 2):
                if np.isfinite(u):
                    assert tuple(out[int(round(v)), int(round(u))]) == style.rgb8_of(prim.arm)
        changed = np.any(out != src, axis=2)
        assert changed.any() and np.array_equal(out[~changed], src[~changed])
        assert not changed[H - 5:, :5].any()  # far from every drawing: the input pixels


def test_bad_plan_warns_and_publishes_nothing_and_idle_plans_cost_nothing():
    with ros_context() as ctx:
        viz = VizNode(context=ctx)
        probe = Probe(ctx)
        with executor_with(ctx, viz, probe.node) as ex:
            assert spin_until(ex, lambda: probe.plan_pub.get_subscription_count() > 0, 10.0)
            # nobody watches yet: the plan is counted as idle and not even converted, no Observation is taken
            probe.plan_pub.publish(_plan(1, [LEFT]))
            assert spin_until(ex, lambda: viz.counts["idle"] == 1, 10.0)
            assert viz._observation_sub is None and probe.obs_pub.get_subscription_count() == 0
            probe.watch()
            assert spin_until(ex, _connected(viz, probe), 10.0)
            probe.obs_pub.publish(_observation(5, seed=5))
            assert spin_until(ex, lambda: len(viz._observations) == 1, 10.0)
            bad = _prim("robot_2d3d", "left", [[0.1, NAN, 0.5], [0.1, 0.0, 0.5]], [1, 2, 3, 4])
            short_uv = _prim("robot_2d3d", "right", [[0.1, 0.0, 0.5], [0.1, 0.0, 0.5]], [1, 2])
            for prims in ([LEFT, bad], [_prim("spline", "", [[0, 0, 1]])], [short_uv]):
                probe.plan_pub.publish(_plan(5, prims))
            assert spin_until(ex, lambda: viz.counts["rejected"] == 3, 10.0)
            warns = lambda: [d for d in probe.diags if d.level == DiagnosticStatus.WARN and "plan skipped" in d.message]
            assert spin_until(ex, lambda: len(warns()) >= 3, 10.0)
            assert viz._diag.level("plan") == DiagnosticStatus.WARN
            probe.plan_pub.publish(_plan(5, [RIGHT]))
            assert spin_until(ex, lambda: probe.markers and probe.overlays, 10.0)
            assert viz._diag.level("plan") == DiagnosticStatus.OK  # a drawable plan clears the WARN
    messages = " | ".join(d.message for d in warns())
    assert "NaN" in messages and "unknown kind" in messages and "uv length 2 does not match 2 points" in messages
    # only the good plan came out
    assert len(probe.markers) == 1 and len(probe.overlays) == 1
    assert {m.ns for m in probe.markers[0].markers if m.type == Marker.LINE_STRIP} == {"plan/0_robot_2d3d_right"}
    assert viz.counts["plans"] == 5 and viz.counts["markers"] == 1
