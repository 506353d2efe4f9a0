"""config/plan_stack.rviz: every display's topic exists with its type in a running graph and delivers
messages under the QoS the display asks for (aloha_sim for the cameras, viz fed with a plan)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from plan_stack.paths import find_data

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from builtin_interfaces.msg import Time  # noqa: E402
from geometry_msgs.msg import Point  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from visualization_msgs.msg import Marker, MarkerArray  # noqa: E402

from plan_stack.embodiments.aloha.sim_node import AlohaSimNode  # noqa: E402
from plan_stack.msg import Observation, Primitive, VisualPlan  # noqa: E402
from plan_stack.ros.image import numpy_to_image  # noqa: E402
from plan_stack.ros.qos import RELIABLE_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.viz.viz_node import VizNode  # noqa: E402

assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST"

#: RViz display class -> (type name in the graph, message class) it subscribes to.
DISPLAY_TYPES = {
    "rviz_default_plugins/MarkerArray": ("visualization_msgs/msg/MarkerArray", MarkerArray),
    "rviz_default_plugins/Marker": ("visualization_msgs/msg/Marker", Marker),
    "rviz_default_plugins/Image": ("sensor_msgs/msg/Image", Image),
}
_RELIABILITY = {"Reliable": ReliabilityPolicy.RELIABLE, "Best Effort": ReliabilityPolicy.BEST_EFFORT}
_DURABILITY = {"Volatile": DurabilityPolicy.VOLATILE, "Transient Local": DurabilityPolicy.TRANSIENT_LOCAL}


def _rviz() -> dict:
    with open(find_data("config") / "plan_stack.rviz", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _displays(items):
    """Enabled displays with a topic, groups flattened."""
    for d in items:
        if d.get("Class") == "rviz_common/Group":
            yield from _displays(d.get("Displays", []))
        elif d.get("Enabled", True) and isinstance(d.get("Topic"), dict):
            yield d


def _qos(topic: dict) -> QoSProfile:
    assert topic["History Policy"] == "Keep Last"
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=int(topic["Depth"]),
                      reliability=_RELIABILITY[topic["Reliability Policy"]],
                      durability=_DURABILITY[topic["Durability Policy"]])


def test_file_structure_and_fixed_frame():
    cfg = _rviz()
    vm = cfg["Visualization Manager"]
    assert vm["Global Options"]["Fixed Frame"] == "cam_high_optical_frame"
    displays = list(_displays(vm["Displays"]))
    topics = {d["Topic"]["Value"]: d["Class"] for d in displays}
    assert topics["/viz/markers"] == "rviz_default_plugins/MarkerArray"
    assert topics["/viz/plan_overlay"] == "rviz_default_plugins/Image"
    for cam in ("cam_high", "cam_left_wrist", "cam_right_wrist"):
        assert topics[f"/cameras/{cam}/image_raw"] == "rviz_default_plugins/Image"
    for d in displays:
        assert d["Class"] in DISPLAY_TYPES, d["Class"]
        if d["Class"].endswith("/Image"):  # cameras publish best effort: a reliable reader would get nothing
            assert d["Topic"]["Reliability Policy"] == "Best Effort", d["Name"]


def test_every_display_topic_exists_with_its_type_and_delivers():
    displays = list(_displays(_rviz()["Visualization Manager"]["Displays"]))
    frame = _rviz()["Visualization Manager"]["Global Options"]["Fixed Frame"]
    with ros_context() as ctx:
        sim = AlohaSimNode(context=ctx, parameter_overrides=[
            Parameter("camera_width", value=64), Parameter("camera_height", value=48),
            Parameter("camera_rate_hz", value=10.0), Parameter("real_time_factor", value=0.0)])
        viz = VizNode(context=ctx)
        probe = Node("rviz_probe", context=ctx)
        got: dict[str, int] = {}
        for d in displays:
            topic = d["Topic"]["Value"]
            probe.create_subscription(DISPLAY_TYPES[d["Class"]][1], topic,
                                      lambda _m, t=topic: got.__setitem__(t, got.get(t, 0) + 1), _qos(d["Topic"]))
        plan_pub = probe.create_publisher(VisualPlan, "/plan", RELIABLE_QOS)
        obs_pub = probe.create_publisher(Observation, "/observation", RELIABLE_QOS)
        obs = Observation(camera_names=["cam_high"])
        obs.header.stamp = Time(sec=7)
        obs.images = [numpy_to_image(np.zeros((48, 64, 3), np.uint8), "rgb8")]
        plan = VisualPlan(subtask="grasp", primitives=[Primitive(
            kind="robot_2d3d", arm="left", frame_id=frame, uv=[10.0, 10.0, 20.0, 20.0],
            points=[Point(x=0.0, y=0.0, z=0.5), Point(x=0.1, y=0.0, z=0.5)])])
        plan.header.stamp = obs.header.stamp
        with executor_with(ctx, sim, viz, probe) as ex:
            ready = lambda: (viz._markers_pub.get_subscription_count() > 0
                             and viz._overlay_pub.get_subscription_count() > 0
                             and plan_pub.get_subscription_count() > 0 and obs_pub.get_subscription_count() > 0)
            assert spin_until(ex, ready, 15.0)
            obs_pub.publish(obs)
            assert spin_until(ex, lambda: len(viz._observations) == 1, 10.0)
            plan_pub.publish(plan)
            topics = [d["Topic"]["Value"] for d in displays]
            assert spin_until(ex, lambda: all(got.get(t) for t in topics), 30.0), \
                [t for t in topics if not got.get(t)]
            graph = dict(probe.get_topic_names_and_types())
    for d in displays:
        topic = d["Topic"]["Value"]
        assert DISPLAY_TYPES[d["Class"]][0] in graph.get(topic, []), (topic, graph.get(topic))
