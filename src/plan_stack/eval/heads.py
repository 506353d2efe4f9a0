"""Closed-loop rollouts of an ALOHA action head in the simulator, in one process, without ROS.

The ROS closed loop (`run-episodes`) mixes four things: the planner's accuracy,
latency, stitching and the head. Here the head drives the joint-controlled
simulator directly, queried on the measured joints every `execute_steps`
control periods with its chunk's first `execute_steps` commands executed in
between (no latency, no stitcher), conditioned on one of two plan sources:

* `AnnotatedPlans`: the seed's own scripted episode, each keyframe's annotated
  response through the frozen target, teacher-forced (exactly as the heads'
  training features are made), the keyframe in force chosen by sim time. This
  isolates the head: if it fails here, no planner or runtime fix helps.
* `LivePlanner`: the planner model decoding the live camera image every
  `replan_steps` (what the planner node does, without its latency): the
  learned stack minus ROS. Where this fails and the annotated plans succeed,
  the planner's plans in closed loop are the difference.

`expert` replays the scripted commands through the same loop (the ceiling: it
must succeed).

ROS-free: the simulator, the head and the planner's target model only.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from plan_stack.actions.demos import keyframe_in_force

__all__ = ["HeadRollout", "rollout", "keyframe_conditioning", "AnnotatedPlans", "LivePlanner", "replay_commands",
           "summarise"]


@dataclasses.dataclass(frozen=True)
class HeadRollout:
    seed: int
    success: bool
    max_reward: int
    sim_time_s: float
    queries: int
    #: RMS over time and joints of the executed commands against the expert's at the same time (rad / units)
    rms_to_expert: float
    #: per joint, the largest distance of a measured position from anything the expert commanded in the episode
    worst_excursion: float
    worst_excursion_joint: str
    #: commands outside the simulator's servo range (clipped by the servos), counted
    clipped_commands: int

    def row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def keyframe_conditioning(model: Any, annotation_path: str, spec: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """(keyframe times [N], conditioning tokens per keyframe) of one recorded episode's annotated plans."""
    from plan_stack.actions.train_features import keyframe_features
    from plan_stack.data.episodes import load_episode_keyframes

    kfs = load_episode_keyframes(annotation_path, spec, model.image_size, successful_only=False)
    if not kfs:
        raise ValueError(f"{annotation_path}: no keyframes")
    return np.array([kf.t_s for kf in kfs]), keyframe_features(model, kfs, spec)


class AnnotatedPlans:
    """The keyframe in force at sim time t (the newest at or before it), as in training."""

    def __init__(self, key_times: np.ndarray, conds: list[np.ndarray]) -> None:
        if len(key_times) != len(conds) or not conds:
            raise ValueError("key_times and conds: one conditioning per keyframe, at least one")
        self.key_times, self.conds = np.asarray(key_times, dtype=float), conds

    def __call__(self, t_s: float, sim: Any) -> np.ndarray:
        return self.conds[keyframe_in_force(self.key_times, t_s)]


class LivePlanner:
    """The planner model on the live image of `camera` (fitted as ingest does), its plan features."""

    def __init__(self, model: Any, decoder: str, sim: Any, camera: str = "cam_high",
                 camera_size: tuple[int, int] = (320, 240), instruction: str = "") -> None:
        from plan_stack.embodiments.aloha.sim import CameraRenderer

        self.model, self.decoder_name, self.camera, self.camera_size = model, decoder, camera, camera_size
        self.decoder = model.decoder(None, decodings=[decoder])
        self.renderer = CameraRenderer(sim, camera_size[0], camera_size[1], (camera,))
        self.instruction = instruction or model.manifest["instruction"]

    def __call__(self, t_s: float, sim: Any) -> np.ndarray:
        from plan_stack.ingest.preprocess import fit

        w, h = self.model.required_image_size()
        image = fit(self.renderer.render(self.camera), w, h, "crop")
        result = self.decoder.generate(self.model.encode(self.instruction, [[image]]), decoder=self.decoder_name,
                                       image_size=self.camera_size)
        return result.features.float().cpu().numpy()

    def close(self) -> None:
        self.renderer.close()


