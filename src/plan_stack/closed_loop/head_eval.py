"""Closed-loop rollouts of an ALOHA action head in the simulator, in one process, without ROS.

The ROS closed loop (`run-episodes`) mixes four things: the planner's accuracy,
latency, stitching and the head. This isolates the head: it drives the
joint-controlled simulator directly, conditioned on the plan features of the
seed's own scripted episode (the annotated response of each keyframe through
the frozen target, teacher-forced, exactly as the heads' training features are
made; the keyframe in force is chosen by sim time, as in training), queried on
the measured joints every `execute_steps` control periods with its chunk's
first `execute_steps` commands executed in between (no latency, no stitcher).
If the head fails here, no planner or runtime fix makes the closed loop succeed;
if it succeeds here and fails in the graph, the difference is planner, latency
or seam. `expert` replays the scripted commands through the same loop (the
ceiling: it must succeed).

ROS-free: the simulator, the head and the planner's target model only.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["HeadRollout", "rollout", "keyframe_conditioning", "summarise"]


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
    return np.array([kf.t_s for kf in kfs]), [keyframe_features(model, kf, spec) for kf in kfs]


def rollout(sample: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int, key_times: np.ndarray,
            conds: list[np.ndarray], expert_commands: np.ndarray, dt_s: float = 0.02, episode_s: float = 12.0,
            execute_steps: int = 10, task: str = "transfer_cube", sim: Any = None,
            joint_names: tuple[str, ...] = ()) -> HeadRollout:
    """One episode: `sample(state [14], cond [K, W]) -> chunk [H, 14]`; the state in joint units (grippers as
    finger positions, m: what `joint_states` carries and the heads were trained on), the chunk in stack
    units (grippers 0 closed .. 1 open: what the chunker publishes).

    `expert_commands` [T, 14] (stack units) are the scripted commands of the same seed, for the
    distance-to-expert figures only (never fed to the head).
    """
    from plan_stack.embodiments.aloha.model import joint_to_stack, stack_to_joint
    from plan_stack.embodiments.aloha.sim import AlohaSim

    sim = AlohaSim(task, offscreen_size=(64, 48)) if sim is None else sim
    sim.reset(seed=seed)
    lo, hi = sim.command_range
    substeps = int(round(dt_s / sim.timestep_s))
    n = int(round(episode_s / dt_s))
    exp_lo, exp_hi = expert_commands.min(axis=0), expert_commands.max(axis=0)
    best, queries, clipped = sim.reward(), 0, 0
    sq_err, excursion = 0.0, np.zeros(14)
    chunk: np.ndarray | None = None
    for k in range(n):
        if k % execute_steps == 0:
            state = sim.joint_positions()  # joint units, as joint_states carry them (the head's state units)
            slot = int(np.clip(np.searchsorted(key_times, k * dt_s + 1e-6, side="right") - 1, 0, len(conds) - 1))
            chunk = np.asarray(sample(state, conds[slot]), dtype=float)
            queries += 1
        assert chunk is not None
        cmd = chunk[k % execute_steps]
        q = stack_to_joint(cmd)
        clipped += int(np.any((q < lo - 1e-9) | (q > hi + 1e-9)))
        sim.set_command(np.clip(q, lo, hi))
        sim.step(substeps)
        ref = expert_commands[min(k, len(expert_commands) - 1)]
        sq_err += float(np.mean((cmd - ref) ** 2))
        measured = joint_to_stack(sim.joint_positions())
        excursion = np.maximum(excursion, np.maximum(exp_lo - measured, measured - exp_hi))
        best = max(best, sim.reward())
        if best >= 4:
            break
    worst = int(np.argmax(excursion))
    rms = float(np.sqrt(sq_err / (k + 1)))
    return HeadRollout(seed, best >= 4, best, round((k + 1) * dt_s, 3), queries, round(rms, 4),
                       round(float(excursion[worst]), 4), joint_names[worst] if joint_names else str(worst), clipped)


def summarise(rows: list[HeadRollout]) -> dict[str, Any]:
    n = len(rows)
    return {"episodes": n, "successes": sum(r.success for r in rows),
            "success_rate": round(sum(r.success for r in rows) / max(n, 1), 3),
            "reward_stages": [sum(r.max_reward == s for r in rows) for s in range(5)],
            "rms_to_expert_median": round(float(np.median([r.rms_to_expert for r in rows])), 4) if rows else None}
