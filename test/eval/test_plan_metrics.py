"""Plan metrics on hand-made cases with known answers."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.eval import plan_metrics as M


def test_ade_and_fde_of_a_shifted_track():
    truth = np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0]])
    pred = truth + [0.0, 0.3, 0.4]  # every waypoint 0.5 off
    assert M.ade(pred, truth) == pytest.approx(0.5)
    assert M.fde(pred, truth) == pytest.approx(0.5)
    pred2 = truth.copy()
    pred2[-1] += [0, 0, 0.3]  # only the last one 0.3 off
    assert M.ade(pred2, truth) == pytest.approx(0.1)
    assert M.fde(pred2, truth) == pytest.approx(0.3)


def test_pixel_error_skips_points_outside_the_image():
    truth = np.array([[10.0, 10], [np.nan, np.nan], [20, 20]])
    pred = np.array([[13.0, 14], [5, 5], [np.nan, np.nan]])
    assert M.pixel_error(pred, truth) == (pytest.approx(5.0), 1)


def test_box_iou_known_values():
    assert M.box_iou((0, 0, 2, 2), (0, 0, 2, 2)) == pytest.approx(1.0)
    assert M.box_iou((0, 0, 2, 2), (1, 0, 3, 2)) == pytest.approx(2 / 6)
    assert M.box_iou((0, 0, 1, 1), (2, 2, 3, 3)) == 0.0
    assert M.box_iou((0, 0, 1, 1), ()) == 0.0
    assert M.box_iou((0, 0, math.nan, 1), (0, 0, 1, 1)) == 0.0


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="same"):
        M.ade(np.zeros((3, 3)), np.zeros((2, 3)))
