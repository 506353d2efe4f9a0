"""`ingest` node: camera frames + joint states -> time-aligned `Observation`.

Wiring only; the rules live in `sync` (matching, freshness, clock resets),
`preprocess` (decoding, rgb8, resize) and `monitor` (rates, timeouts).

Topics (node-relative): subscribes `cameras/<name>/image_raw`
(sensor_msgs/Image) or, with `compressed`, `cameras/<name>/image_raw/compressed`
(sensor_msgs/CompressedImage), `joint_states` and `instruction`
(std_msgs/String); publishes `observation` and `/diagnostics`.

Every input callback runs in one mutually exclusive callback group (the
synchroniser is single-threaded). Bad inputs are dropped with a WARN that
says why; a silent stream turns ERROR and withholds Observations until it
recovers.
"""
from __future__ import annotations

import collections
import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header, String

from plan_stack.config import ConfigError
from plan_stack.ingest.config import IngestConfig, SyncConfig
from plan_stack.ingest.errors import IngestError
from plan_stack.ingest.monitor import Level, StreamMonitor
from plan_stack.ingest.preprocess import Preprocessor
from plan_stack.ingest.sync import JOINTS, DropReason, SyncedSet, Synchronizer, Update
from plan_stack.msg import Observation
from plan_stack.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from plan_stack.ros.image import ImageError, image_to_numpy, numpy_to_image
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.qos import qos_by_name
from plan_stack.ros.time import clock_s, s_to_stamp, stamp_to_s

__all__ = ["IngestNode", "main"]

_LEVELS = {Level.OK: OK, Level.WARN: WARN, Level.ERROR: ERROR}
#: Drops that mean the input itself was wrong (WARN), not normal matching losses.
_BAD_INPUT = {DropReason.STAMP_FUTURE, DropReason.STAMP_PAST, DropReason.BAD_INPUT}


_to_s = stamp_to_s
_to_time = s_to_stamp


