"""One base error for the driving embodiment's libraries."""
from __future__ import annotations

from plan_stack.config import ConfigError

__all__ = ["DriveError", "DriveConfigError"]


class DriveError(ValueError):
    """Bad input to a driving library (malformed waypoints, a non-finite state)."""


class DriveConfigError(ConfigError):
    """A vehicle or converter parameter breaks a rule (message starts with the field name)."""
