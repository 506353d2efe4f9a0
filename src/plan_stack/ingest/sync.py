"""Timestamp synchronisation of N camera streams and one joint-state stream.

The matching policy is the approximate-time policy of ROS's C++
`message_filters` (written from its documented behaviour, not ported):

* every stream has a bounded queue; a set takes exactly one frame per camera;
* sweeping the queue heads in stamp order (always advancing the stream whose
  head is oldest) finds, for the first feasible set, the combination with the
  smallest spread (newest − oldest stamp); the stream whose frame ends that
  first candidate is the *pivot*, and the set is published as soon as no
  later combination that still contains the pivot frame can be tighter;
* a head that has no partner within `max_spread` is dropped (`unmatched`);
* frames older than the ones a set used are dropped (`skipped`); a frame is
  never used twice and sets come out in stamp order (per stream, stamps
  strictly increase from one set to the next);
* `min_interval` (message_filters' inter-message lower bound) lets a set go
  out when it is complete instead of when the next frame arrives: the next
  frame of a stream is assumed at least `min_interval` after its newest one.

Around it, the `Synchronizer` enforces freshness and clock sanity:

* `max_age`: nothing older than (newest camera frame stamp − max_age) is
  queued, and a set whose oldest frame falls behind that before it is
  emitted is dropped (`expired`): a set never mixes a stale frame with fresh
  ones (joint states are held to `joint_tolerance` around the set instead);
* stamps further than `max_stamp_offset` from the caller's clock are dropped
  (`stamp_future`/`stamp_past`); a stamp more than `clock_jump_threshold`
  older than its stream's newest, or a clock that went back that much, is a
  clock reset (simulator reset, bag loop): everything is cleared and the
  returned `Update.reset` says why;
* the joint state is read at the set's reference stamp from a buffer
  (`JointBuffer`); sets wait, in order, for a joint sample at or after their
  reference; one that cannot get a state within `joint_tolerance` is dropped.

Every drop is reported with its stream, stamp and reason; nothing is logged
and nothing is silently discarded. No ROS imports; not thread-safe (the
caller serialises calls).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

from plan_stack.ingest.config import SyncConfig
from plan_stack.ingest.joints import JointBuffer, JointSample

__all__ = ["DropReason", "Drop", "Frame", "SyncedSet", "Update", "Synchronizer", "JOINTS"]

#: Stream name of the joint states in `Drop.stream`.
JOINTS = "joint_states"


class DropReason(str, enum.Enum):
    """Why an input (or a whole set) did not become part of an Observation."""

    DUPLICATE = "duplicate"  # stamp already received on this stream
    LATE = "late"  # older than the frame this stream last contributed to a set
    EXPIRED = "expired"  # older than newest camera frame - max_age
    QUEUE_FULL = "queue_full"  # oldest frame pushed out of a full queue
    UNMATCHED = "unmatched"  # no partner within max_spread
    SKIPPED = "skipped"  # a newer frame of the same stream was used instead
    STAMP_FUTURE = "stamp_future"  # stamp too far ahead of the clock
    STAMP_PAST = "stamp_past"  # stamp too far behind the clock
    RESET = "reset"  # cleared by a clock reset
    NO_JOINT_STATE = "no_joint_state"  # set dropped: no joint state near its reference stamp
    BAD_INPUT = "bad_input"  # malformed image / joint state (reported by the node)
    STREAM_TIMEOUT = "stream_timeout"  # set withheld while a stream is timed out (node)


@dataclasses.dataclass(frozen=True)
class Drop:
    stream: str  # camera name or JOINTS
    stamp_s: float
    reason: DropReason
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Frame:
    camera: int  # index into camera_names
    stamp_s: float
    item: Any = None  # caller's payload (decoded image, original message stamp, ...)


@dataclasses.dataclass(frozen=True)
class SyncedSet:
    frames: tuple[Frame, ...]  # one per camera, in camera_names order
    reference_s: float  # stamp the joint state is aligned to (Observation stamp)
    spread_s: float  # newest - oldest frame stamp
    joint: JointSample | None  # None when joint_mode is "none"


@dataclasses.dataclass
class Update:
    """What one input caused: sets ready to publish (in order), drops, a reset."""

    sets: list[SyncedSet] = dataclasses.field(default_factory=list)
    drops: list[Drop] = dataclasses.field(default_factory=list)
    reset: str | None = None


# --- matching policies --------------------------------------------------------------


class _ApproximateTime:
    """message_filters' ApproximateTime sweep over per-stream sorted queues."""

    def __init__(self, n: int, queue_size: int, max_spread_s: float, min_interval_s: Sequence[float]) -> None:
        self.n = n
        self._queue_size = queue_size
        self._max_spread = max_spread_s
        self._min_interval = list(min_interval_s)
        self.clear()

    def clear(self) -> None:
        self.queues: list[list[Frame]] = [[] for _ in range(self.n)]
        self._past: list[list[Frame]] = [[] for _ in range(self.n)]
        self.last_used = [-math.inf] * self.n
        self._newest = [-math.inf] * self.n
        self._cand: list[Frame] | None = None
        self._cand_start = self._cand_end = 0.0
        self._pivot = -1

    def queued(self) -> list[int]:
        return [len(q) + len(p) for q, p in zip(self.queues, self._past)]

    def _restart(self) -> None:
        """Forget the current candidate search; past frames go back to the queues."""
        for i in range(self.n):
            if self._past[i]:
                self.queues[i] = self._past[i] + self.queues[i]
                self._past[i] = []
        self._cand = None

    def add(self, frame: Frame, names: Sequence[str], drops: list[Drop]) -> list[tuple[Frame, ...]]:
        i = frame.camera
        if frame.stamp_s <= self.last_used[i]:
            drops.append(Drop(names[i], frame.stamp_s, DropReason.LATE, "older than the frame last used"))
            return []
        q = self.queues[i]
        tail = q[-1].stamp_s if q else (self._past[i][-1].stamp_s if self._past[i] else -math.inf)
        if frame.stamp_s < tail:  # out of order: re-sweep with the frame in its place
            self._restart()
            q = self.queues[i]
            k = len(q)
            while k > 0 and q[k - 1].stamp_s > frame.stamp_s:
                k -= 1
            q.insert(k, frame)
        else:
            q.append(frame)
        self._newest[i] = max(self._newest[i], frame.stamp_s)
        if len(self.queues[i]) + len(self._past[i]) > self._queue_size:
            self._restart()
            old = self.queues[i].pop(0)
            drops.append(Drop(names[i], old.stamp_s, DropReason.QUEUE_FULL, f"queue of {self._queue_size} full"))
        return self._process(names, drops)

    def prune(self, cutoff_s: float, names: Sequence[str], drops: list[Drop]) -> None:
        """Drop every queued frame older than `cutoff_s` (expired)."""
        if not any((q and q[0].stamp_s < cutoff_s) or (p and p[0].stamp_s < cutoff_s)
                   for q, p in zip(self.queues, self._past)):
            return
        self._restart()
        for i, q in enumerate(self.queues):
            k = 0
            while k < len(q) and q[k].stamp_s < cutoff_s:
                drops.append(Drop(names[i], q[k].stamp_s, DropReason.EXPIRED, "older than newest frame - max_age"))
                k += 1
            del q[:k]

    def _can_publish(self) -> bool:
        """No later combination containing the pivot frame can have a smaller spread.

        Such a combination ends no earlier than the current heads (or, for an
        empty queue, than that stream's newest stamp + min_interval) and
        starts no later than the pivot frame.
        """
        end = -math.inf
        for i, q in enumerate(self.queues):
            end = max(end, q[0].stamp_s if q else self._newest[i] + self._min_interval[i])
        assert self._cand is not None  # called only with a candidate
        pivot_s = self._cand[self._pivot].stamp_s
        return end - pivot_s >= self._cand_end - self._cand_start

    def _process(self, names: Sequence[str], drops: list[Drop]) -> list[tuple[Frame, ...]]:
        out: list[tuple[Frame, ...]] = []
        while True:
            if self._cand is not None and self._can_publish():
                out.append(self._publish(names, drops))
                continue
            if any(not q for q in self.queues):
                return out
            heads = [q[0] for q in self.queues]
            s = min(range(self.n), key=lambda k: heads[k].stamp_s)
            e = max(range(self.n), key=lambda k: (heads[k].stamp_s, k))
            start, end = heads[s].stamp_s, heads[e].stamp_s
            if self._cand is None:
                if end - start > self._max_spread:
                    self.queues[s].pop(0)
                    drops.append(Drop(names[s], start, DropReason.UNMATCHED,
                                      f"no frame of {names[e]} within max_spread"))
                    continue
                self._cand, self._cand_start, self._cand_end, self._pivot = heads, start, end, e
            elif end - start < self._cand_end - self._cand_start:
                self._cand, self._cand_start, self._cand_end = heads, start, end
            if s == self._pivot:  # the pivot frame leaves: nothing later contains it
                out.append(self._publish(names, drops))
                continue
            self._past[s].append(self.queues[s].pop(0))

    def _publish(self, names: Sequence[str], drops: list[Drop]) -> tuple[Frame, ...]:
        assert self._cand is not None  # called only with a candidate
        frames = tuple(self._cand)
        for i, used in enumerate(frames):
            keep = []
            for f in self._past[i] + self.queues[i]:
                if f.stamp_s < used.stamp_s:
                    drops.append(Drop(names[i], f.stamp_s, DropReason.SKIPPED, "a newer frame was matched"))
                elif f is not used:
                    keep.append(f)
            self.queues[i], self._past[i] = keep, []
            self.last_used[i] = used.stamp_s
        self._cand = None
        return frames