def rollout(sample: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int,
            plans: Callable[[float, Any], np.ndarray], expert_commands: np.ndarray, dt_s: float = 0.02,
            episode_s: float = 12.0, execute_steps: int = 10, replan_steps: int = 1, task: str = "transfer_cube",
            sim: Any = None, joint_names: tuple[str, ...] = (), delay_steps: int = 0) -> HeadRollout:
    """One episode: `sample(state [14], cond [K, W]) -> chunk [H, 14]`; the state in joint units (grippers as
    finger positions, m: what `joint_states` carries and the heads were trained on), the chunk in stack
    units (grippers 0 closed .. 1 open: what the chunker publishes).

    `expert_commands` [T, 14] (stack units) are the scripted commands of the same seed, for the
    distance-to-expert figures only (never fed to the head). `plans(t_s, sim)` gives the conditioning
    tokens; it is asked at most every `replan_steps` control periods, before a query.

    `delay_steps` models the graph's latency: a chunk queried on the state at step q reaches the robot at
    q + delay_steps and is executed from its row delay_steps on (its rows stay due at q + i, as the
    stitcher aligns them by stamp); until then the previous chunk runs on (the start pose before the first).
    """
    if delay_steps < 0:
        raise ValueError(f"delay_steps: >= 0, got {delay_steps}")
    from plan_stack.embodiments.aloha.model import joint_to_stack, stack_to_joint
    from plan_stack.embodiments.aloha.sim import MAX_REWARD, AlohaSim

    sim = AlohaSim(task, offscreen_size=(64, 48)) if sim is None else sim
    sim.reset(seed=seed)
    lo, hi = sim.command_range
    substeps = int(round(dt_s / sim.timestep_s))
    n = int(round(episode_s / dt_s))
    exp_lo, exp_hi = expert_commands.min(axis=0), expert_commands.max(axis=0)
    best, queries, clipped = sim.reward(), 0, 0
    sq_err, excursion = 0.0, np.zeros(14)
    active: tuple[np.ndarray, int] | None = None  # (chunk, step it was queried at) the robot executes
    pending: list[tuple[np.ndarray, int]] = []  # queried, not yet arrived
    hold = joint_to_stack(sim.joint_positions())
    cond: np.ndarray | None = None
    planned_at = -replan_steps
    for k in range(n):
        if k % execute_steps == 0:
            if cond is None or k - planned_at >= replan_steps:
                cond, planned_at = plans(k * dt_s, sim), k
            state = sim.joint_positions()  # joint units, as joint_states carry them (the head's state units)
            chunk = np.asarray(sample(state, cond), dtype=float)
            if len(chunk) < execute_steps + delay_steps:
                raise ValueError(f"execute_steps + delay_steps: {execute_steps + delay_steps} commands per chunk, "
                                 f"but the chunk has {len(chunk)}")
            pending.append((chunk, k))
            queries += 1
        while pending and pending[0][1] + delay_steps <= k:
            active = pending.pop(0)
        cmd = hold if active is None else active[0][min(k - active[1], len(active[0]) - 1)]
        q = stack_to_joint(cmd)
        clipped += int(np.any((q < lo - 1e-9) | (q > hi + 1e-9)))
        sim.set_command(np.clip(q, lo, hi))
        sim.step(substeps)
        ref = expert_commands[min(k, len(expert_commands) - 1)]
        sq_err += float(np.mean((cmd - ref) ** 2))
        measured = joint_to_stack(sim.joint_positions())
        excursion = np.maximum(excursion, np.maximum(exp_lo - measured, measured - exp_hi))
        best = max(best, sim.reward())
        if best >= MAX_REWARD:
            break
    worst = int(np.argmax(excursion))
    rms = float(np.sqrt(sq_err / (k + 1)))
    return HeadRollout(seed, best >= MAX_REWARD, best, round((k + 1) * dt_s, 3), queries, round(rms, 4),
                       round(float(excursion[worst]), 4), joint_names[worst] if joint_names else str(worst), clipped)


def replay_commands(commands: np.ndarray, execute_steps: int, horizon: int = 50
                    ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A `sample` that replays `commands` (the scripted expert) query by query, ignoring state and plan."""
    queries = [0]

    def sample(state: np.ndarray, cond: np.ndarray) -> np.ndarray:
        k = queries[0] * execute_steps
        queries[0] += 1
        return commands[np.minimum(np.arange(k, k + horizon), len(commands) - 1)]
    return sample


def summarise(rows: list[HeadRollout]) -> dict[str, Any]:
    from plan_stack.embodiments.aloha.sim import MAX_REWARD

    n = len(rows)
    return {"episodes": n, "successes": sum(r.success for r in rows),
            "success_rate": round(sum(r.success for r in rows) / max(n, 1), 3),
            "reward_stages": [sum(r.max_reward == s for r in rows) for s in range(MAX_REWARD + 1)],
            "rms_to_expert_median": round(float(np.median([r.rms_to_expert for r in rows])), 4) if rows else None}
