"""A simulator's task, one episode after another (no ROS): when the task ends, its outcome, what comes next.

A task ends when the simulator's ground truth says it is solved (its staged reward reaches the maximum) or
when its time limit passes (sim time since the scene started). What the simulator then does is `TaskEnd`:

* `continue`: the scene keeps running as it is (the outcome is said once; the robot's stack carries on);
* `hold`: sim time stops at the end state (nothing moves, nothing is published) until told otherwise;
* `reset`: after a short pause the scene restarts with the next seed (`seed + episode`) and sim time from 0,
  so the stack sees a clock reset (each node drops what it kept of the old scene) and the robot does the
  task again.

`TaskEpisodes` is the bookkeeping the simulator node calls each physics step: it never decides physics.
"""
from __future__ import annotations

import dataclasses
import enum

__all__ = ["TaskEnd", "TaskOutcome", "TaskEpisodes", "STALE_COMMAND_LEAD_S"]

#: After a reset, a command due more than this (s) ahead of sim time, and no later than this after the old
#: scene's end, is stamped in the old scene's time: it was sent before the reset and arrived after it.
STALE_COMMAND_LEAD_S = 1.0


class TaskEnd(enum.Enum):
    """What a simulator does when its task ends."""

    CONTINUE = "continue"
    HOLD = "hold"
    RESET = "reset"


@dataclasses.dataclass(frozen=True)
class TaskOutcome:
    """The end of one task (the fields of plan_stack/msg/TaskOutcome)."""

    task: str
    episode: int  # tasks ended since the simulator started, this one included (1, 2, ...)
    seed: int
    success: bool
    reason: str  # "success" or "time_limit"
    max_reward: int
    end_s: float  # sim time the task ended
    duration_s: float  # sim time from the task's start to its end
    next: TaskEnd
    next_seed: int  # the seed of the next scene, if one comes (a reset now or later)

    def text(self) -> str:
        """One log line."""
        what = "solved" if self.success else "not solved (time limit)"
        then = {TaskEnd.CONTINUE: "the scene continues", TaskEnd.HOLD: "holding the end state (sim time stopped)",
                TaskEnd.RESET: f"resetting to seed {self.next_seed}"}[self.next]
        return (f"task {self.episode} ({self.task}, seed {self.seed}): {what} in {self.duration_s:.2f} s of sim "
                f"time, max reward {self.max_reward}; {then}")


class TaskEpisodes:
    """Episode bookkeeping of one simulator: the scene's seed, the task's start, its highest reward, its end.

    `update(t, reward, on_end)` each step returns the outcome once, when the task ends (`max_reward` reached,
    or `time_limit_s` of sim time since the scene started; 0: no limit); after that, nothing until
    `next_scene`
    (a reset) starts a new task. `time_limit_s` may change between calls (a parameter set at run time).
    """

    def __init__(self, task: str, seed: int, max_reward: int, time_limit_s: float = 0.0) -> None:
        if max_reward < 1 or time_limit_s < 0:
            raise ValueError("max_reward must be >= 1 and time_limit_s >= 0")
        self.task = task
        self.seed = int(seed)
        self.max_reward = int(max_reward)
        self.time_limit_s = float(time_limit_s)
        self.episodes = 0  # tasks ended so far
        self.start_s = 0.0
        self.best = 0
        self.ended: TaskOutcome | None = None  # the outcome of the scene's task once it ended
        self.previous_end_s: float | None = None  # sim time the scene before the last reset ended

    def update(self, t_s: float, reward: int, on_end: TaskEnd) -> TaskOutcome | None:
        """Sim time `t_s` with the task's staged reward now: the outcome when the task ends at this step."""
        if self.ended is not None:
            return None
        self.best = max(self.best, int(reward))
        duration = t_s - self.start_s
        if self.best >= self.max_reward:
            reason = "success"
        elif self.time_limit_s > 0 and duration >= self.time_limit_s:
            reason = "time_limit"
        else:
            return None
        self.episodes += 1
        self.ended = TaskOutcome(self.task, self.episodes, self.seed, reason == "success", reason, self.best,
                                 float(t_s), float(duration), on_end, self.seed + 1)
        return self.ended

    def from_before_reset(self, due_s: float, now_s: float) -> bool:
        """A command whose first point is due at `due_s` (sim s), arriving at `now_s`, was stamped in the time
        of the scene before the last reset (and is no command for this one)."""
        end = self.previous_end_s
        return end is not None and now_s + STALE_COMMAND_LEAD_S < due_s <= end + STALE_COMMAND_LEAD_S

    def next_scene(self, start_s: float = 0.0) -> int:
        """A reset starts the next task: its seed (the next after the last scene's)."""
        self.previous_end_s = self.ended.end_s if self.ended is not None else None
        self.seed += 1
        self.start_s = float(start_s)
        self.best = 0
        self.ended = None
        return self.seed
