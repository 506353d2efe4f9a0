"""The stitcher workloads where bounds bind: seeded chunk sources and the limits they run under.

Shared by `stitch_binding.py` (our backends against the public reference's design) and `stitch_ab.py` (a
baseline revision against the working tree), so that both feed the same chunks. Workloads (seeded;
H = 50 samples, dt = 0.02 s):
* `offset`     (a) smooth chunks (sinusoids + 3 mrad noise) starting +-5 cm (rad) away from the
               executed state;
* `rough`      (b) learned-head-like chunks: a random walk whose velocity changes by N(0, 0.5 rad/s)
               per step, plus a 0.3 rad step at a random sample;
* `tight`      (c) smooth chunks under limits a third of the usual ones;
* `rough+stitch` (d) consecutive rough chunks, each arriving after 10 executed samples and
               stitched onto the trajectory being executed;
* `infeasible` (e) a measured start 20 % above the velocity limit and accelerating outward (14 DoF:
               the arm joints; the grippers at rest).
Limits: `12` DoF v/a/j = 3/15/150 (tight: 1/5/50), all continuous; `14` DoF ALOHA: the
stitcher of config/aloha.yaml as shipped (its limits derived from aloha_bridge's, the grippers
planned as joints, chunks kept inside the position range as a head trained on demonstrations is).
"""
from __future__ import annotations

import numpy as np

from plan_stack.trajectory.alignment import Chunk
from plan_stack.trajectory.config import StitcherConfig

WORKLOADS = ("offset", "rough", "tight", "rough+stitch", "infeasible")
DT = 0.02
_ALOHA: dict | None = None


def aloha_stitcher() -> dict:
    """The stitcher parameters of config/aloha.yaml that StitcherConfig takes (limits derived by limits_from)."""
    global _ALOHA
    if _ALOHA is None:
        from plan_stack.config import field_kinds
        from plan_stack.robot_config import load_robot_config

        params = next(s for s in load_robot_config("aloha").nodes if s.name == "stitcher").parameters
        known = field_kinds(StitcherConfig)
        _ALOHA = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items() if k in known}
    return dict(_ALOHA)


def limits_for(workload: str, dof: int) -> dict:
    if dof == 14:
        a = aloha_stitcher()
        return {k: a[k] for k in ("v_max", "a_max", "j_max")}
    if workload == "tight":
        return dict(v_max=1.0, a_max=5.0, j_max=50.0)
    return dict(v_max=3.0, a_max=15.0, j_max=150.0)


def names_for(dof: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if dof == 14:
        a = aloha_stitcher()
        return tuple(a["joint_names"]), tuple(a.get("discrete_joints", ()))
    return tuple(f"joint_{i}" for i in range(dof)), ()


class ChunkSource:
    """Seeded chunks of one workload; `next()` -> (chunk, now_s, measured or None)."""

    def __init__(self, workload: str, dof: int, H: int, seed: int, lim: dict, discrete: np.ndarray) -> None:
        self.workload, self.dof, self.H = workload, dof, H
        self.rng = np.random.default_rng(seed)
        self.names = names_for(dof)[0]
        self.discrete = discrete  # column mask of rate-limited joints
        self.v_max = np.broadcast_to(np.asarray(lim["v_max"], float), (int((~discrete).sum()),))
        self.a_max = np.broadcast_to(np.asarray(lim["a_max"], float), (int((~discrete).sum()),))
        self.now = 0.0
        self.last: np.ndarray | None = None
        self.q_lo = np.full(dof, -np.inf)
        self.q_hi = np.full(dof, np.inf)
        if dof == 14:  # inside the robot's range, as a head trained on its demonstrations is
            a = aloha_stitcher()
            self.q_lo, self.q_hi = np.asarray(a["q_min"], float), np.asarray(a["q_max"], float)

    def _in_range(self, q: np.ndarray) -> np.ndarray:
        return np.minimum(np.maximum(q, self.q_lo), self.q_hi)

    def _smooth(self, t0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng, D, H = self.rng, self.dof, self.H
        ph, amp, w = rng.uniform(0, 2 * np.pi, D), rng.uniform(0.02, 0.3, D), 2 * np.pi * rng.uniform(0.1, 0.6, D)
        t = t0 + DT * np.arange(H)
        q = amp * np.sin(w * t[:, None] + ph) + rng.normal(0, 0.003, (H, D))
        return q, amp * np.sin(w * t0 + ph), amp * w * np.cos(w * t0 + ph)

    def _rough(self, q0: np.ndarray) -> np.ndarray:
        rng, D, H = self.rng, self.dof, self.H
        v = np.cumsum(rng.normal(0, 0.5, (H, D)), axis=0)
        q = q0 + np.cumsum(v * DT, axis=0) - v[0] * DT
        k = rng.integers(1, H)
        q[k:] += 0.3 * rng.choice([-1.0, 1.0], D)
        return q

    def next(self):
        wl, D = self.workload, self.dof
        c = ~self.discrete
        if wl == "rough+stitch" and self.last is not None:
            self.now += 10 * DT
            k = 10
            q = self._in_range(self._rough(self.last[k]))
            self.last = q
            return Chunk(self.now, self.names, DT, self._grip(q)), self.now, None
        self.now = 0.0
        zero = np.zeros(D)
        if wl in ("offset", "tight"):
            q, q0, v0 = self._smooth(0.0)
            if wl == "offset":
                q0 = q0 + self.rng.uniform(-0.05, 0.05, D)
            if self.dof == 14:  # around the middle of the range
                mid = 0.5 * (self.q_lo + self.q_hi)
                q, q0 = self._in_range(q + mid), self._in_range(q0 + mid)
            v0[~c] = 0.0
            return Chunk(0.0, self.names, DT, self._grip(q)), 0.0, (self._grip1(q0), np.clip(v0, -1, 1), zero)
        if wl in ("rough", "rough+stitch"):
            q0 = self._in_range(self.rng.uniform(-0.5, 0.5, D))
            q = self._in_range(self._rough(q0))
            self.last = q
            return Chunk(0.0, self.names, DT, self._grip(q)), 0.0, (self._grip1(q0), zero, zero)
        # infeasible: 20 % above the velocity limit on every continuous joint, accelerating outward
        q, q0, _ = self._smooth(0.0)
        if self.dof == 14:
            mid = 0.5 * (self.q_lo + self.q_hi)
            q, q0 = self._in_range(q + mid), self._in_range(q0 + mid)
        sign = self.rng.choice([-1.0, 1.0], int(c.sum()))
        v0, a0 = zero.copy(), zero.copy()
        v0[c] = 1.2 * self.v_max * sign
        a0[c] = 0.5 * self.a_max * sign
        if self.dof == 14:  # the grippers at rest: a 0..1 gripper has no room to brake from 1.2 x its rate
            grip = np.array(["gripper" in n for n in self.names])
            v0[grip] = a0[grip] = 0.0
        return Chunk(0.0, self.names, DT, self._grip(q)), 0.0, (self._grip1(q0), v0, a0)

    def _grip(self, q: np.ndarray) -> np.ndarray:
        """Gripper columns (normalised 0..1) follow a slow ramp, inside their rate limit."""
        if self.discrete.any():
            q = q.copy()
            q[:, self.discrete] = np.clip(0.5 + 0.5 * np.sin(np.arange(len(q)) * DT)[:, None], 0, 1)
        return q

    def _grip1(self, q0: np.ndarray) -> np.ndarray:
        if self.discrete.any():
            q0 = q0.copy()
            q0[self.discrete] = 0.5
        return q0