class IngestNode(Node):
    """Synchronises the configured cameras and joint states into Observations."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("ingest", **kwargs)
        self.sync_cfg = declare_config(self, SyncConfig)
        self.cfg = cfg = declare_config(self, IngestConfig)
        names = self.sync_cfg.camera_names
        try:
            timeouts = [cfg.camera_timeout_of(i, len(names)) for i in range(len(names))]
        except ConfigError as exc:
            raise ParameterError(f"{exc} (node '{self.get_fully_qualified_name()}')") from None
        self._sync = Synchronizer(self.sync_cfg)
        self._pre = Preprocessor(cfg.output_size[0], cfg.output_size[1], cfg.resize_mode)
        self._instruction = cfg.instruction
        self._monitors = {n: StreamMonitor(n, t) for n, t in zip(names, timeouts)}
        if self.sync_cfg.joint_mode != "none":
            self._monitors[JOINTS] = StreamMonitor(JOINTS, cfg.joint_timeout)
        now = self._now_s()
        for m in self._monitors.values():
            m.start(now)
        self.sets_published = 0
        self.sets_withheld = 0
        #: seconds from the arrival of the input that completed a set to its publication
        self.added_latency_s: collections.deque[float] = collections.deque(maxlen=2000)
        #: newest frame stamp - oldest frame stamp of each published set, s (never above max_age)
        self.set_age_s: collections.deque[float] = collections.deque(maxlen=2000)
        self._last_skew_s = float("nan")

        group = MutuallyExclusiveCallbackGroup()
        self._pub = self.create_publisher(Observation, "observation", qos_by_name(cfg.observation_qos))
        image_qos = qos_by_name(cfg.image_qos)
        for i, name in enumerate(names):
            if cfg.compressed:
                self.create_subscription(
                    CompressedImage, f"cameras/{name}/image_raw/compressed",
                    lambda msg, i=i: self._on_compressed(i, msg), image_qos, callback_group=group)
            else:
                self.create_subscription(
                    Image, f"cameras/{name}/image_raw",
                    lambda msg, i=i: self._on_image(i, msg), image_qos, callback_group=group)
        if self.sync_cfg.joint_mode != "none":
            joint_qos = copy.copy(qos_by_name(cfg.joint_qos))
            joint_qos.depth = cfg.joint_queue_depth
            self.create_subscription(JointState, "joint_states", self._on_joints, joint_qos, callback_group=group)
        self.create_subscription(String, "instruction", self._on_instruction,
                                 qos_by_name(cfg.instruction_qos), callback_group=group)
        self._diag = Diagnostics(self, cfg.diagnostics_period)
        self.create_timer(cfg.diagnostics_period, self._on_health, callback_group=group)

    # --- callbacks ----------------------------------------------------------------

    def _on_image(self, i: int, msg: Image) -> None:
        t_in = time.perf_counter()
        self._on_frame(i, msg.header, lambda: self._pre.raw(image_to_numpy(msg), msg.encoding), t_in)

    def _on_compressed(self, i: int, msg: CompressedImage) -> None:
        t_in = time.perf_counter()
        self._on_frame(i, msg.header, lambda: self._pre.compressed(msg.data, msg.format), t_in)

    def _on_frame(self, i: int, header: Header, decode: Callable[[], np.ndarray], t_in: float) -> None:
        name = self.sync_cfg.camera_names[i]
        now = self._now_s()
        self._monitors[name].arrived(now)
        stamp = _to_s(header.stamp)
        try:
            rgb = decode()
        except (ImageError, IngestError) as exc:
            self._bad_input(name, stamp, str(exc))
            return
        up = self._sync.add_frame(i, stamp, (rgb, header), now_s=now)
        self._handle(up, name, stamp, now, t_in)

    def _on_joints(self, msg: JointState) -> None:
        t_in = time.perf_counter()
        now = self._now_s()
        self._monitors[JOINTS].arrived(now)
        stamp = _to_s(msg.header.stamp)
        try:
            up = self._sync.add_joint_state(stamp, msg.name, msg.position, msg.velocity, msg.effort, now_s=now)
        except IngestError as exc:
            self._bad_input(JOINTS, stamp, str(exc))
            return
        self._handle(up, JOINTS, stamp, now, t_in)

    def _on_instruction(self, msg: String) -> None:
        self._instruction = msg.data

    def _on_health(self) -> None:
        now = self._now_s()
        for name, m in self._monitors.items():
            h = m.health(now)
            self._diag.report(self._status_name(name), _LEVELS[h.level], h.message, **h.values)
        self._report_sync(now)

    # --- helpers ------------------------------------------------------------------

    def _now_s(self) -> float:
        return clock_s(self)

    @staticmethod
    def _status_name(stream: str) -> str:
        return JOINTS if stream == JOINTS else f"camera {stream}"

    def _bad_input(self, stream: str, stamp_s: float, reason: str) -> None:
        m = self._monitors[stream]
        m.dropped(DropReason.BAD_INPUT.value, bad_input=reason)
        self._diag.report(self._status_name(stream), WARN, f"dropped bad input: {reason}", now=True,
                          stamp=f"{stamp_s:.6f}", dropped=str(sum(m.drops.values())))
        self.get_logger().warning(f"{stream}: dropped input stamped {stamp_s:.6f}: {reason}",
                               throttle_duration_sec=1.0)

    def _handle(self, up: Update, stream: str, stamp_s: float, now: float, t_in: float) -> None:
        if up.reset is not None:
            for m in self._monitors.values():
                m.reset_clock(now)
            self.get_logger().warning(f"synchroniser reset: {up.reset}")
            self._diag.report("sync", WARN, f"reset: {up.reset}", now=True, resets=str(self._sync.resets))
        rejected = None
        for d in up.drops:
            bad = d.reason in _BAD_INPUT
            self._monitors[d.stream].dropped(d.reason.value, bad_input=d.detail if bad else None)
            if bad and d.stream == stream and d.stamp_s == stamp_s:
                rejected = d
        if rejected is not None:
            self._diag.report(self._status_name(stream), WARN,
                              f"dropped bad input: {rejected.detail}", now=True, stamp=f"{stamp_s:.6f}")
        else:
            self._monitors[stream].valid(now, stamp_s)
        for s in up.sets:
            self._publish(s, now, t_in)

    def _publish(self, s: SyncedSet, now: float, t_in: float) -> None:
        silent = [n for n, m in self._monitors.items() if m.timed_out(now)]
        if silent:
            self.sets_withheld += 1
            for f in s.frames:
                self._monitors[self.sync_cfg.camera_names[f.camera]].dropped(DropReason.STREAM_TIMEOUT.value)
            return
        obs = Observation()
        headers = [f.item[1] for f in s.frames]
        exact = [h.stamp for h, f in zip(headers, s.frames) if f.stamp_s == s.reference_s]
        obs.header.stamp = exact[0] if exact else _to_time(s.reference_s)
        obs.camera_names = list(self.sync_cfg.camera_names)
        obs.images = [numpy_to_image(f.item[0], "rgb8", header=h) for f, h in zip(s.frames, headers)]
        obs.source_stamps = [h.stamp for h in headers]
        if s.joint is not None:
            js = obs.joint_state
            js.header.stamp = obs.header.stamp
            js.name = list(s.joint.names)  # configured, or the first valid joint state's: what was matched
            js.position = s.joint.position.tolist()
            js.velocity = s.joint.velocity.tolist()
            js.effort = s.joint.effort.tolist()
        obs.max_skew = float(s.spread_s)
        obs.instruction = self._instruction
        self._pub.publish(obs)
        self.added_latency_s.append(time.perf_counter() - t_in)
        self.set_age_s.append(self._sync.newest_s - min(f.stamp_s for f in s.frames))
        self.sets_published += 1
        self._last_skew_s = s.spread_s
        for f in s.frames:
            self._monitors[self.sync_cfg.camera_names[f.camera]].used += 1
        if s.joint is not None:
            self._monitors[JOINTS].used += 1

    def _report_sync(self, now: float) -> None:
        silent = [n for n, m in self._monitors.items() if m.timed_out(now)]
        lat = np.asarray(self.added_latency_s, dtype=np.float64) * 1e3
        values: dict[str, Any] = {
            "sets_published": self.sets_published,
            "sets_withheld": self.sets_withheld,
            "resets": self._sync.resets,
            "queued": ",".join(str(q) for q in self._sync.queued()),
            "pending_sets": self._sync.pending,
            "last_skew_ms": f"{self._last_skew_s * 1e3:.2f}",
            "added_latency_p50_ms": f"{np.percentile(lat, 50):.3f}" if lat.size else "",
            "added_latency_p99_ms": f"{np.percentile(lat, 99):.3f}" if lat.size else "",
            "set_age_max_ms": f"{max(self.set_age_s) * 1e3:.2f}" if self.set_age_s else "",
        }
        if silent:
            self._diag.report("sync", ERROR, f"withholding observations: {', '.join(silent)} timed out",
                              **values)
        else:
            self._diag.report("sync", OK, "ok", **values)


main = node_main(IngestNode)
