"""Plan accuracy against annotated ground truth: ADE/FDE, success within a radius, pixel error, box IoU.

Pure numpy. A "track" is one arm's P waypoints; metrics are averaged over
tracks (ADE: mean waypoint distance of a track; FDE: distance of its last
waypoint), so each arm of each keyframe weighs the same.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["ade", "fde", "pixel_error", "box_iou", "OUTLIER_M", "SR_RADIUS_M"]

OUTLIER_M = 0.5  #: a decoded waypoint this far from ground truth is an outlier
SR_RADIUS_M = 0.05  #: a track succeeds when its final waypoint is within this radius


def _pair(pred: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred, truth = np.asarray(pred, dtype=float), np.asarray(truth, dtype=float)
    if pred.shape != truth.shape or pred.ndim != 2 or len(pred) == 0:
        raise ValueError(f"tracks must have the same [P, D] shape with P >= 1, got {pred.shape} and {truth.shape}")
    return pred, truth


def ade(pred: np.ndarray, truth: np.ndarray) -> float:
    """Mean Euclidean distance over the waypoints of one track."""
    p, t = _pair(pred, truth)
    return float(np.linalg.norm(p - t, axis=1).mean())


def fde(pred: np.ndarray, truth: np.ndarray) -> float:
    """Euclidean distance of the last waypoint."""
    p, t = _pair(pred, truth)
    return float(np.linalg.norm(p[-1] - t[-1]))


def pixel_error(pred: np.ndarray, truth: np.ndarray) -> tuple[float, int]:
    """(sum of pixel distances, count) over waypoints both inside the image (NaN marks outside)."""
    p, t = _pair(pred, truth)
    ok = np.isfinite(p).all(1) & np.isfinite(t).all(1)
    return float(np.linalg.norm(p[ok] - t[ok], axis=1).sum()), int(ok.sum())


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two (u1, v1, u2, v2) boxes (0 when either is degenerate or not finite)."""
    if len(a) != 4 or len(b) != 4 or not all(math.isfinite(float(v)) for v in (*a, *b)):
        return 0.0
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(iw, 0.0) * max(ih, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 and (a[2] > a[0] and a[3] > a[1]) and (b[2] > b[0] and b[3] > b[1]) \
        else 0.0
