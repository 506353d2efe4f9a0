"""One base error for the actions library (STYLE rule 6)."""
from __future__ import annotations

__all__ = ["ActionsError", "RtcError", "CheckpointError", "DatasetError"]


class ActionsError(ValueError):
    """Misuse or bad input of the action-chunk library (shapes, times, files)."""


class RtcError(ActionsError):
    """Inconsistent RTC input: times running backwards, shapes that do not match."""


class CheckpointError(ActionsError):
    """A checkpoint directory that is missing, incomplete or does not fit the config."""


class DatasetError(ActionsError):
    """Demonstrations that cannot be used (too short, mismatched shapes, non-finite)."""
