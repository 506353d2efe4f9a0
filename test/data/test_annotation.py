"""annotation: arc-length resampling and boxes from segmentation masks."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.data.annotation import box_from_mask, resample_arc_length


def test_resample_is_uniform_in_arc_length():
    # An L-shaped path with uneven sampling: 1 m along x (3 samples), 1 m along y (30 samples).
    path = np.concatenate([np.linspace([0, 0, 0], [1, 0, 0], 3), np.linspace([1, 0, 0], [1, 1, 0], 31)[1:]])
    out = resample_arc_length(path, 5)
    assert np.allclose(out, [[0, 0, 0], [0.5, 0, 0], [1, 0, 0], [1, 0.5, 0], [1, 1, 0]])
    steps = np.linalg.norm(np.diff(resample_arc_length(path, 10), axis=0), axis=1)
    assert np.allclose(steps[[0, 1, 2, 5, 6, 7, 8]], 2 / 9)
    assert np.allclose(resample_arc_length(np.array([[1, 2, 3]] * 4), 10), [1, 2, 3])
    with pytest.raises(ValueError, match="^count:"):
        resample_arc_length(path, 1)


def test_box_from_mask():
    m = np.zeros((10, 20), bool)
    assert box_from_mask(m) is None
    m[2:5, 7:11] = True
    assert box_from_mask(m) == [7, 2, 10, 4]
