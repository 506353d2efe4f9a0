"""plot_plan_3d writes a picture; pair_errors measures plan against truth per arm."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.viz.config import VizStyle
from plan_stack.viz.plan import PrimitiveView, make_plan
from plan_stack.viz.plot import pair_errors, plot_plan_3d

PTS = np.c_[np.linspace(-0.2, 0.0, 5), np.zeros(5), np.linspace(0.5, 0.7, 5)]


def test_pair_errors_match_by_arm_and_length():
    plan = make_plan(0, "", [PrimitiveView("robot_3d", "left", "f", PTS), PrimitiveView("robot_3d", "right", "f", PTS)])
    shifted = PTS + [0.0, 0.03, 0.0]
    truth = make_plan(0, "", [PrimitiveView("robot_3d", "left", "f", shifted),
                              PrimitiveView("robot_3d", "right", "f", PTS[:3])])  # length differs: no pair
    errs = pair_errors(plan, truth)
    assert set(errs) == {"left"} and errs["left"] == pytest.approx((0.03, 0.03))
    assert pair_errors(plan, None) == {}


@pytest.mark.parametrize("kind", ["robot_3d", "drive_3d", "points"])
def test_plot_writes_a_png(kind, tmp_path):
    import cv2

    plan = make_plan(1.0, "go", [PrimitiveView(kind, "", "f", PTS)])
    truth = make_plan(1.0, "go", [PrimitiveView(kind, "", "f", PTS + 0.01)])
    plot_plan_3d(plan, tmp_path / "p.png", VizStyle(), truth)
    img = cv2.imread(str(tmp_path / "p.png"))
    assert img is not None and img.shape[0] > 100 and img.std() > 5
