"""`viz` node: VisualPlan -> RViz markers (`viz/markers`) and a 2D overlay (`viz/plan_overlay`).

Wiring only; what is drawn lives in `viz.markers` and `viz.overlay`.

Topics (node-relative): subscribes `plan` (plan_stack/VisualPlan) and
`observation` (plan_stack/Observation); publishes `viz/markers`
(visualization_msgs/MarkerArray, DELETEALL first so each plan replaces the
previous one), `viz/plan_overlay` (sensor_msgs/Image rgb8: the plan drawn on
the `overlay_camera` image of the Observation whose stamp equals the plan's;
a plan that arrives before its Observation waits for it) and `/diagnostics`.

Idle cost: when an output has no subscriber its work is skipped (checked
with `get_subscription_count()` per plan), so a plan nobody watches costs a
counter increment; `observation` is subscribed only while the overlay has a
subscriber (checked every `watcher_check_period`), so unwatched images are
not even received. A plan that cannot be drawn (NaN points, unknown kind,
wrong uv length, ...) is skipped whole with a WARN naming the rule.
"""
from __future__ import annotations

import collections
from typing import Any

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from rclpy.node import Node
from rclpy.subscription import Subscription
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from visualization_msgs.msg import Marker, MarkerArray

from plan_stack.msg import Observation, VisualPlan
from plan_stack.ros.diagnostics import OK, WARN, Diagnostics
from plan_stack.ros.image import ImageError, image_to_numpy, numpy_to_image
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import qos_by_name
from plan_stack.viz.config import VizConfig, VizStyle
from plan_stack.viz.markers import MarkerSpec, plan_markers
from plan_stack.viz.overlay import draw_overlay
from plan_stack.viz.plan import PlanView, VizError, check_plan, plan_from_fields, stamp_s

__all__ = ["VizNode", "main", "marker_to_msg", "markers_to_msg"]


def marker_to_msg(spec: MarkerSpec, stamp: Time, points: list[Point] | None = None) -> Marker:
    """One Marker from its spec. Fields are set on the default sub-messages (constructing each
    sub-message costs more than the copy); `points` reuses an already converted point list."""
    m = Marker()
    m.header.stamp = stamp
    m.header.frame_id = spec.frame_id
    m.ns, m.id, m.type, m.action, m.text = spec.ns, spec.id, spec.type, spec.action, spec.text
    m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(c) for c in spec.position)
    m.pose.orientation.w = 1.0
    m.scale.x, m.scale.y, m.scale.z = (float(c) for c in spec.scale)
    m.color.r, m.color.g, m.color.b, m.color.a = (float(c) for c in spec.rgba)
    m.points = points if points is not None else _points(spec.points)
    return m


def _points(array) -> list[Point]:
    return [Point(x=x, y=y, z=z) for x, y, z in array.tolist()]


def markers_to_msg(specs: list[MarkerSpec], stamp: Time) -> MarkerArray:
    """A MarkerArray; markers drawing the same point array share one converted point list."""
    cache: dict[int, list[Point]] = {}
    out = []
    for s in specs:
        pts = cache.get(id(s.points))
        if pts is None and len(s.points):
            pts = cache[id(s.points)] = _points(s.points)
        out.append(marker_to_msg(s, stamp, pts))
    return MarkerArray(markers=out)