class _Latest:
    """Naive baseline: when every stream has a new frame, take the latest of each."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.clear()

    def clear(self) -> None:
        self._latest: list[Frame | None] = [None] * self.n
        self.last_used = [-math.inf] * self.n

    def queued(self) -> list[int]:
        return [int(f is not None) for f in self._latest]

    def add(self, frame: Frame, names: Sequence[str], drops: list[Drop]) -> list[tuple[Frame, ...]]:
        i = frame.camera
        old = self._latest[i]
        if frame.stamp_s <= self.last_used[i] or (old is not None and frame.stamp_s < old.stamp_s):
            drops.append(Drop(names[i], frame.stamp_s, DropReason.LATE, "older than the latest frame"))
            return []
        if old is not None:
            drops.append(Drop(names[i], old.stamp_s, DropReason.SKIPPED, "replaced by a newer frame"))
        self._latest[i] = frame
        frames = tuple(f for f in self._latest if f is not None)
        if len(frames) < self.n:
            return []
        self._latest = [None] * self.n
        self.last_used = [f.stamp_s for f in frames]
        return [frames]

    def prune(self, cutoff_s: float, names: Sequence[str], drops: list[Drop]) -> None:
        for i, f in enumerate(self._latest):
            if f is not None and f.stamp_s < cutoff_s:
                drops.append(Drop(names[i], f.stamp_s, DropReason.EXPIRED, "older than newest frame - max_age"))
                self._latest[i] = None


# --- the synchroniser ---------------------------------------------------------------


class Synchronizer:
    """Frames + joint states in, time-aligned `SyncedSet`s out (see module doc)."""

    def __init__(self, cfg: SyncConfig) -> None:
        self.cfg = cfg
        self.names = cfg.camera_names
        n = len(self.names)
        if cfg.policy == "approximate":
            self._matcher: _ApproximateTime | _Latest = _ApproximateTime(
                n, cfg.queue_size, cfg.max_spread, [cfg.min_interval_of(i) for i in range(n)])
        else:
            self._matcher = _Latest(n)
        self.joints: JointBuffer | None = None
        if cfg.joint_mode != "none":
            self.joints = JointBuffer(cfg.joint_names, cfg.joint_buffer_size, cfg.joint_mode, cfg.joint_tolerance)
        self._pending: collections.deque[tuple[tuple[Frame, ...], float, float]] = collections.deque()
        self._seen: list[collections.deque[float]] = [
            collections.deque(maxlen=4 * cfg.queue_size) for _ in range(n)]
        self._newest_cam = [-math.inf] * n
        self._newest = -math.inf  # newest camera frame stamp since the last reset
        self._last_now: float | None = None
        self.resets = 0

    # --- introspection ----------------------------------------------------------

    def queued(self) -> list[int]:
        """Frames held per camera (queues + current candidate search)."""
        return self._matcher.queued()

    @property
    def newest_s(self) -> float:
        """Newest accepted camera frame stamp since the last reset (-inf before the first)."""
        return self._newest

    @property
    def pending(self) -> int:
        """Matched sets waiting for a joint state at their reference stamp."""
        return len(self._pending)

    # --- inputs -----------------------------------------------------------------

    def add_frame(self, camera: int, stamp_s: float, item: Any = None, now_s: float | None = None) -> Update:
        """Offer one (already validated) camera frame; `now_s` is the clock, if any."""
        if not 0 <= camera < len(self.names):
            raise IndexError(f"camera index {camera} out of range for {len(self.names)} cameras")
        up = Update()
        name = self.names[camera]
        if not self._admit(name, stamp_s, self._newest_cam[camera], now_s, up):
            return up
        seen = self._seen[camera]
        if stamp_s in seen:
            up.drops.append(Drop(name, stamp_s, DropReason.DUPLICATE, "stamp already received"))
            return up
        seen.append(stamp_s)
        self._newest_cam[camera] = max(self._newest_cam[camera], stamp_s)
        self._advance(stamp_s, up)
        if stamp_s < self._cutoff():
            up.drops.append(Drop(name, stamp_s, DropReason.EXPIRED, "older than newest frame - max_age"))
        else:
            for frames in self._matcher.add(Frame(camera, stamp_s, item), self.names, up.drops):
                self._enqueue(frames, up)
        self._resolve(up)
        return up

    def add_joint_state(
        self,
        stamp_s: float,
        names: Sequence[str],
        position: Sequence[float],
        velocity: Sequence[float] = (),
        effort: Sequence[float] = (),
        now_s: float | None = None,
    ) -> Update:
        """Offer one joint state; raises JointStateError (nothing changes) when it is malformed."""
        up = Update()
        if self.joints is None:
            return up
        sample = self.joints.validate(stamp_s, names, position, velocity, effort)
        newest = self.joints.newest_s
        if not self._admit(JOINTS, stamp_s, -math.inf if newest is None else newest, now_s, up):
            return up
        if self.joints.add(sample) is not None:
            up.drops.append(Drop(JOINTS, stamp_s, DropReason.DUPLICATE, "stamp already received"))
            return up
        self._resolve(up)
        return up

    def reset(self, reason: str, up: Update | None = None) -> None:
        """Clear all queues, buffers and pending sets (clock reset); drops are reported in `up`."""
        up = up if up is not None else Update()
        for frames, _, _ in self._pending:
            up.drops.extend(Drop(self.names[f.camera], f.stamp_s, DropReason.RESET, reason) for f in frames)
        self._pending.clear()
        for i, n in enumerate(self._matcher.queued()):
            if n:
                up.drops.append(Drop(self.names[i], math.nan, DropReason.RESET, f"{n} queued frames: {reason}"))
        self._matcher.clear()
        if self.joints is not None:
            self.joints.clear()
        for s in self._seen:
            s.clear()
        self._newest_cam = [-math.inf] * len(self.names)
        self._newest = -math.inf
        self.resets += 1
        up.reset = reason

    # --- internals --------------------------------------------------------------

    def _admit(self, stream: str, stamp_s: float, stream_newest: float, now_s: float | None, up: Update) -> bool:
        """Clock checks shared by all inputs; False when the input is dropped."""
        cfg = self.cfg
        if not math.isfinite(stamp_s):
            raise ValueError(f"{stream}: non-finite stamp {stamp_s}")
        if now_s is not None and now_s > 0.0:  # a clock that has not started (sim time 0) checks nothing
            if self._last_now is not None and now_s < self._last_now - cfg.clock_jump_threshold:
                self.reset(f"clock jumped back from {self._last_now:.3f} s to {now_s:.3f} s", up)
                self._last_now = now_s
            else:
                self._last_now = now_s if self._last_now is None else max(self._last_now, now_s)
            if stamp_s - now_s > cfg.max_stamp_offset:
                up.drops.append(Drop(stream, stamp_s, DropReason.STAMP_FUTURE,
                                     f"stamp {stamp_s - now_s:.3f} s ahead of the clock"))
                return False
            if now_s - stamp_s > cfg.max_stamp_offset:
                up.drops.append(Drop(stream, stamp_s, DropReason.STAMP_PAST,
                                     f"stamp {now_s - stamp_s:.3f} s behind the clock"))
                return False
        if up.reset is None and stamp_s < stream_newest - cfg.clock_jump_threshold:  # (a reset cleared it)
            self.reset(f"{stream} stamp jumped back from {stream_newest:.3f} s to {stamp_s:.3f} s", up)
        return True

    def _cutoff(self) -> float:
        return self._newest - self.cfg.max_age

    def _advance(self, stamp_s: float, up: Update) -> None:
        """A newer frame moves the freshness cutoff: expire what fell behind it.

        Only camera frames move it: joint states are read at the set's own
        stamp (within joint_tolerance), and letting a burst of them expire
        frames would drop good sets whenever images lag joints in transport.
        """
        if stamp_s > self._newest:
            self._newest = stamp_s
            self._matcher.prune(self._cutoff(), self.names, up.drops)

    def _enqueue(self, frames: tuple[Frame, ...], up: Update) -> None:
        stamps = [f.stamp_s for f in frames]
        ref = {"newest": max, "oldest": min}.get(self.cfg.reference, lambda s: math.fsum(s) / len(s))(stamps)
        self._pending.append((frames, ref, max(stamps) - min(stamps)))
        if len(self._pending) > self.cfg.queue_size:
            old, _, _ = self._pending.popleft()
            self._drop_set(old, DropReason.NO_JOINT_STATE, "joint states lag: too many sets waiting", up)

    def _drop_set(self, frames: tuple[Frame, ...], reason: DropReason, detail: str, up: Update) -> None:
        up.drops.extend(Drop(self.names[f.camera], f.stamp_s, reason, detail) for f in frames)

    def _resolve(self, up: Update) -> None:
        """Emit waiting sets, in order, once their joint state is known."""
        cutoff = self._cutoff()
        while self._pending:
            frames, ref, spread = self._pending[0]
            if min(f.stamp_s for f in frames) < cutoff:
                self._pending.popleft()
                self._drop_set(frames, DropReason.EXPIRED, "set fell behind newest frame - max_age", up)
                continue
            joint = None
            if self.joints is not None:
                look = self.joints.at(ref)
                if look.wait:
                    return
                if look.sample is None:
                    self._pending.popleft()
                    self._drop_set(frames, DropReason.NO_JOINT_STATE, look.reason, up)
                    continue
                joint = look.sample
            self._pending.popleft()
            up.sets.append(SyncedSet(frames, ref, spread, joint))
