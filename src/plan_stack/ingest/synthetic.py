"""Synthetic camera rig: a stamp schedule with known ground truth (no ROS).

Used by `synthetic_publisher` (tests, `bench/ingest.py`, and checking an
ingest configuration on a real install without a robot). Camera frame k of
every camera is taken at tick k: `stamp = t0 + k / rate_hz + jitter`, with
`t0` a whole second and an integral rate, so `tick_of(stamp)` identifies
the tick from the stamp alone while |jitter| < half a period. Joint positions are `sin(stamp + j)`, so a
subscriber can check the interpolated joint state exactly.
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import numpy as np

__all__ = ["Event", "schedule", "tick_of", "joint_positions"]


@dataclasses.dataclass(frozen=True)
class Event:
    stamp_s: float  # header stamp (= due publication time on the wall clock)
    kind: str  # "frame" or "joints"
    camera: int = -1
    tick: int = -1
    bad: bool = False  # publish a malformed frame instead


def schedule(
    n_cameras: int,
    rate_hz: float,
    duration_s: float,
    t0_s: float,
    *,
    jitter_s: float = 0.0,
    drop: float = 0.0,
    joint_rate_hz: float = 0.0,
    bad: Sequence[tuple[int, int]] = (),
    seed: int = 0,
) -> list[Event]:
    """All events in publication (stamp) order; `bad` lists (camera, tick) to corrupt."""
    if jitter_s >= 0.5 / rate_hz:
        raise ValueError(f"jitter_s {jitter_s} must stay below half a period ({0.5 / rate_hz})")
    rng = random.Random(seed)
    events = []
    bad_set = set(bad)
    for k in range(int(duration_s * rate_hz)):
        for c in range(n_cameras):
            if rng.random() < drop and (c, k) not in bad_set:
                continue
            events.append(Event(t0_s + k / rate_hz + rng.uniform(-jitter_s, jitter_s), "frame", c, k,
                                (c, k) in bad_set))
    if joint_rate_hz > 0:
        events += [Event(t0_s + m / joint_rate_hz, "joints") for m in range(int(duration_s * joint_rate_hz))]
    events.sort(key=lambda e: e.stamp_s)
    return events


def tick_of(stamp_s: float, rate_hz: float) -> int:
    """Ground-truth tick id of a frame stamp: t0·rate + k (t0 a whole second, integral rate)."""
    return round(stamp_s * rate_hz)


def joint_positions(stamp_s: float, n_joints: int) -> np.ndarray:
    return np.sin(stamp_s + np.arange(n_joints, dtype=np.float64))
