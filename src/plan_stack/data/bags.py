"""rosbag2 (MCAP) bag I/O without ROS: `read_bag`, the message-level `BagWriter` the recorders use,
and `SplitBagWriter`, which writes in closed splits so a killed writer leaves a readable bag.

Messages are built and CDR-serialised with the `rosbags` library (Kilted type store), so the bags
play with `ros2 bag play` on a real install and read back with `rosbags` anywhere.

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

import numpy as np
import yaml

from plan_stack.stamps import s_to_ns, s_to_sec_nanosec

__all__ = ["BagError", "BagWriter", "BagWriterError", "SplitBagWriter", "check_bag_folder", "read_bag"]


class BagError(ValueError):
    """A path that is not a rosbag2 bag folder (the message names the path and what is wrong)."""


def check_bag_folder(path: str | os.PathLike) -> Path:
    """`path` as a Path when it is a rosbag2 bag folder: a directory holding `metadata.yaml`.

    Only the folder's shape is checked, so that a tool can refuse a mistyped or wrong path before it starts
    anything; whether the storage files read is found out by reading them. Raises BagError naming the path.
    """
    folder = Path(path)
    if not folder.exists():
        raise BagError(f"{folder}: no such bag folder (it does not exist)")
    if not folder.is_dir():
        raise BagError(f"{folder}: not a bag folder (a rosbag2 bag is a directory holding metadata.yaml)")
    if not (folder / "metadata.yaml").is_file():
        raise BagError(f"{folder}: not a rosbag2 bag (no metadata.yaml in it)")
    return folder


def read_bag(path: str | os.PathLike, topics=None) -> dict[str, list[tuple[float, Any]]]:
    """Messages of a bag folder by topic, as (bag time in s, deserialised message) in time order.

    `topics` limits what is deserialised (all topics when None). Messages come back as `rosbags`
    objects with the ROS field names.
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    out: dict[str, list[tuple[float, Any]]] = {}
    with AnyReader([Path(path)], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        for conn, t_ns, raw in reader.messages(connections=conns):
            out.setdefault(conn.topic, []).append((t_ns * 1e-9, reader.deserialize(raw, conn.msgtype)))
    return out


class BagWriter:
    """Thin rosbags MCAP writer: one connection per topic, messages from plain values."""

    def __init__(self, path: str | os.PathLike, topics: dict[str, str]) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.typesys import Stores, get_typestore

        self.ts = get_typestore(Stores.ROS2_KILTED)
        self._writer = Writer(Path(path), version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._conn = {topic: self._writer.add_connection(topic, msgtype, typestore=self.ts)
                      for topic, msgtype in topics.items()}
        self._types = dict(topics)
        T = self.ts.types
        self.Time, self.Header = T["builtin_interfaces/msg/Time"], T["std_msgs/msg/Header"]

    def header(self, t_s: float, frame_id: str = ""):
        sec, nanosec = s_to_sec_nanosec(t_s)
        return self.Header(stamp=self.Time(sec=sec, nanosec=nanosec), frame_id=frame_id)

    def write(self, topic: str, t_s: float, msg) -> None:
        data = self.ts.serialize_cdr(msg, self._types[topic])
        self._writer.write(self._conn[topic], s_to_ns(t_s), data)

    def write_camera(self, name: str, t_s: float, frame_id: str, rgb: np.ndarray, cam) -> None:
        """`/cameras/<name>/image_raw` and `/cameras/<name>/camera_info` with the same header."""
        self.write(f"/cameras/{name}/image_raw", t_s, self.image(t_s, frame_id, rgb))
        self.write(f"/cameras/{name}/camera_info", t_s, self.camera_info(t_s, frame_id, cam))

    # message builders -----------------------------------------------------------

    def joint_state(self, t_s: float, names, positions, velocities=()):
        return self.ts.types["sensor_msgs/msg/JointState"](
            header=self.header(t_s), name=list(names), position=np.asarray(positions, dtype=np.float64),
            velocity=np.asarray(velocities, dtype=np.float64), effort=np.zeros(0))

    def string(self, text: str):
        return self.ts.types["std_msgs/msg/String"](data=text)

    def int32(self, value: int):
        return self.ts.types["std_msgs/msg/Int32"](data=int(value))

    def pose(self, t_s: float, frame_id: str, pose7):
        T = self.ts.types
        p = T["geometry_msgs/msg/Point"](x=float(pose7[0]), y=float(pose7[1]), z=float(pose7[2]))
        q = T["geometry_msgs/msg/Quaternion"](w=float(pose7[3]), x=float(pose7[4]), y=float(pose7[5]),
                                              z=float(pose7[6]))
        return T["geometry_msgs/msg/PoseStamped"](header=self.header(t_s, frame_id),
                                                  pose=T["geometry_msgs/msg/Pose"](position=p, orientation=q))

    def image(self, t_s: float, frame_id: str, rgb: np.ndarray):
        h, w = rgb.shape[:2]
        return self.ts.types["sensor_msgs/msg/Image"](
            header=self.header(t_s, frame_id), height=h, width=w, encoding="rgb8", is_bigendian=0, step=3 * w,
            data=np.ascontiguousarray(rgb, dtype=np.uint8).reshape(-1))

    def camera_info(self, t_s: float, frame_id: str, cam):
        T = self.ts.types
        roi = T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
        return T["sensor_msgs/msg/CameraInfo"](
            header=self.header(t_s, frame_id), height=cam.height, width=cam.width, distortion_model="plumb_bob",
            d=np.zeros(5), k=cam.K.reshape(-1).astype(np.float64), r=np.eye(3).reshape(-1),
            p=np.array([cam.fx, 0, cam.cx, 0, 0, cam.fy, cam.cy, 0, 0, 0, 1, 0], dtype=np.float64),
            binning_x=0, binning_y=0, roi=roi)

    def close(self) -> None:
        self._writer.close()


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
        self._writer: Any = None  # rosbags Writer of the open split
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
        assert split_dir is not None  # set together with the writer
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
