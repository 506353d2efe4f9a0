"""Pick a fixed joint set out of a JointState's names and arrays: the one selection helper.

No ROS imports: callers pass `msg.name`, `msg.position`, `msg.velocity`,
`msg.effort` (any sequences). A message either yields the configured joints
in the configured order or a `JointSelectError` whose `reason` says what was
wrong, so every consumer (ingest, the stitcher, the bridges) rejects the same
inputs with the same words and can report them instead of dropping them.
Extra joints in the message are ignored.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

import numpy as np

__all__ = ["JointProblem", "JointSelectError", "Selected", "JointSelector"]


class JointProblem(enum.Enum):
    LENGTH = "length"  # an array's length does not match the names
    DUPLICATE = "duplicate"  # a name appears twice
    MISSING = "missing"  # a configured joint is not in the message
    NON_FINITE = "non_finite"  # NaN/inf in a selected value


class JointSelectError(ValueError):
    """A joint state that cannot be used; `reason` is a `JointProblem`."""

    def __init__(self, reason: JointProblem, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Selected:
    """The configured joints' values in configured order; velocity/effort are empty when the message had none."""

    position: np.ndarray  # [D]
    velocity: np.ndarray  # [D] or [0]
    effort: np.ndarray  # [D] or [0]


class JointSelector:
    """Selects `joint_names` from joint states, caching the index for the last name list seen."""

    def __init__(self, joint_names: Sequence[str]) -> None:
        self.joint_names = tuple(joint_names)
        self._key: tuple[str, ...] | None = None
        self._index: list[int] = []

    def select(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float] = (),
               effort: Sequence[float] = (), allow_duplicates: bool = False) -> Selected:
        """The configured joints' values, or JointSelectError (length, duplicate, missing, non-finite)."""
        names = tuple(names)
        if len(names) != len(position):
            raise JointSelectError(JointProblem.LENGTH, f"{len(names)} names but {len(position)} positions")
        for label, arr in (("velocities", velocity), ("efforts", effort)):
            if len(arr) not in (0, len(names)):
                raise JointSelectError(JointProblem.LENGTH, f"{len(names)} names but {len(arr)} {label}")
        if names != self._key:
            lookup = {n: i for i, n in enumerate(names)}
            if len(lookup) != len(names) and not allow_duplicates:
                twice = sorted({n for n in names if names.count(n) > 1})
                raise JointSelectError(JointProblem.DUPLICATE, f"joints named twice {twice}")
            missing = [n for n in self.joint_names if n not in lookup]
            if missing:
                raise JointSelectError(JointProblem.MISSING, f"missing joints {missing}")
            self._index = [lookup[n] for n in self.joint_names]
            self._key = names
        idx = self._index
        pos = np.asarray(position, dtype=np.float64)[idx]
        vel = np.asarray(velocity, dtype=np.float64)[idx] if len(velocity) else np.zeros(0)
        eff = np.asarray(effort, dtype=np.float64)[idx] if len(effort) else np.zeros(0)
        for label, values in (("position", pos), ("velocity", vel), ("effort", eff)):
            if not np.all(np.isfinite(values)):
                bad = [self.joint_names[i] for i in np.flatnonzero(~np.isfinite(values))]
                raise JointSelectError(JointProblem.NON_FINITE, f"non-finite {label} for {bad}")
        return Selected(pos, vel, eff)
