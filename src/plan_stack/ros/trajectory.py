"""trajectory_msgs/JointTrajectory <-> the in-memory `plan_stack.trajectory.core.Trajectory`: the one converter.

The stitcher publishes with it, the bridges read and publish with it, the
simulated controllers read with it. Times go through `plan_stack.stamps`
(one rounding to integer nanoseconds).

Two forms: message objects (`trajectory_to_msg` / `trajectory_from_msg`) and the serialized message
(`trajectory_to_cdr` / `trajectory_from_cdr`, what a publisher given bytes and a `raw=True` subscription
carry). The hot path of every chunk (stitcher -> bridge -> simulator, and the bridge's
`active_trajectory` back) uses the serialized form: a 50-point, 14-joint trajectory is one Python object
per point and per array in message form, which costs more to build and to (de)serialize than the stitch
itself (measured: build 0.9 ms + serialize 0.27 ms to send, deserialize 1.07 ms + convert 0.37 ms to
receive, against well under 0.1 ms each way in CDR with numpy). The CDR form is the plain little-endian
encoding every ROS 2 RMW uses for this type; any other encapsulation is read through rclpy's own
deserializer, so nothing a conforming publisher sends is misread.
"""
from __future__ import annotations

import struct

import numpy as np
from builtin_interfaces.msg import Duration
from rclpy.serialization import deserialize_message
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from plan_stack.ros.time import duration_to_s, ns_to_stamp, stamp_to_ns
from plan_stack.stamps import NS_PER_S, join_ns, ns_to_s, s_to_ns, split_ns
from plan_stack.trajectory.core import Trajectory, TrajectoryError

__all__ = ["trajectory_from_msg", "trajectory_to_msg", "trajectory_from_cdr", "trajectory_to_cdr", "header_stamp_ns"]


def header_stamp_ns(traj: Trajectory, epoch_ns: int = 0, lead_s: float = 0.0) -> int:
    """header.stamp (integer ns) of `traj` published with `lead_s` of lead: epoch_ns + stamp_s - lead_s."""
    return epoch_ns + s_to_ns(traj.stamp_s) - s_to_ns(lead_s)


def trajectory_from_msg(msg: JointTrajectory, epoch_ns: int = 0) -> Trajectory:
    """Message -> Trajectory (stamp in seconds since `epoch_ns`; a zero stamp stays 0 = "now").

    Velocities/accelerations only when every point has them. Raises
    TrajectoryError when a point's array sizes do not match the joints or when
    some points carry velocities and others do not.
    """
    names = tuple(msg.joint_names)
    d, n = len(names), len(msg.points)
    if n == 0:
        raise TrajectoryError("points: a trajectory needs at least one point")
    pos = np.empty((n, d))
    times = np.empty(n)
    has_v = [len(p.velocities) > 0 for p in msg.points]
    has_a = [len(p.accelerations) > 0 for p in msg.points]
    if len(set(has_v)) > 1 or len(set(has_a)) > 1:
        raise TrajectoryError("points: velocities/accelerations must be given for all points or none")
    vel = np.empty((n, d)) if has_v[0] else None
    acc = np.empty((n, d)) if has_a[0] else None
    for i, p in enumerate(msg.points):
        for label, arr, out in (("positions", p.positions, pos), ("velocities", p.velocities, vel),
                                ("accelerations", p.accelerations, acc)):
            if out is None:
                continue
            if len(arr) != d:
                raise TrajectoryError(f"{label}: point {i} has {len(arr)} values for {d} joints")
            out[i] = arr
        times[i] = duration_to_s(p.time_from_start)
    stamp_ns = stamp_to_ns(msg.header.stamp)
    stamp_s = 0.0 if stamp_ns == 0 else ns_to_s(stamp_ns - epoch_ns)
    return Trajectory(names, stamp_s, times, pos, vel, acc)


