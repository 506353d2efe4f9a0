"""Latency by stage of a running graph, from wall-clock arrival times at one observer (no ROS imports).

Every stage output carries the stamp of the camera set it came from
(Observation, VisualPlan and ActionChunk headers); a trajectory is attributed
to the newest chunk received before it (the stitcher answers each chunk with
one trajectory). Stages, in wall milliseconds at the observer:

* ingest: camera image -> Observation with the same stamp
* planner: Observation -> VisualPlan with its stamp (a parallel branch: the
  chunker uses the newest plan it has)
* chunker: Observation -> ActionChunk with its stamp
* stitcher: ActionChunk -> the next trajectory
* bridge (driving, which has no chunker or stitcher): VisualPlan -> the
  DriveTrajectory with its stamp (`drive_bridge` stamps it with the plan's)
* end_to_end: camera image -> the trajectory answering the chunk (driving: the
  plan) of that stamp

`plan_age_s` is, per chunk, how old (sim time) the newest plan was against the
chunk's observation: what a slow planner costs the head.
"""
from __future__ import annotations

import numpy as np

__all__ = ["STAGES", "LatencyLog", "percentiles"]

STAGES = ("ingest", "planner", "chunker", "stitcher", "bridge", "end_to_end")


def percentiles(values, qs=(50, 95)) -> list[float | None]:
    """The given percentiles of `values`, None for each when empty."""
    v = np.asarray(list(values), dtype=float)
    return [float(np.percentile(v, q)) if v.size else None for q in qs]


class LatencyLog:
    """Arrival times keyed by stamp (integer ns of sim time); `wall` in seconds of any monotonic clock."""

    def __init__(self, keep: int = 4096) -> None:
        self._keep = keep
        self._camera: dict[int, float] = {}
        self._observation: dict[int, float] = {}
        self._chunk: tuple[int, float] | None = None  # newest chunk not yet answered
        self._plan_stamp: int | None = None
        self._plan: dict[int, float] = {}
        self.samples: dict[str, list[float]] = {s: [] for s in STAGES}
        self.plan_age_s: list[float] = []

    def _put(self, table: dict[int, float], stamp: int, wall: float) -> None:
        table.setdefault(stamp, wall)
        if len(table) > self._keep:
            for k in sorted(table)[: len(table) - self._keep]:
                del table[k]

    def camera(self, stamp: int, wall: float) -> None:
        self._put(self._camera, stamp, wall)

    def observation(self, stamp: int, wall: float) -> None:
        self._put(self._observation, stamp, wall)
        if stamp in self._camera:
            self.samples["ingest"].append(1e3 * (wall - self._camera[stamp]))

    def plan(self, stamp: int, wall: float) -> None:
        self._put(self._plan, stamp, wall)
        if stamp in self._observation:
            self.samples["planner"].append(1e3 * (wall - self._observation[stamp]))
        if self._plan_stamp is None or stamp > self._plan_stamp:
            self._plan_stamp = stamp

    def chunk(self, stamp: int, wall: float) -> None:
        if stamp in self._observation:
            self.samples["chunker"].append(1e3 * (wall - self._observation[stamp]))
        if self._plan_stamp is not None:
            self.plan_age_s.append((stamp - self._plan_stamp) * 1e-9)
        self._chunk = (stamp, wall)

    def trajectory(self, wall: float) -> None:
        if self._chunk is None:
            return
        stamp, chunk_wall = self._chunk
        self._chunk = None
        self.samples["stitcher"].append(1e3 * (wall - chunk_wall))
        if stamp in self._camera:
            self.samples["end_to_end"].append(1e3 * (wall - self._camera[stamp]))

    def stamped_trajectory(self, stamp: int, wall: float) -> None:
        """A trajectory stamped with the plan it answers (driving's `drive_trajectory`)."""
        if stamp in self._plan:
            self.samples["bridge"].append(1e3 * (wall - self._plan[stamp]))
        if stamp in self._camera:
            self.samples["end_to_end"].append(1e3 * (wall - self._camera[stamp]))

    def summary(self) -> dict[str, float | None]:
        """`<stage>_p50_ms`, `<stage>_p95_ms` per stage (None where no sample), `plan_age_p50_s` / `_p95_s`."""
        out: dict[str, float | None] = {}
        for stage in STAGES:
            p50, p95 = percentiles(self.samples[stage])
            name = "e2e_latency" if stage == "end_to_end" else f"{stage}_latency"
            out[f"{name}_p50_ms"] = None if p50 is None else round(p50, 1)
            out[f"{name}_p95_ms"] = None if p95 is None else round(p95, 1)
        a50, a95 = percentiles(self.plan_age_s)
        out["plan_age_p50_s"] = None if a50 is None else round(a50, 3)
        out["plan_age_p95_s"] = None if a95 is None else round(a95, 3)
        return out
