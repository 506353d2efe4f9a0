"""Demonstrations for the action head: episodes, chunk windows and a synthetic source.

An `Episode` is what any demonstration source must provide: the commanded
joint positions at the control period, the robot state measured when each
command was issued, and the conditioning token sequence (the `PlanFeatures`
interface, [tokens, width]); until the planner exists it is built from the
annotated ground-truth plan and instruction. Training windows start at every
step; a window that runs past the end holds the last command (the robot
stays there), never zeros.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from plan_stack.actions.errors import DatasetError

__all__ = ["Episode", "ChunkWindows", "split_episodes", "synthetic_episodes"]


@dataclasses.dataclass(frozen=True)
class Episode:
    """One demonstration. `cond` is one token sequence [K, W] for the whole episode, or
    several [N, K, W] with `cond_index[k]` naming the one in force at step k (plans change
    at keyframes / sub-task boundaries)."""

    name: str
    dt_s: float
    actions: np.ndarray  # [T, D] commands, robot units
    states: np.ndarray  # [T, S] state when actions[k] was issued
    cond: np.ndarray  # [K, W] or [N, K, W] conditioning tokens
    cond_index: np.ndarray | None = None  # [T] into cond's first axis when it is [N, K, W]

    def __post_init__(self) -> None:
        a, s, c = (np.asarray(x, dtype=np.float64) for x in (self.actions, self.states, self.cond))
        if a.ndim != 2 or s.ndim != 2 or a.shape[0] != s.shape[0] or a.shape[0] < 2:
            raise DatasetError(f"{self.name}: actions [T, D] and states [T, S] with T >= 2 needed, "
                               f"got {a.shape} and {s.shape}")
        if c.ndim == 2:
            c = c[None]
        if c.ndim != 3 or c.shape[1] < 1:
            raise DatasetError(f"{self.name}: cond must be [tokens >= 1, width] or [N, tokens, width], got {c.shape}")
        idx = np.zeros(a.shape[0], dtype=int) if self.cond_index is None else np.asarray(self.cond_index, dtype=int)
        if idx.shape != (a.shape[0],) or idx.min() < 0 or idx.max() >= c.shape[0]:
            raise DatasetError(f"{self.name}: cond_index must be [T] indices into {c.shape[0]} token sequences")
        if not all(np.all(np.isfinite(x)) for x in (a, s, c)):
            raise DatasetError(f"{self.name}: non-finite values")
        if not self.dt_s > 0:
            raise DatasetError(f"{self.name}: dt_s must be > 0, got {self.dt_s!r}")
        object.__setattr__(self, "actions", a)
        object.__setattr__(self, "states", s)
        object.__setattr__(self, "cond", c)
        object.__setattr__(self, "cond_index", idx)

    def cond_slot(self, k: int) -> int:
        """Index into `cond`'s first axis of the token sequence in force at step k."""
        idx = self.cond_index  # an array once constructed (`__post_init__`)
        return 0 if idx is None else int(idx[k])

    def cond_at(self, k: int) -> np.ndarray:
        """Token sequence [K, W] in force at step k."""
        return self.cond[self.cond_slot(k)]


