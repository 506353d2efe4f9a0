"""`plan-stack record --out BAG [TOPIC ...]`: live topics to a rosbag2 (MCAP) bag.

Records every topic it discovers (default: all but `/rosout`,
`/parameter_events` and hidden topics, i.e. cameras, joint states, `/clock`
and everything the stack publishes) or only the named ones, as serialised
bytes (raw subscriptions: nothing is deserialised). Topics that appear later
are picked up by periodic discovery. QoS follows the publishers: best effort
when any publisher is best effort (a reliable subscription would receive
nothing from it), transient-local when all are (latched topics). A topic is
subscribed only once it has a publisher (a topic known only from its
subscribers, e.g. the cameras before the simulator starts, has no QoS to
match yet), and a reliable subscription is made again best effort when a
best-effort publisher joins later.

The bag is written in closed splits (`data.bags.SplitBagWriter`):
Ctrl-C / SIGTERM close it cleanly; a killed recorder leaves a readable bag
up to the last closed split (`--split-s`, default 2 s).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from plan_stack.data.bags import BagWriterError, SplitBagWriter

__all__ = ["EXCLUDED_TOPICS", "IMAGE_TYPES", "RecorderNode", "wanted_topic", "message_class", "add_arguments", "run"]

EXCLUDED_TOPICS = frozenset({"/rosout", "/parameter_events"})


#: message types that carry images: what `RecorderNode(exclude_types=IMAGE_TYPES)` leaves out (their writing is
#: most of a recorder's load; `run-episodes --bag-dir` keeps commands and states only)
IMAGE_TYPES = frozenset({"sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage", "plan_stack/msg/Observation"})


def wanted_topic(name: str, requested: frozenset[str] | None) -> bool:
    """Requested topics exactly; by default all but the excluded and hidden (`/_...`) ones."""
    if requested is not None:
        return name in requested
    return name not in EXCLUDED_TOPICS and "/_" not in name


def message_class(msgtype: str) -> Any:
    """The Python class of `pkg/msg/Name` (ImportError naming the package when it is not installed)."""
    pkg, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


class RecorderNode(Node):
    """Subscribes raw to the wanted topics as they appear and writes every message to the bag."""

    def __init__(self, writer: SplitBagWriter, topics: frozenset[str] | None, discovery_period_s: float = 0.2,
                 on_message: Callable[[str], None] | None = None, exclude_types: frozenset[str] = frozenset(),
                 **kwargs: Any) -> None:
        super().__init__("recorder", **kwargs)
        self.writer = writer
        self._exclude_types = frozenset(exclude_types)  # e.g. images: a bag of commands and states stays small
        self._on_message = on_message
        self._requested = topics
        self._subs: dict[str, Any] = {}
        self._classes: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}
        self.received: dict[str, int] = {}
        self._discover()
        self.create_timer(discovery_period_s, self._discover)
        self.create_timer(0.25, writer.maybe_split)

    def _qos(self, topic: str) -> QoSProfile:
        infos = self.get_publishers_info_by_topic(topic)
        best_effort = any(i.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT for i in infos)
        latched = bool(infos) and all(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                          reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)

    def _discover(self) -> None:
        for name, types in self.get_topic_names_and_types():
            if name in self._subs:
                self._rematch(name)
                continue
            if name in self.skipped or not wanted_topic(name, self._requested):
                continue
            if self.count_publishers(name) == 0:  # known from subscribers only: no QoS to match yet
                continue
            if len(types) != 1:
                self._skip(name, f"several types on one topic: {types}")
                continue
            if types[0] in self._exclude_types:
                self._skip(name, f"type {types[0]} excluded")
                continue
            try:
                cls = message_class(types[0])
                self.writer.add_topic(name, types[0])
            except (ImportError, AttributeError, ValueError) as exc:
                self._skip(name, f"type {types[0]} cannot be recorded: {exc}")
                continue
            self._classes[name] = cls
            self._subs[name] = self.create_subscription(cls, name, self._callback(name), self._qos(name),
                                                        raw=True)
            self.get_logger().info(f"recording {name} ({types[0]})")

    def _rematch(self, name: str) -> None:
        """A reliable subscription receives nothing from a best-effort publisher: subscribe again best effort
        when one has joined (a best-effort subscription already receives from every publisher)."""
        sub = self._subs[name]
        if sub.qos_profile.reliability != ReliabilityPolicy.RELIABLE:
            return
        qos = self._qos(name)
        if qos.reliability == ReliabilityPolicy.RELIABLE:
            return
        self.destroy_subscription(sub)
        self._subs[name] = self.create_subscription(self._classes[name], name, self._callback(name), qos, raw=True)
        self.get_logger().info(f"recording {name} best effort (a best-effort publisher joined)")

    def _skip(self, name: str, why: str) -> None:
        self.skipped[name] = why
        self.get_logger().warn(f"not recording {name}: {why}")

    def _callback(self, topic: str) -> Callable[[bytes], None]:
        def on_message(data: bytes) -> None:
            self.writer.write(topic, self.get_clock().now().nanoseconds, data)
            self.received[topic] = self.received.get(topic, 0) + 1

        return on_message

    def close(self) -> None:
        path = self.writer.close()
        total = sum(self.received.values())
        self.get_logger().info(f"closed {path}: {total} messages on {len(self.received)} topics")
        for name in sorted(set(self._requested or ()) - set(self._subs)):
            self.get_logger().warn(f"requested topic {name} was never seen")



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topics", nargs="*", metavar="TOPIC",
                        help="topics to record (default: all but /rosout, /parameter_events and hidden topics)")
    parser.add_argument("--out", required=True, help="bag folder to create (must not exist)")
    parser.add_argument("--split-s", type=float, default=2.0,
                        help="close a storage file this often (s): a killed recorder loses at most this much")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: until Ctrl-C)")
    parser.add_argument("--use-sim-time", action="store_true", help="stamp messages with /clock time")


def run(args: argparse.Namespace) -> int:
    from plan_stack.ros.lifecycle import run_nodes
    from plan_stack.viz.bag import plan_typestore

    topics = frozenset(t if t.startswith("/") else f"/{t}" for t in args.topics) or None
    try:
        writer = SplitBagWriter(args.out, plan_typestore(), split_s=args.split_s)
    except BagWriterError as exc:
        print(f"plan-stack record: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    if args.duration > 0:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    ros_args = ["--ros-args", "-p", f"use_sim_time:={'true' if args.use_sim_time else 'false'}"]
    status = run_nodes([lambda: RecorderNode(writer, topics)], args=ros_args, stop=stop)
    print(f"plan-stack record: wrote {writer.messages_written} messages to {args.out}")
    return status
