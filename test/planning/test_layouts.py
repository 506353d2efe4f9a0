"""Layouts: block sizes per kind, layout from start token + block size, dual-arm order."""
from __future__ import annotations

import pytest

from plan_stack.planning import layouts as L
from plan_stack.planning import vocab as V
from plan_stack.planning.errors import LayoutError

IMAGE = (640, 480)


@pytest.mark.parametrize("kind,formula", [
    ("box", lambda p: 6), ("robot_3d", lambda p: 3 * p + 2), ("robot_2d3d", lambda p: 5 * p + 4),
    ("dual_3d", lambda p: 6 * p + 4), ("dual_2d3d", lambda p: 10 * p + 8),
    ("drive_3d", lambda p: 2 * p + 2), ("drive_2d3d", lambda p: 4 * p + 4)])
def test_block_sizes_match_design_table(kind, formula):
    for p in (1, 2, 8, 10, 20, 64):
        lay = L.make_layout(kind, p)
        assert lay.block_size == formula(p) == L.block_size_of(kind, p)
        found = L.layout_for(lay.start_token, lay.block_size)
        assert found is not None and found.kind == kind and found.waypoints == lay.waypoints


def test_layout_for_rejects_unmatched_sizes():
    assert L.layout_for(V.BOX, 7) is None
    assert L.layout_for(V.ROBOT_2D, 55) is None  # neither 5P+4 nor 10P+8
    assert L.layout_for(V.DRIVE, 3) is None
    assert L.layout_for(V.ROBOT, 0) is None
    assert L.layout_for(V.ROBOT, 3 * (L.MAX_WAYPOINTS + 1) + 2) is None
    with pytest.raises(LayoutError, match="unknown primitive kind"):
        L.make_layout("triangle", 2)


def test_dual_arm_is_left_block_then_right_block(vocab):
    lay = L.make_layout("dual_2d3d", 10)
    starts = [s.token for s in lay.slots if s.token in V.START_TOKENS]
    assert starts == [V.ROBOT_2D, V.ROBOT, V.ROBOT_2D, V.ROBOT]
    assert lay.block_size == 108
