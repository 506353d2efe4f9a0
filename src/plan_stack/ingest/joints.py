"""Joint-state buffer: validation, and the state at a set's reference stamp.

Joint states arrive faster than frames (ALOHA 50 Hz, Franka 1 kHz, the sims
200 Hz), so a set's joint state is read from a bounded, stamp-sorted buffer
at the set's reference stamp: linearly interpolated between the two samples
around it, or the nearest sample. Samples further than `tolerance_s` from the
reference are never used: a set without a usable sample is dropped, not
filled with a guess. No ROS imports.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from plan_stack.ingest.errors import JointStateError
from plan_stack.joint_states import JointSelectError, JointSelector

__all__ = ["JointSample", "JointBuffer", "Lookup"]


@dataclasses.dataclass(frozen=True)
class JointSample:
    """One joint state in the buffer's joint order `names` (velocity/effort may be empty).

    `names` are the configured joint names, or, with none configured, those of the first valid message:
    the names the values were matched with, which an Observation publishes with them."""

    stamp_s: float
    names: tuple[str, ...]  # [D]
    position: np.ndarray  # [D]
    velocity: np.ndarray  # [D] or [0]
    effort: np.ndarray  # [D] or [0]


@dataclasses.dataclass(frozen=True)
class Lookup:
    """Result of reading the buffer at a stamp.

    `sample` is set when a state could be built; otherwise `wait` says whether
    a later sample may still make it possible (False: give up, see `reason`).
    """

    sample: JointSample | None
    wait: bool = False
    reason: str = ""


class JointBuffer:
    """Stamp-sorted, bounded buffer of validated joint states.

    Not thread-safe: the owner (the Synchronizer) serialises calls.
    """

    def __init__(self, names: Sequence[str], capacity: int, mode: str, tolerance_s: float) -> None:
        if mode not in ("interpolate", "nearest"):
            raise ValueError(f"mode: {mode!r} is not interpolate/nearest")
        self.names: tuple[str, ...] = tuple(names)
        self._capacity = int(capacity)
        self._mode = mode
        self._tol = float(tolerance_s)
        self._stamps: list[float] = []
        self._samples: list[JointSample] = []
        self._selector = JointSelector(self.names)  # message order -> ours, cached per name list

    def __len__(self) -> int:
        return len(self._stamps)

    @property
    def newest_s(self) -> float | None:
        return self._stamps[-1] if self._stamps else None

    def clear(self) -> None:
        self._stamps.clear()
        self._samples.clear()

    # --- input ------------------------------------------------------------------

    def validate(
        self,
        stamp_s: float,
        names: Sequence[str],
        position: Sequence[float],
        velocity: Sequence[float] = (),
        effort: Sequence[float] = (),
    ) -> JointSample:
        """Check one joint state and reorder it to `names`; raises JointStateError saying why.

        Extra joints in the message are ignored; missing ones, non-finite
        values and array lengths that do not match the names are errors.
        With no configured names the first valid message fixes them.
        """
        names = tuple(names)
        lengths_ok = len(names) == len(position) and all(len(a) in (0, len(names)) for a in (velocity, effort))
        if not self.names and lengths_ok:
            if not names or len(set(names)) != len(names):
                raise JointStateError(f"joint names must be non-empty and unique, got {list(names)}")
            self.names = names
            self._selector = JointSelector(names)
        try:
            sel = self._selector.select(names, position, velocity, effort, allow_duplicates=True)
        except JointSelectError as exc:
            raise JointStateError(str(exc)) from None
        if not math.isfinite(stamp_s):
            raise JointStateError(f"non-finite stamp {stamp_s}")
        return JointSample(float(stamp_s), self.names, sel.position, sel.velocity, sel.effort)

    def add(self, sample: JointSample) -> str | None:
        """Insert a validated sample; returns a drop reason ('duplicate') or None.

        Out-of-order samples are inserted at their place; the oldest sample
        leaves when the buffer is full.
        """
        i = bisect.bisect_left(self._stamps, sample.stamp_s)
        if i < len(self._stamps) and self._stamps[i] == sample.stamp_s:
            return "duplicate"
        self._stamps.insert(i, sample.stamp_s)
        self._samples.insert(i, sample)
        if len(self._stamps) > self._capacity:
            del self._stamps[0]
            del self._samples[0]
        return None

    # --- output -----------------------------------------------------------------

    def at(self, stamp_s: float) -> Lookup:
        """Joint state at `stamp_s`; waits until a sample at or after it has arrived."""
        i = bisect.bisect_left(self._stamps, stamp_s)
        if i == len(self._stamps):
            return Lookup(None, wait=True)
        hi = self._samples[i]
        if hi.stamp_s == stamp_s:
            return Lookup(hi)
        lo = self._samples[i - 1] if i > 0 else None
        if self._mode == "nearest":
            best = hi if lo is None or hi.stamp_s - stamp_s <= stamp_s - lo.stamp_s else lo
            if abs(best.stamp_s - stamp_s) > self._tol:
                return Lookup(None, reason=f"nearest joint state is {abs(best.stamp_s - stamp_s) * 1e3:.1f} ms away")
            return Lookup(best)
        if lo is None:
            return Lookup(None, reason="no joint state before the reference stamp")
        gap = max(hi.stamp_s - stamp_s, stamp_s - lo.stamp_s)
        if gap > self._tol:
            return Lookup(None, reason=f"joint states around the reference are {gap * 1e3:.1f} ms away")
        w = (stamp_s - lo.stamp_s) / (hi.stamp_s - lo.stamp_s)
        return Lookup(JointSample(
            stamp_s,
            lo.names,
            lo.position + w * (hi.position - lo.position),
            lo.velocity + w * (hi.velocity - lo.velocity) if len(lo.velocity) and len(hi.velocity) else np.zeros(0),
            lo.effort + w * (hi.effort - lo.effort) if len(lo.effort) and len(hi.effort) else np.zeros(0),
        ))
