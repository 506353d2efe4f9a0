"""Open-loop chunked execution along a demonstration, with an injected inference delay.

This is the timeline the chunker and the robot follow, replayed offline so
RTC methods can be compared on identical inputs (benchmark `bench/rtc.py`):
a query every s steps at step q sees the demonstration's state and
conditioning at q; the chunk becomes available d steps later, so commands
q .. q+d-1 still come from the previous chunk (aligned to q), and the new
chunk takes over at q + d (the seam). The first chunk is executed from its
sample 0 (the robot waits for it). The observation is the demonstration's
(open loop), so every method sees the same inputs and the tracking error is
to the expert's commands.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from plan_stack.actions.data import Episode
from plan_stack.actions.errors import RtcError
from plan_stack.actions.rtc.runtime import RtcRequest, align_previous

__all__ = ["Sampler", "ChunkExecutor", "Rollout", "rollout", "seam_metrics"]


class Sampler(Protocol):
    """What `ChunkPolicy.sample` provides."""

    def sample(self, state, cond, request=None, generator=None, noise=None): ...


class ChunkExecutor(Protocol):
    """What runs downstream of the chunker (e.g. the stitcher) and decides the executed commands."""

    def take(self, query_step: int, start_step: int, chunk: np.ndarray) -> None:
        """A chunk sampled at `query_step` that takes over at `start_step`."""

    def command(self, step: int) -> np.ndarray:
        """The command executed at `step`."""


@dataclasses.dataclass(frozen=True)
class Rollout:
    executed: np.ndarray  # [T, D] commands actually executed
    seams: tuple[int, ...]  # steps at which a new chunk took over (after the first)
    seam_pos: tuple[float, ...]  # ||new - previous|| at each seam (both at the seam's time)
    inference_ms: tuple[float, ...]


def rollout(policy: Sampler, episode: Episode, horizon: int, delay_steps: int, execution_steps: int,
            noise_seed: int = 0, observe: Callable[[int], np.ndarray] | None = None,
            execute: Callable[[int, np.ndarray], None] | None = None,
            executor: ChunkExecutor | None = None) -> Rollout:
    """Execute `episode` chunk by chunk; noise of chunk i is seeded by (noise_seed, i) for every method.

    Open loop by default (the state at a query is the demonstration's); closed loop
    when `observe(k)` returns the robot's state at step k and `execute(k, command)`
    applies step k's command (e.g. a simulator). Conditioning is the episode's at k.
    With `executor` the raw chunks go through it (the stitcher) and the executed
    commands are its output; RTC still aligns to the previous raw chunk.
    """
    d, s, h = delay_steps, execution_steps, horizon
    if not 0 <= d <= s <= h - d:
        raise RtcError(f"need 0 <= d <= s <= H - d, got d={d}, s={s}, H={h}")
    t_len, dim = episode.actions.shape
    dt = episode.dt_s
    observe = observe or (lambda k: episode.states[k])
    executed = np.full((t_len, dim), np.nan)
    schedule = np.full((t_len, dim), np.nan)  # command due at each step, as known so far
    prev, prev_q = None, 0
    seams: list[int] = []
    seam_pos: list[float] = []
    inf_ms: list[float] = []
    for k in range(t_len):
        if k % s == 0:
            request, aligned = None, None
            if prev is not None:
                aligned = align_previous(prev, prev_q * dt, k * dt, dt, d, h)
                request = RtcRequest(k * dt, aligned.actions, aligned.prefix_len, aligned.valid_len, float(d), s,
                                     False, aligned.delta_steps)
            noise = torch.randn(1, h, dim, generator=torch.Generator().manual_seed(noise_seed * 100_003 + k // s))
            res = policy.sample(observe(k), episode.cond_at(k), request, noise=noise)
            new = res.positions
            inf_ms.append(res.inference_ms)
            start = k if prev is None else k + d  # the chunk takes over once it has been computed
            if aligned is not None and start < t_len:  # aligned: there was a previous chunk
                seams.append(start)
                seam_pos.append(float(np.linalg.norm(new[d] - aligned.actions[d])))
            stop = min(k + h, t_len)
            if start < stop:
                schedule[start:stop] = new[start - k: stop - k]
                schedule[stop:] = new[stop - k - 1]  # hold (overwritten by later chunks)
            prev, prev_q = new, k
            if executor is not None:
                executor.take(k, start, new)
        executed[k] = schedule[k] if executor is None else executor.command(k)
        if execute is not None:
            execute(k, executed[k])
    return Rollout(executed, tuple(seams), tuple(seam_pos), tuple(inf_ms))


def seam_metrics(ro: Rollout, expert: np.ndarray, dt_s: float) -> dict[str, float]:
    """Mean position/velocity jump at the seams, RMS jerk and RMS tracking error to `expert`.

    Velocity jump at seam j: ||(e_j - e_{j-1}) - (e_{j-1} - e_{j-2})|| / dt, the change of
    the executed velocity across the switch. Jerk: third difference / dt^3, L2 over joints,
    RMS over time. Norms are over all joints in robot units.
    """
    e = ro.executed
    vel = [np.linalg.norm((e[j] - e[j - 1]) - (e[j - 1] - e[j - 2])) / dt_s for j in ro.seams if j >= 2]
    jerk = np.linalg.norm(np.diff(e, n=3, axis=0), axis=1) / dt_s**3
    return {
        "seam_jump_pos": float(np.mean(ro.seam_pos)) if ro.seam_pos else float("nan"),
        "seam_jump_vel": float(np.mean(vel)) if vel else float("nan"),
        "jerk_rms": float(np.sqrt(np.mean(jerk**2))),
        "tracking_rmse": float(np.sqrt(np.mean((e - expert) ** 2))),
        "inference_ms": float(np.mean(ro.inference_ms)),
    }
