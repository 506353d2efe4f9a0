"""Joint buffer: ordering, bounds, interpolation and nearest lookup."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.ingest.errors import JointStateError
from plan_stack.ingest.joints import JointBuffer


def test_names_come_from_the_first_message_when_not_configured():
    buf = JointBuffer((), capacity=4, mode="interpolate", tolerance_s=0.1)
    buf.add(buf.validate(1.0, ["b", "a"], [2.0, 1.0]))
    assert buf.names == ("b", "a")
    s = buf.validate(1.1, ["a", "b"], [1.5, 2.5], velocity=[0.1, 0.2])
    assert list(s.position) == [2.5, 1.5] and list(s.velocity) == [0.2, 0.1]
    assert s.names == ("b", "a")  # a sample names the joints its values follow
    buf.add(s)
    assert buf.at(1.05).sample.names == ("b", "a")  # interpolated too
    with pytest.raises(JointStateError, match="non-empty and unique"):
        JointBuffer((), 4, "nearest", 0.1).validate(1.0, ["a", "a"], [0, 0])


def test_buffer_is_bounded_sorted_and_rejects_duplicates():
    buf = JointBuffer(("a",), capacity=3, mode="interpolate", tolerance_s=1.0)
    for t in (1.0, 3.0, 2.0, 4.0):  # 2.0 arrives out of order and is put in place
        assert buf.add(buf.validate(t, ["a"], [t])) is None
    assert len(buf) == 3 and buf.newest_s == 4.0
    assert buf.add(buf.validate(3.0, ["a"], [0.0])) == "duplicate"
    assert buf.at(2.5).sample.position[0] == pytest.approx(2.5)
    assert buf.at(1.5).sample is None and "no joint state before" in buf.at(1.5).reason  # 1.0 was evicted
    assert buf.at(4.5).wait


def test_interpolation_covers_velocity_and_effort_when_both_sides_have_them():
    buf = JointBuffer(("a", "b"), capacity=8, mode="interpolate", tolerance_s=0.05)
    buf.add(buf.validate(0.0, ["a", "b"], [0.0, 10.0], [1.0, 1.0], [0.0, 4.0]))
    buf.add(buf.validate(0.04, ["a", "b"], [4.0, 6.0], [3.0, 3.0], [2.0, 0.0]))
    s = buf.at(0.01).sample
    np.testing.assert_allclose(s.position, [1.0, 9.0])
    np.testing.assert_allclose(s.velocity, [1.5, 1.5])
    np.testing.assert_allclose(s.effort, [0.5, 3.0])
    assert buf.at(0.04).sample.stamp_s == 0.04  # exact hit


def test_nearest_picks_the_closer_sample():
    buf = JointBuffer(("a",), capacity=8, mode="nearest", tolerance_s=0.02)
    buf.add(buf.validate(0.0, ["a"], [0.0]))
    buf.add(buf.validate(0.03, ["a"], [3.0]))
    assert buf.at(0.01).sample.position[0] == 0.0
    assert buf.at(0.02).sample.position[0] == 3.0
    with pytest.raises(ValueError, match="mode"):
        JointBuffer(("a",), 8, "cubic", 0.1)
