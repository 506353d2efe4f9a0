"""Shared demonstration recording, without ROS: the rosbag2 (MCAP) writer and reader, and the pieces
every embodiment's recorder (`aloha.recording`, `franka.recording`, `drive.recording`) uses the same way.

Messages are built and CDR-serialised with the `rosbags` library (Kilted type store), so the bags
play with `ros2 bag play` on a real install and read back with `rosbags` anywhere. Bag time is sim
time (episode start = 0 s).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from plan_stack.stamps import s_to_ns, s_to_sec_nanosec

__all__ = ["BagWriter", "RecordOptions", "check_image_size", "new_bag_path", "every_steps", "read_bag"]


def check_image_size(width: int, height: int) -> None:
    """Rendered images are at least 16 x 16 px (ValueError naming the fields otherwise)."""
    if width < 16 or height < 16:
        raise ValueError(f"width/height: at least 16 px, got {width}x{height}")


@dataclasses.dataclass(frozen=True)
class RecordOptions:
    """Options of the arm recorders (ALOHA, Franka): image size, camera rate, keyframe period,
    waypoints per annotated path, control period."""

    width: int = 320
    height: int = 240
    camera_rate_hz: float = 10.0
    keyframe_period_s: float = 0.5
    waypoints: int = 10
    dt_s: float = 0.02

    def __post_init__(self) -> None:
        check_image_size(self.width, self.height)
        if self.camera_rate_hz <= 0 or self.keyframe_period_s <= 0:
            raise ValueError("camera_rate_hz/keyframe_period_s: must be positive")
        if self.waypoints < 2:
            raise ValueError(f"waypoints: at least 2, got {self.waypoints}")


def new_bag_path(out_dir: str | os.PathLike, stem: str) -> Path:
    """`out_dir/stem` for a new rosbag2 folder (creating `out_dir`); FileExistsError if it exists."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bag_path = out_dir / stem
    if bag_path.exists():
        raise FileExistsError(f"out: {bag_path} already exists (rosbag2 refuses to overwrite)")
    return bag_path


def every_steps(dt_s: float, *, rate_hz: float | None = None, period_s: float | None = None) -> int:
    """Steps of `dt_s` per period (`1 / rate_hz` or `period_s`), at least 1: the divider of a rate on a
    fixed-step loop."""
    n = 1.0 / (rate_hz * dt_s) if rate_hz is not None else period_s / dt_s
    return max(1, int(round(n)))


def read_bag(path: str | os.PathLike, topics=None) -> dict[str, list[tuple[float, object]]]:
    """Messages of a bag folder by topic, as (bag time in s, deserialised message) in time order.

    `topics` limits what is deserialised (all topics when None). Messages come back as `rosbags`
    objects with the ROS field names.
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    out: dict[str, list[tuple[float, object]]] = {}
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
        q = T["geometry_msgs/msg/Quaternion"](w=float(pose7[3]), x=float(pose7[4]), y=float(pose7[5]), z=float(pose7[6]))
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
