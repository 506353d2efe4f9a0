"""joint_states: one selection rule for every JointState consumer."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.joint_states import JointProblem, JointSelectError, JointSelector


def test_selects_in_configured_order_and_ignores_extra_joints():
    sel = JointSelector(("b", "a"))
    out = sel.select(["a", "x", "b"], [1.0, 9.0, 2.0], [0.1, 0.0, 0.2])
    assert out.position.tolist() == [2.0, 1.0] and out.velocity.tolist() == [0.2, 0.1] and out.effort.size == 0
    again = sel.select(["a", "x", "b"], [3.0, 9.0, 4.0])  # cached index, no velocities
    assert again.position.tolist() == [4.0, 3.0] and again.velocity.size == 0


@pytest.mark.parametrize("names, pos, vel, reason, match", [
    (["a"], [0.0], [], JointProblem.MISSING, r"missing joints \['b'\]"),
    (["a", "b"], [0.0], [], JointProblem.LENGTH, "2 names but 1 positions"),
    (["a", "b"], [0.0, 0.0], [0.0], JointProblem.LENGTH, "2 names but 1 velocities"),
    (["a", "b", "a"], [0.0, 0.0, 1.0], [], JointProblem.DUPLICATE, r"joints named twice \['a'\]"),
    (["a", "b"], [0.0, math.nan], [], JointProblem.NON_FINITE, r"non-finite position for \['b'\]"),
    (["a", "b"], [0.0, 0.0], [math.inf, 0.0], JointProblem.NON_FINITE, r"non-finite velocity for \['a'\]"),
])
def test_bad_joint_states_get_a_typed_error(names, pos, vel, reason, match):
    with pytest.raises(JointSelectError, match=match) as info:
        JointSelector(("a", "b")).select(names, pos, vel)
    assert info.value.reason is reason


def test_duplicates_can_be_tolerated_where_a_consumer_always_did():
    out = JointSelector(("b",)).select(["a", "b", "a"], [0.0, 2.0, 1.0], allow_duplicates=True)
    assert np.array_equal(out.position, [2.0])