def trajectory_to_msg(traj: Trajectory, epoch_ns: int = 0, frame_id: str = "", lead_s: float = 0.0
                      ) -> JointTrajectory:
    """Trajectory -> message: header.stamp = epoch_ns + stamp_s - lead_s, time_from_start = lead_s + times_s.

    The absolute times are the same for any lead. With a lead the first point is not "due now": a
    controller with joint_trajectory_controller semantics joins its present reference to it over the lead
    instead of taking it as a jump (a start from the measured state a few mrad off the held reference)."""
    lead_ns = s_to_ns(lead_s)
    msg = JointTrajectory()
    msg.header.stamp = ns_to_stamp(header_stamp_ns(traj, epoch_ns, lead_s))
    msg.header.frame_id = frame_id
    msg.joint_names = list(traj.joint_names)
    P = traj.positions.tolist()
    V = None if traj.velocities is None else traj.velocities.tolist()
    A = None if traj.accelerations is None else traj.accelerations.tolist()
    points = []
    for i, t in enumerate(traj.times_s.tolist()):
        sec, nanosec = divmod(lead_ns + s_to_ns(t), NS_PER_S)
        p = JointTrajectoryPoint(positions=P[i], time_from_start=Duration(sec=sec, nanosec=nanosec))
        if V is not None:
            p.velocities = V[i]
        if A is not None:
            p.accelerations = A[i]
        points.append(p)
    msg.points = points
    return msg


# --- serialized form (CDR) ------------------------------------------------------------------------------

_CDR_LE = b"\x00\x01\x00\x00"  # encapsulation: plain CDR, little endian, no options
_U32 = struct.Struct("<I")
_SEC_NSEC = struct.Struct("<iI")


def _align(o: int, n: int) -> int:
    return (o + n - 1) & -n


def _string_bytes(text: str) -> bytes:
    return text.encode() + b"\x00"


def _point_layout(o: int, counts: tuple[int, ...]) -> tuple[list[int], list[int], int, int]:
    """Offsets in one JointTrajectoryPoint starting at payload offset `o` (4-aligned) whose 4 sequences have
    `counts` doubles: (the counts' offsets, the offsets of each sequence's doubles (-1 when empty),
    time_from_start's offset, the offset after the point)."""
    counts_at, rows_at = [], []
    for m in counts:
        counts_at.append(o)
        o += 4
        if m:
            o = _align(o, 8)
            rows_at.append(o)
            o += 8 * m
        else:
            rows_at.append(-1)
    o = _align(o, 4)
    return counts_at, rows_at, o, o + 8


