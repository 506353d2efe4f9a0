"""What every robot's parts promise: the `Simulator`, `Expert` and `Recorder` protocols.

A robot's profile (`plan_stack.robots`) names its parts as `module:attribute` references and
`embodiments.registry` loads them; these protocols are the types the registry returns, so the code that
drives any robot (`record-demos`, the ground-truth planner, the episode runner) is checked against one
contract instead of `Any`, as LeRobot's `Robot` base class does for its hardware. Structural (typing.Protocol),
so the robot classes need not inherit from anything. No ROS imports, nothing heavy.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol

__all__ = ["Demonstration", "Simulator", "Expert", "Recorder", "RecorderFactory"]


@dataclasses.dataclass(frozen=True)
class Demonstration:
    """What every robot's scripted expert returns (`Expert`).

    `success` means the same as in the robot's annotations; `episode` is the
    robot's own record (joint commands, trajectory, driving statistics).
    """

    robot: str
    task: str
    seed: int
    success: bool
    episode: Any


class Simulator(Protocol):
    """A robot's MuJoCo world: physics advanced in fixed timesteps from sim time 0.

    How a step is commanded differs by robot (joint positions, or acceleration and steering), and so do
    the arguments a reset takes (what it places), so only the timestep and an argument-free reset are
    common.
    """

    @property
    def timestep_s(self) -> float:
        """Physics timestep (s)."""
        ...

    def reset(self) -> object:
        """Back to sim time 0 (with the robot's own defaults for what it places)."""
        ...


class Expert(Protocol):
    """A robot's scripted expert: one demonstration of `task` for `seed`, on `sim` (None: a fresh
    simulator). Raises ValueError for a task that is not the robot's, before any simulator is built."""

    def __call__(self, task: str, seed: int, sim: Any = None) -> Demonstration:
        ...


class Recorder(Protocol):
    """Records one demonstration of the task it was made for: `(seed, options) -> annotation` (the JSON
    written beside the episode's bag); `options` is an instance of the robot's record-options class."""

    def __call__(self, seed: int, options: Any) -> dict:
        ...


class RecorderFactory(Protocol):
    """`recording.recorder`: a `Recorder` of `task` writing to `out_dir` at `width` x `height` px (one
    simulator, or one policy model, reused for every episode)."""

    def __call__(self, task: str, out_dir: str, width: int, height: int) -> Recorder:
        ...
