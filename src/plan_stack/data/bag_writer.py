"""A rosbag2 (MCAP) bag written in closed splits, so a killed writer leaves a readable bag.

rosbag2 bags may consist of several storage files listed in `metadata.yaml`.
`SplitBagWriter` writes each split as a complete MCAP file (with `rosbags`),
closes it every `split_s` seconds (and at `close`), and rewrites
`metadata.yaml` atomically to list exactly the complete files. A process
killed at any moment loses only the split it was writing; what was closed
reads with `ros2 bag info/play` on a real install and with `rosbags` here.
Messages arrive already serialised (CDR bytes, as a raw subscription
delivers them), so recording costs no deserialisation.

No ROS imports.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

__all__ = ["BagWriterError", "SplitBagWriter"]


class BagWriterError(ValueError):
    """The bag cannot be created or written (the message says why)."""


class SplitBagWriter:
    """Not thread-safe: one thread writes (the recorder's executor)."""

    def __init__(self, path: str | os.PathLike, typestore: Any, split_s: float = 5.0) -> None:
        if split_s <= 0:
            raise BagWriterError(f"split_s must be > 0, got {split_s}")
        self.path = Path(path)
        if self.path.exists():
            raise BagWriterError(f"{self.path}: already exists (rosbag2 never overwrites a bag)")
        self.path.mkdir(parents=True)
        self.typestore = typestore
        self.split_s = float(split_s)
        self._topics: dict[str, tuple[str, list[Any]]] = {}  # topic -> (msgtype, offered QoS)
        self._files: list[dict[str, Any]] = []  # metadata of closed splits
        self._topic_counts: dict[str, int] = {}
        self._topic_meta: dict[str, dict[str, Any]] = {}  # topic -> rosbag2 topic_metadata of closed splits
        self._writer = None
        self._conns: dict[str, Any] = {}
        self._split_dir: Path | None = None
        self._opened_at = 0.0
        self._pending = 0
        self.messages_written = 0
        self._write_metadata()

    # --- topics and messages ---------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str, offered_qos: list[Any] | None = None) -> None:
        """Declare a topic before its first message (type as `pkg/msg/Name`)."""
        if topic in self._topics:
            if self._topics[topic][0] != msgtype:
                raise BagWriterError(f"{topic}: type {msgtype} differs from the recorded {self._topics[topic][0]}")
            return
        if msgtype not in self.typestore.types:
            raise BagWriterError(f"{topic}: message type {msgtype} is not in the type store")
        self._topics[topic] = (msgtype, list(offered_qos or []))
        if self._writer is not None:
            self._add_connection(topic)

    def write(self, topic: str, t_ns: int, data: bytes) -> None:
        """One serialised message at time `t_ns` (the recorder's clock)."""
        if topic not in self._topics:
            raise BagWriterError(f"{topic}: add_topic first")
        if self._writer is None:
            self._open_split()
        self._writer.write(self._conns[topic], int(t_ns), bytes(data))
        self._pending += 1
        self.messages_written += 1
        self.maybe_split()

    def maybe_split(self) -> None:
        """Close the open split when it is older than `split_s` (call from a timer too)."""
        if self._writer is not None and time.monotonic() - self._opened_at >= self.split_s:
            self._close_split()

    def close(self) -> Path:
        """Close the open split; the bag is complete. Returns its folder."""
        self._close_split()
        return self.path

    # --- splits ------------------------------------------------------------------------------
    def _open_split(self) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        index = len(self._files)
        self._split_dir = self.path / f".split_{index}"
        self._writer = Writer(self._split_dir, version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._conns = {}
        for topic in self._topics:
            self._add_connection(topic)
        self._opened_at = time.monotonic()
        self._pending = 0

    def _add_connection(self, topic: str) -> None:
        msgtype, qos = self._topics[topic]
        self._conns[topic] = self._writer.add_connection(topic, msgtype, typestore=self.typestore,
                                                         offered_qos_profiles=qos)

    def _close_split(self) -> None:
        if self._writer is None:
            return
        writer, split_dir = self._writer, self._split_dir
        self._writer = None
        writer.close()
        if not self._pending:
            shutil.rmtree(split_dir, ignore_errors=True)
            return
        info = yaml.safe_load((split_dir / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        name = f"{self.path.name}_{len(self._files)}.mcap"
        os.replace(split_dir / info["relative_file_paths"][0], self.path / name)
        shutil.rmtree(split_dir, ignore_errors=True)
        entry = info["files"][0]
        entry["path"] = name
        self._files.append(entry)
        for t in info["topics_with_message_count"]:
            meta = t["topic_metadata"]
            self._topic_counts[meta["name"]] = self._topic_counts.get(meta["name"], 0) + int(t["message_count"])
            self._topic_meta[meta["name"]] = meta
        self._write_metadata()

    def _write_metadata(self) -> None:
        """metadata.yaml listing the closed splits only (atomic replace)."""
        starts = [f["starting_time"]["nanoseconds_since_epoch"] for f in self._files]
        ends = [f["starting_time"]["nanoseconds_since_epoch"] + f["duration"]["nanoseconds"] for f in self._files]
        start = min(starts) if starts else 0
        meta = self._topic_meta
        info = {
            "version": 9,
            "storage_identifier": "mcap",
            "relative_file_paths": [f["path"] for f in self._files],
            "duration": {"nanoseconds": (max(ends) - start) if ends else 0},
            "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": sum(f["message_count"] for f in self._files),
            "topics_with_message_count": [{"message_count": n, "topic_metadata": meta[t]}
                                          for t, n in sorted(self._topic_counts.items())],
            "compression_format": "",
            "compression_mode": "",
            "files": self._files,
            "custom_data": None,
            "ros_distro": "plan_stack",
        }
        tmp = self.path / "metadata.yaml.tmp"
        tmp.write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False))
        os.replace(tmp, self.path / "metadata.yaml")