def _points_layout(o: int, n: int, counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """`_point_layout` of n identical points from `o`, as arrays [n, 4], [n, 4], [n] and the end offset. A
    point's layout depends only on its start modulo 8 (0 or 4): both layouts are computed once, the starts
    chained in integers."""
    rel = {r: _point_layout(r, counts) for r in (0, 4)}  # relative to a start at 0 or 4 (mod 8)
    step = {r: rel[r][3] - r for r in (0, 4)}
    start_list = []
    for _ in range(n):
        start_list.append(o)
        o += step[o & 7]
    starts = np.array(start_list, np.int64)
    res = (starts & 7) >> 2  # 0 or 1: which layout
    base = (starts - starts % 8)[:, None]
    counts_at = np.array([rel[0][0], rel[4][0]])[res] + base
    rows_rel = np.array([rel[0][1], rel[4][1]])
    rows_at = np.where(rows_rel[res] < 0, -1, rows_rel[res] + base)
    time_at = np.array([rel[0][2], rel[4][2]])[res] + base[:, 0]
    return counts_at, rows_at, time_at, o


def _s_to_ns(t_s: np.ndarray) -> np.ndarray:
    """`plan_stack.stamps.s_to_ns` of every element (the same floating-point steps, so the same integers)."""
    if not np.isfinite(t_s).all():
        raise ValueError(f"time must be finite, got {t_s[~np.isfinite(t_s)][0]!r}")
    whole = np.floor(t_s)
    return whole.astype(np.int64) * NS_PER_S + np.round((t_s - whole) * NS_PER_S).astype(np.int64)


def trajectory_to_cdr(traj: Trajectory, epoch_ns: int = 0, frame_id: str = "", lead_s: float = 0.0) -> bytes:
    """The serialized JointTrajectory of `trajectory_to_msg(traj, epoch_ns, frame_id, lead_s)`: the same message
    (rclpy deserializes it to an equal object), built from the arrays directly. Publish it as bytes."""
    lead_ns = s_to_ns(lead_s)
    sec, nanosec = split_ns(header_stamp_ns(traj, epoch_ns, lead_s))
    n, d = traj.positions.shape
    arrays = [traj.positions, traj.velocities, traj.accelerations]
    head = bytearray(_SEC_NSEC.pack(sec, nanosec))
    frame = _string_bytes(frame_id)
    head += _U32.pack(len(frame)) + frame
    head += bytes(_align(len(head), 4) - len(head)) + _U32.pack(len(traj.joint_names))
    for name in traj.joint_names:
        b = _string_bytes(name)
        head += bytes(_align(len(head), 4) - len(head)) + _U32.pack(len(b)) + b
    o = _align(len(head), 4)
    head += bytes(o - len(head)) + _U32.pack(n)
    counts = tuple(d if k < 3 and arrays[k] is not None else 0 for k in range(4))  # effort: always empty
    counts_at, rows_at, time_at, size = _points_layout(o + 4, n, counts)
    buf = np.zeros(4 + _align(size, 8), np.uint8)
    buf[:4] = np.frombuffer(_CDR_LE, np.uint8)
    buf[4:4 + len(head)] = np.frombuffer(bytes(head), np.uint8)
    payload = buf[4:]
    u32 = payload.view("<u4")
    u32[counts_at // 4] = counts
    t_sec, t_nsec = np.divmod(lead_ns + _s_to_ns(traj.times_s), NS_PER_S)
    payload.view("<i4")[time_at // 4] = t_sec
    u32[time_at // 4 + 1] = t_nsec
    if d:
        f64 = payload.view("<f8")
        cols = np.arange(d)
        for k, arr in enumerate(arrays):
            if arr is not None:
                f64[(rows_at[:, k] // 8)[:, None] + cols] = arr
    return buf[:4 + size].tobytes()


class _Reader:
    """Sequential reads of a CDR payload with bounds checks (a short or corrupt buffer raises TrajectoryError)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.o, self.end = data, 4, len(data)  # offsets in `data`; alignment is relative to byte 4

    def align(self, n: int) -> None:
        self.o = 4 + _align(self.o - 4, n)

    def u32(self) -> int:
        self.align(4)
        if self.o + 4 > self.end:
            raise TrajectoryError("serialized trajectory: truncated")
        (v,) = _U32.unpack_from(self.data, self.o)
        self.o += 4
        return v

    def string(self) -> str:
        n = self.u32()
        if n == 0 or self.o + n > self.end or self.data[self.o + n - 1] != 0:
            raise TrajectoryError("serialized trajectory: malformed string")
        text = bytes(self.data[self.o:self.o + n - 1]).decode(errors="replace")
        self.o += n
        return text

    def sec_nsec(self) -> tuple[int, int]:
        self.align(4)
        if self.o + 8 > self.end:
            raise TrajectoryError("serialized trajectory: truncated")
        v = _SEC_NSEC.unpack_from(self.data, self.o)
        self.o += 8
        return v


def trajectory_from_cdr(data: bytes, epoch_ns: int = 0) -> Trajectory:
    """`trajectory_from_msg` of a serialized JointTrajectory (what a `raw=True` subscription receives), read with
    numpy; the same Trajectory, the same errors. Any encapsulation other than plain little-endian CDR goes
    through rclpy's deserializer."""
    if len(data) < 4:
        raise TrajectoryError("serialized trajectory: truncated")
    if bytes(data[:2]) != _CDR_LE[:2]:
        try:
            msg = deserialize_message(bytes(data), JointTrajectory)
        except Exception as exc:  # rclpy raises its RMWError (and others) on bytes it cannot read
            raise TrajectoryError(f"serialized trajectory: {exc}") from None
        return trajectory_from_msg(msg, epoch_ns)
    r = _Reader(data)
    stamp_ns = join_ns(*r.sec_nsec())
    r.string()  # frame_id
    n_names = r.u32()
    if n_names > r.end:
        raise TrajectoryError("serialized trajectory: malformed joint_names")
    names = tuple(r.string() for _ in range(n_names))
    d, n = len(names), r.u32()
    if n == 0:
        raise TrajectoryError("points: a trajectory needs at least one point")
    if n * 24 > r.end:  # every point takes at least 24 bytes
        raise TrajectoryError("serialized trajectory: truncated")
    u8 = np.frombuffer(data, np.uint8)
    first = _first_point_counts(r)
    layout = None
    if first is not None and first[0] == d and first[1] in (0, d) and first[2] in (0, d):
        counts_at, rows_at, time_at, end = _points_layout(r.o - 4, n, first)
        if 4 + end <= r.end and np.array_equal(u8[4 + counts_at[:, :, None] + np.arange(4)].view("<u4")[..., 0],
                                               np.broadcast_to(first, counts_at.shape)):
            layout = rows_at, time_at
            r.o = 4 + end
    if layout is None:  # points of different shapes (or bad ones): read one by one, naming what is wrong
        layout = _read_points(r, n, d)
    rows_at, time_at = layout
    t = u8[4 + time_at[:, None] + np.arange(8)]
    sec = t[:, :4].copy().view("<i4")[:, 0].astype(np.int64)
    nsec = t[:, 4:].copy().view("<u4")[:, 0].astype(np.int64)
    cols = np.arange(8 * d)

    def rows(k: int) -> np.ndarray:  # [n, d] doubles of sequence k (positions, velocities, accelerations)
        return u8[4 + rows_at[:, k, None] + cols].view("<f8").astype(float, copy=False)

    whole, frac = np.divmod(sec * NS_PER_S + nsec, NS_PER_S)
    times = whole + frac * 1e-9
    stamp_s = 0.0 if stamp_ns == 0 else ns_to_s(stamp_ns - epoch_ns)
    return Trajectory(names, stamp_s, times, rows(0) if rows_at[0, 0] >= 0 else np.empty((n, 0)),
                      rows(1) if rows_at[0, 1] >= 0 else None, rows(2) if rows_at[0, 2] >= 0 else None)


def _first_point_counts(r: _Reader) -> tuple[int, ...] | None:
    """The 4 sequence counts of the point at the reader's offset (the reader does not move); None if truncated."""
    o, counts = r.o, []
    try:
        for _ in range(4):
            m = r.u32()
            counts.append(m)
            if m:
                r.align(8)
                r.o += 8 * m
    except TrajectoryError:
        return None
    finally:
        r.o = o
    return tuple(counts)


def _read_points(r: _Reader, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (payload-relative) of each point's doubles [n, 3] (-1: none) and time_from_start [n], read one point
    at a time; raises TrajectoryError as `trajectory_from_msg` does on inconsistent points."""
    labels = ("positions", "velocities", "accelerations")
    rows_at = np.full((n, 3), -1, np.int64)
    time_at = np.empty(n, np.int64)
    present: list[bool | None] = [None, None, None]
    for i in range(n):
        for k in range(4):
            m = r.u32()
            if k < 3:
                has = m > 0
                if present[k] is None:
                    present[k] = has
                elif present[k] != has and k > 0:
                    raise TrajectoryError("points: velocities/accelerations must be given for all points or none")
                if m != d and (k == 0 or has):
                    raise TrajectoryError(f"{labels[k]}: point {i} has {m} values for {d} joints")
            if m:
                r.align(8)
                if k < 3:
                    rows_at[i, k] = r.o - 4
                r.o += 8 * m
                if r.o > r.end:
                    raise TrajectoryError("serialized trajectory: truncated")
        r.align(4)
        time_at[i] = r.o - 4
        r.sec_nsec()
    return rows_at, time_at