class ChunkWindows:
    """Every (episode, start) window of H commands, padded by holding the last command.

    Conditioning sequences of different lengths are padded to the longest with
    a validity mask (cross-attention ignores padding).
    """

    def __init__(self, episodes: list[Episode], horizon: int) -> None:
        if not episodes:
            raise DatasetError("episodes: none given")
        dims = {(e.actions.shape[1], e.states.shape[1], e.cond.shape[2]) for e in episodes}
        if len(dims) != 1:
            raise DatasetError(f"episodes: inconsistent (action, state, cond) sizes {sorted(dims)}")
        self.horizon = horizon
        self.episodes = episodes
        self.action_dim, self.state_dim, self.cond_width = dims.pop()
        self.max_tokens = max(e.cond.shape[1] for e in episodes)
        # every token sequence of every episode, padded to max_tokens, with a validity mask
        offsets = np.cumsum([0] + [e.cond.shape[0] for e in episodes])
        self._cond = np.zeros((offsets[-1], self.max_tokens, self.cond_width))
        self._mask = np.zeros((offsets[-1], self.max_tokens), dtype=bool)
        for i, e in enumerate(episodes):
            self._cond[offsets[i]:offsets[i + 1], : e.cond.shape[1]] = e.cond
            self._mask[offsets[i]:offsets[i + 1], : e.cond.shape[1]] = True
        self.index = np.array([(i, k, offsets[i] + e.cond_slot(k)) for i, e in enumerate(episodes)
                               for k in range(e.actions.shape[0])])
        # first and last conditioning row of each window's episode (a shifted plan stays in its episode)
        self._cond_bounds = np.array([(offsets[i], offsets[i + 1] - 1) for i in self.index[:, 0]])
        self._padded = [np.concatenate([e.actions, np.repeat(e.actions[-1:], horizon - 1, axis=0)])
                        for e in episodes]

    def __len__(self) -> int:
        return len(self.index)

    def batch(self, rows: np.ndarray, plan_shift: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Windows `rows` -> actions [B, H, D], state [B, S], cond [B, K, W], cond_mask [B, K].

        `plan_shift` [B] conditions each window on the plan that many plans later (or earlier, < 0) in its
        episode instead of the one in force (clipped to the episode's first and last)."""
        ep, k, c = self.index[rows, 0], self.index[rows, 1], self.index[rows, 2]
        if plan_shift is not None:
            bounds = self._cond_bounds[rows]
            c = np.clip(c + np.asarray(plan_shift, dtype=int), bounds[:, 0], bounds[:, 1])
        actions = np.stack([self._padded[i][j:j + self.horizon] for i, j in zip(ep, k)])
        states = np.stack([self.episodes[i].states[j] for i, j in zip(ep, k)])
        return {"actions": actions, "state": states, "cond": self._cond[c], "cond_mask": self._mask[c]}

    def all_actions(self) -> np.ndarray:
        return np.concatenate([e.actions for e in self.episodes])

    def all_states(self) -> np.ndarray:
        return np.concatenate([e.states for e in self.episodes])

    def all_cond(self) -> np.ndarray:
        """Every valid conditioning token [N, W] (normalisation statistics)."""
        return self._cond[self._mask]


def split_episodes(episodes: list[Episode], eval_fraction: float, seed: int = 0
                   ) -> tuple[list[Episode], list[Episode]]:
    """Held-out split by whole episodes (windows of one episode never straddle the split)."""
    if len(episodes) < 2 and eval_fraction > 0:
        raise DatasetError("episodes: need at least 2 episodes for a held-out split")
    order = np.random.default_rng(seed).permutation(len(episodes))
    n_eval = int(round(eval_fraction * len(episodes)))
    n_eval = min(max(n_eval, 1 if eval_fraction > 0 else 0), len(episodes) - 1)
    held = set(order[:n_eval].tolist())
    return ([e for i, e in enumerate(episodes) if i not in held], [e for i, e in enumerate(episodes) if i in held])


def synthetic_episodes(n: int, length: int = 120, action_dim: int = 14, cond_width: int = 16,
                       dt_s: float = 0.02, seed: int = 0) -> list[Episode]:
    """Smooth reach-to-goal motions with a bimodal detour, for tests and the RTC benchmark.

    Each episode moves from a random start to the goal given in its
    conditioning tokens along a minimum-jerk profile, plus a detour whose sign
    is NOT in the conditioning (two modes: exactly the multimodality that
    makes independently sampled chunks disagree at the seam). The state is the
    previous command (a position-tracking robot). Tokens: [goal, start] each
    written into the first `action_dim` columns, with a one-hot type marker.
    """
    if cond_width < action_dim + 2:
        raise DatasetError(f"cond_width: need >= action_dim + 2 = {action_dim + 2}, got {cond_width}")
    rng = np.random.default_rng(seed)
    out = []
    s = np.linspace(0.0, 1.0, length)
    phase = 10 * s**3 - 15 * s**4 + 6 * s**5  # minimum-jerk profile
    bump = np.sin(np.pi * phase) ** 2
    for i in range(n):
        start = rng.uniform(-1.0, 1.0, action_dim)
        goal = rng.uniform(-1.0, 1.0, action_dim)
        detour = rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 0.6) * np.ones(action_dim)
        actions = start + np.outer(phase, goal - start) + np.outer(bump, detour)
        states = np.concatenate([actions[:1], actions[:-1]])
        cond = np.zeros((2, cond_width))
        cond[0, :action_dim], cond[0, action_dim] = goal, 1.0
        cond[1, :action_dim], cond[1, action_dim + 1] = start, 1.0
        out.append(Episode(f"synthetic_{seed}_{i}", dt_s, actions, states, cond))
    return out
