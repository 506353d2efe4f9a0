"""The learned planner driving the simulated car in one process, without ROS.

Used by on-policy recording (`record-demos --robot drive --policy-model DIR`,
DAgger): the car goes where the planner's plans take it, so the states it
reaches are the ones the planner's own errors lead to (off-centre, heading
off), and every keyframe is labelled with the expert's path from there.

The path from image to motion is the graph's, minus DDS: the image fitted as
`ingest` fits it, `planning.runtime.PlannerRuntime` (the planner node's
library), and `drive.bridge.DriveBridge` (the drive_bridge node's library),
which anchors each plan at the pose of its image's stamp, refuses what the
node refuses and stops the car by its watchdog. The planner's latency is a
delay (`PlanDelay`): a plan made from the image at t reaches the bridge at
t + latency, as it does through the graph, where it varies from plan to plan
(e2e p50 ≈ 90-150 ms, p95 ≈ 290-400 ms of sim time at `--rtf 0.5`: medians
over the drives of two held-out runs), so it can be drawn per plan from a range.
"""
from __future__ import annotations

import collections
import math
import os
from collections.abc import Sequence

import numpy as np

__all__ = ["PlannerDriver", "PlanDelay", "Primitive"]

#: (kind, points [P, 3] in the ego frame of the image, horizon_s): what drive_bridge reads from a VisualPlan
Primitive = tuple[str, np.ndarray, float]


class PlannerDriver:
    """Camera image -> the plan's primitives, by a planner model directory (a path or a name under models/)."""

    def __init__(self, model_dir: str | os.PathLike, decoder: str = "vflash", camera: str = "front") -> None:
        from plan_stack.paths import find_data
        from plan_stack.planning.decoders import Decoding
        from plan_stack.planning.model_dir import load_planner_model
        from plan_stack.planning.runtime import PlannerRuntime, RuntimeConfig

        try:
            self.model_dir = find_data("models", os.fspath(model_dir))
            self.model = load_planner_model(self.model_dir)
            self.runtime = PlannerRuntime(self.model, RuntimeConfig(decoder=Decoding(decoder)))
        except (OSError, ValueError) as exc:  # ConfigError is a ValueError
            raise ValueError(f"policy model {os.fspath(model_dir)!r}: {exc}") from None
        self.decoder, self.camera = decoder, camera
        self.plans = self.invalid = 0
        self.plan_ms: list[float] = []

    def reset(self) -> None:
        """A new episode: forget the frame window and the counts."""
        self.runtime.reset()
        self.plans = self.invalid = 0
        self.plan_ms = []

    def __call__(self, image: np.ndarray, t_s: float) -> list[Primitive]:
        """The primitives planned from `image` (HxWx3 rgb8, any size: fitted to the model's as ingest does);
        empty when the plan is invalid (the planner node publishes nothing then)."""
        from plan_stack.ingest.preprocess import fit
        from plan_stack.planning.runtime import FrameInput

        size = self.runtime.image_size
        if size is not None:
            image = fit(image, size[0], size[1], "crop")
        out = self.runtime.plan(FrameInput(t_s, [self.camera], [image]))
        self.plans += 1
        self.plan_ms.append(out.total_ms)
        if not out.valid:
            self.invalid += 1
            return []
        return [(p.kind, np.asarray(p.points, dtype=float).reshape(-1, 3), float(p.horizon_s))
                for p in out.primitives]


class PlanDelay:
    """Plans in flight: each is released `latency_s` after its image's stamp, in stamp order.

    With `max_latency_s` above `latency_s`, each plan's latency is drawn uniformly from
    [latency_s, max_latency_s] (`seed`); a plan never overtakes the one before it (the planner node
    publishes in order), so its release is at least the previous one's."""

    def __init__(self, latency_s: float, max_latency_s: float | None = None, seed: int = 0) -> None:
        if not math.isfinite(latency_s) or latency_s < 0:
            raise ValueError(f"latency_s: a finite delay >= 0 s, got {latency_s}")
        hi = latency_s if max_latency_s is None else max_latency_s
        if not math.isfinite(hi) or hi < latency_s:
            raise ValueError(f"max_latency_s: a finite delay >= latency_s ({latency_s} s), got {max_latency_s}")
        self.latency_s, self.max_latency_s = latency_s, hi
        self._rng = np.random.default_rng(seed)
        self._queue: collections.deque[tuple[float, float, Sequence[Primitive]]] = collections.deque()
        self._last: tuple[float, float] | None = None  # (stamp, release) of the newest plan put
        self.latencies_s: list[float] = []

    def put(self, stamp_s: float, primitives: Sequence[Primitive]) -> None:
        if self._last is not None and stamp_s < self._last[0]:
            raise ValueError(f"stamp_s: {stamp_s} is older than the plan before it ({self._last[0]})")
        latency = self.latency_s
        if self.max_latency_s > self.latency_s:
            latency = float(self._rng.uniform(self.latency_s, self.max_latency_s))
        release = stamp_s + latency if self._last is None else max(stamp_s + latency, self._last[1])
        self.latencies_s.append(release - stamp_s)
        self._last = (stamp_s, release)
        self._queue.append((release, stamp_s, primitives))

    def due(self, now_s: float) -> list[tuple[float, Sequence[Primitive]]]:
        """(stamp, primitives) of every plan that has arrived by `now_s`, oldest first."""
        out = []
        while self._queue and self._queue[0][0] <= now_s + 1e-9:
            _, stamp, primitives = self._queue.popleft()
            out.append((stamp, primitives))
        return out
