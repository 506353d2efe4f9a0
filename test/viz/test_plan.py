"""check_plan: every rule that makes a plan undrawable raises VizError naming it."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.viz.plan import PrimitiveView, VizError, check_plan, make_plan

NAN = float("nan")


def _plan(*prims):
    return make_plan(1.5, "pick", prims)


def test_good_plan_passes_unchanged():
    plan = _plan(PrimitiveView("robot_2d3d", "left", "cam", [[0, 0, 1], [0.1, 0, 1]], [10, 20, NAN, NAN]),
                 PrimitiveView("box", uv=[1, 2, 30, 40]),
                 PrimitiveView("drive_3d", "", "base_link", [[1, 0, 0], [2, 0.1, 0]]))
    assert check_plan(plan) is plan
    assert [p.kind for p in plan.primitives_3d] == ["robot_2d3d", "drive_3d"]


@pytest.mark.parametrize("prim, rule", [
    (PrimitiveView("spline", "", "cam", [[0, 0, 1]]), "unknown kind"),
    (PrimitiveView("robot_3d", "middle", "cam", [[0, 0, 1]]), "unknown arm"),
    (PrimitiveView("robot_3d", "", "cam", [[0, NAN, 1]]), "NaN or infinite"),
    (PrimitiveView("robot_3d", "", "", [[0, 0, 1]]), "without a frame_id"),
    (PrimitiveView("robot_3d", "", "cam", np.zeros((0, 3))), "no points"),
    (PrimitiveView("robot_3d", "", "cam", [[0, 0, 1]], [1, 2]), "expected none"),
    (PrimitiveView("robot_2d3d", "", "cam", [[0, 0, 1], [0, 0, 2]], [1, 2]), "does not match 2 points"),
    (PrimitiveView("robot_2d3d", "", "cam", [[0, 0, 1]], [1, NAN]), "half an out-of-frame pair"),
    (PrimitiveView("points", uv=[1, 2, 3]), "is odd"),
    (PrimitiveView("points", uv=[1, np.inf]), "infinite"),
    (PrimitiveView("points"), "neither points nor uv"),
    (PrimitiveView("box", uv=[1, 2, 3]), "4 finite uv values"),
    (PrimitiveView("box", uv=[1, 2, NAN, 4]), "4 finite uv values"),
    (PrimitiveView("box", uv=[10, 2, 3, 4]), "u1 < u2"),
])
def test_bad_primitive_is_named(prim, rule):
    plan = _plan(PrimitiveView("robot_3d", "", "cam", [[0, 0, 1]]), prim)
    with pytest.raises(VizError, match=rf"^primitives\[1\] .*{rule}"):
        check_plan(plan)
