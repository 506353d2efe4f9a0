"""One base error for the planning library (STYLE rule 6)."""
from __future__ import annotations


class PlanningError(ValueError):
    """Misuse or bad input of the planning library (bad tokens, shapes, files)."""


class LayoutError(PlanningError):
    """A primitive does not fit its layout (wrong length, tokens, values)."""


class ToolCallError(PlanningError):
    """A tool call is malformed or declares an unusable block size."""
