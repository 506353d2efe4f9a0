"""`plan-stack record` over real DDS: discovery, QoS matching, clean stop, a killed recorder's bag."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import yaml
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import String

from plan_stack.data.bags import read_bag
from plan_stack.data.record_cli import wanted_topic
from plan_stack.msg import VisualPlan
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.testing import executor_with, ros_context

pytestmark = pytest.mark.ros


def test_default_selection_skips_ros_internals():
    assert wanted_topic("/cameras/cam_high/image_raw", None)
    assert not wanted_topic("/rosout", None) and not wanted_topic("/parameter_events", None)
    assert not wanted_topic("/aloha_bridge/execute_trajectory/_action/status", None)
    assert wanted_topic("/plan", frozenset({"/plan"})) and not wanted_topic("/x", frozenset({"/plan"}))


class _Talker:
    """Publishes a reliable string, a best-effort image and a plan_stack VisualPlan at ~50 Hz."""

    def __init__(self, ctx):
        self.node = Node("record_test_talker", context=ctx)
        self.pubs = (self.node.create_publisher(String, "chatter", RELIABLE_QOS),
                     self.node.create_publisher(Image, "cam", SENSOR_QOS),
                     self.node.create_publisher(VisualPlan, "plan", RELIABLE_QOS))
        self.stop = threading.Event()
        self.sent = 0

    def run(self):
        img = Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(range(12)))
        while not self.stop.is_set():
            self.pubs[0].publish(String(data=f"m{self.sent}"))
            self.pubs[1].publish(img)
            self.pubs[2].publish(VisualPlan(subtask="reach", decoder="vflash"))
            self.sent += 1
            time.sleep(0.02)


def _record(bag, *extra):
    return subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "record", "--out", str(bag), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())


def _wait_for_messages(bag, proc, timeout_s=40.0) -> int:
    """Closed splits with messages of all three topics (the recorder has discovered and matched them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        meta = bag / "metadata.yaml"
        if meta.is_file():
            info = yaml.safe_load(meta.read_text())["rosbag2_bagfile_information"]
            topics = {t["topic_metadata"]["name"] for t in info["topics_with_message_count"]}
            if {"/chatter", "/cam", "/plan"} <= topics:
                return info["message_count"]
        time.sleep(0.1)
    raise AssertionError(f"recorder wrote nothing in {timeout_s} s: {proc.stdout.read() if proc.poll() else ''}")


@pytest.mark.parametrize("stop", ["sigint", "kill"])
def test_record_discovers_topics_and_leaves_a_readable_bag(tmp_path, stop):
    bag = tmp_path / "run"
    with ros_context() as ctx:
        talker = _Talker(ctx)
        with executor_with(ctx, talker.node):
            thread = threading.Thread(target=talker.run, daemon=True)
            thread.start()
            proc = _record(bag, "--split-s", "0.3")
            try:
                _wait_for_messages(bag, proc)
                if stop == "sigint":
                    proc.send_signal(signal.SIGINT)
                    assert proc.wait(timeout=30) == 0, proc.stdout.read()
                else:
                    proc.kill()
                    proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                talker.stop.set()
                thread.join()
    msgs = read_bag(bag)
    assert {"/chatter", "/cam", "/plan"} <= set(msgs) and "/rosout" not in msgs
    texts = [m.data for _, m in msgs["/chatter"]]
    assert texts and texts == sorted(texts, key=lambda t: int(t[1:]))  # in publication order
    assert bytes(np.asarray(msgs["/cam"][0][1].data, np.uint8)) == bytes(range(12))  # best effort was matched
    assert msgs["/plan"][0][1].subtask == "reach"
    times = [t for t, _ in msgs["/chatter"]]
    assert times == sorted(times)


def test_record_refuses_an_existing_bag(tmp_path):
    (tmp_path / "bag").mkdir()
    res = subprocess.run([sys.executable, "-m", "plan_stack.cli", "record", "--out", str(tmp_path / "bag")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "already exists" in res.stderr


def test_a_best_effort_topic_known_first_from_its_subscribers_is_recorded(tmp_path):
    """The closed-loop demo's order: the stack subscribes to the cameras, then the recorder starts, then the
    simulator publishes them best effort. The recorder waits for a publisher to match its QoS (it used to
    subscribe reliable at once and receive nothing), and a reliable subscription is redone best effort when a
    best-effort publisher joins later."""
    from plan_stack.data.bags import SplitBagWriter
    from plan_stack.data.record_cli import RecorderNode
    from plan_stack.ros.testing import spin_until
    from plan_stack.viz.bag import plan_typestore

    with ros_context() as ctx:
        stack = Node("record_test_stack", context=ctx)
        stack.create_subscription(Image, "cameras/cam_high/image_raw", lambda m: None, SENSOR_QOS)
        writer = SplitBagWriter(tmp_path / "bag", plan_typestore())
        rec = RecorderNode(writer, None, context=ctx)
        sim = Node("record_test_sim", context=ctx)
        with executor_with(ctx, stack, rec, sim) as ex:
            spin_until(ex, lambda: False, 0.5)  # the recorder's discovery sees the topic, without publishers
            assert "/cameras/cam_high/image_raw" not in rec._subs
            cam = sim.create_publisher(Image, "cameras/cam_high/image_raw", SENSOR_QOS)
            status = sim.create_publisher(String, "status", RELIABLE_QOS)  # reliable first ...
            img = Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(range(12)))
            topic = "/cameras/cam_high/image_raw"
            assert spin_until(ex, lambda: (cam.publish(img), rec.received.get(topic, 0) >= 3)[1], 20.0)
            assert spin_until(ex, lambda: (status.publish(String(data="r")), rec.received.get("/status", 0) >= 1)[1],
                              20.0)
            late = sim.create_publisher(String, "status", SENSOR_QOS)  # ... then a best-effort publisher joins
            n = rec.received["/status"]
            assert spin_until(ex, lambda: (late.publish(String(data="b")),
                                           rec.received["/status"] >= n + 3)[1], 20.0)
        rec.close()
        stack.destroy_node()
        sim.destroy_node()
    assert len(read_bag(tmp_path / "bag", ["/cameras/cam_high/image_raw"])["/cameras/cam_high/image_raw"]) >= 3


def test_excluded_types_are_skipped_with_the_reason(tmp_path):
    """`run-episodes --bag-dir` records commands and states only: image types are left out, named in `skipped`."""
    from plan_stack.data.bags import SplitBagWriter
    from plan_stack.data.record_cli import IMAGE_TYPES, RecorderNode
    from plan_stack.ros.testing import spin_until
    from plan_stack.viz.bag import plan_typestore

    with ros_context() as ctx:
        writer = SplitBagWriter(tmp_path / "bag", plan_typestore())
        rec = RecorderNode(writer, None, context=ctx, exclude_types=IMAGE_TYPES)
        talker = Node("record_test_excluding", context=ctx)
        cam = talker.create_publisher(Image, "cam", SENSOR_QOS)
        status = talker.create_publisher(String, "status", RELIABLE_QOS)
        img = Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(range(12)))
        with executor_with(ctx, rec, talker) as ex:
            assert spin_until(ex, lambda: (cam.publish(img), status.publish(String(data="s")),
                                           rec.received.get("/status", 0) >= 3 and "/cam" in rec.skipped)[2], 20.0)
        rec.close()
        talker.destroy_node()
    assert "excluded" in rec.skipped["/cam"]
    msgs = read_bag(tmp_path / "bag")
    assert "/cam" not in msgs and len(msgs["/status"]) >= 3
