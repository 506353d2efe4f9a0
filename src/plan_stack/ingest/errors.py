"""One base error for the ingest subpackage; bad inputs raise its subclasses."""
from __future__ import annotations

__all__ = ["IngestError", "FrameError", "JointStateError"]


class IngestError(ValueError):
    """Base of every ingest input error (the message says what was wrong)."""


class FrameError(IngestError):
    """A camera frame that cannot be decoded or converted faithfully."""


class JointStateError(IngestError):
    """A joint state with missing joints, mismatched arrays or non-finite values."""