class VizNode(Node):
    """Draws each VisualPlan for RViz: 3D markers and the 2D overlay on its Observation's image."""

    def __init__(self, **kwargs) -> None:
        super().__init__("viz", **kwargs)
        self.style = declare_config(self, VizStyle)
        self.cfg = cfg = declare_config(self, VizConfig)
        self._observations: collections.deque[Observation] = collections.deque(maxlen=cfg.observation_buffer)
        self._waiting: tuple[Time, PlanView] | None = None  # newest plan whose Observation has not arrived
        # plans, rejected, markers, overlays, idle, no_observation
        self.counts: collections.Counter[str] = collections.Counter()
        self._markers_pub = self.create_publisher(MarkerArray, "viz/markers", qos_by_name(cfg.markers_qos))
        self._overlay_pub = self.create_publisher(Image, "viz/plan_overlay", qos_by_name(cfg.overlay_qos))
        self.create_subscription(VisualPlan, "plan", self._on_plan, qos_by_name(cfg.plan_qos))
        self._observation_sub: Subscription | None = None  # exists only while someone watches the overlay
        self._diag = Diagnostics(self, cfg.diagnostics_period)
        self.create_timer(cfg.diagnostics_period, self._on_health)
        self.create_timer(cfg.watcher_check_period, self._on_watchers)

    # --- callbacks ----------------------------------------------------------------

    def _on_plan(self, msg: VisualPlan) -> None:
        self.counts["plans"] += 1
        want_markers = self._markers_pub.get_subscription_count() > 0
        want_overlay = self._overlay_pub.get_subscription_count() > 0
        if not (want_markers or want_overlay):
            self.counts["idle"] += 1
            return
        try:
            plan = check_plan(plan_from_fields(msg))
        except VizError as exc:
            self.counts["rejected"] += 1
            self._diag.report("plan", WARN, f"plan skipped: {exc}", now=True,
                              stamp_s=f"{stamp_s(msg.header.stamp):.6f}", rejected=self.counts["rejected"])
            return
        if self._diag.level("plan") != OK:
            self._diag.report("plan", OK, "drawing plans")
        if want_markers:
            self._markers_pub.publish(markers_to_msg(plan_markers(plan, self.style), msg.header.stamp))
            self.counts["markers"] += 1
        if want_overlay:
            obs = next((o for o in reversed(self._observations) if o.header.stamp == msg.header.stamp), None)
            if obs is None:
                if self._waiting is not None:
                    self._no_observation(self._waiting[1])
                self._waiting = (msg.header.stamp, plan)
            else:
                self._publish_overlay(obs, plan)

    def _on_observation(self, msg: Observation) -> None:
        self._observations.append(msg)
        if self._waiting is not None and self._waiting[0] == msg.header.stamp:
            plan = self._waiting[1]
            self._waiting = None
            self._publish_overlay(msg, plan)

    def _on_watchers(self) -> None:
        """Subscribe to Observations only while the overlay has a subscriber: unwatched, the node
        does not even receive (deserialise) the images."""
        watched = self._overlay_pub.get_subscription_count() > 0
        if watched and self._observation_sub is None:
            self._observation_sub = self.create_subscription(
                Observation, "observation", self._on_observation, qos_by_name(self.cfg.observation_qos))
        elif not watched and self._observation_sub is not None:
            self.destroy_subscription(self._observation_sub)
            self._observation_sub = None
            self._observations.clear()
            self._waiting = None

    def _on_health(self) -> None:
        c = self.counts  # counts since start; the "plan" and "overlay" statuses carry WARNs
        summary: dict[str, Any] = {k: c[k] for k in ("plans", "idle", "markers", "overlays", "rejected",
                                                    "no_observation")}
        self._diag.report("summary", OK, "plan counts since start", **summary)

    # --- helpers ------------------------------------------------------------------

    def _no_observation(self, plan: PlanView) -> None:
        self.counts["no_observation"] += 1
        self._diag.report("overlay", WARN,
                          f"no Observation stamped {plan.stamp_s:.6f} s arrived for a plan (overlay not drawn)")

    def _publish_overlay(self, obs: Observation, plan: PlanView) -> None:
        names = list(obs.camera_names)
        cam = self.cfg.overlay_camera or (names[0] if names else "")
        if cam not in names or len(obs.images) != len(names):
            self._diag.report("overlay", WARN, f"overlay_camera {cam!r} is not among the "
                              f"Observation's cameras {names} (overlay not drawn)", now=True)
            return
        src = obs.images[names.index(cam)]
        try:
            if src.encoding != "rgb8":
                raise ImageError(f"encoding {src.encoding!r}: the Observation carries rgb8")
            canvas = draw_overlay(image_to_numpy(src), plan, self.style)
        except (ImageError, VizError) as exc:
            self._diag.report("overlay", WARN, f"overlay not drawn: {exc}", now=True)
            return
        header = Header(stamp=obs.header.stamp, frame_id=src.header.frame_id)
        self._overlay_pub.publish(numpy_to_image(canvas, "rgb8", header))
        self.counts["overlays"] += 1

main = node_main(VizNode)
