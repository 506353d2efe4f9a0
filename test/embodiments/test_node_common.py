"""node_common: rate dividers and the messages every simulator node publishes (no graph needed)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rclpy")

from std_msgs.msg import Header  # noqa: E402

from plan_stack.camera import CameraModel  # noqa: E402
from plan_stack.embodiments.node_common import Every, camera_info_msg, pose_msg  # noqa: E402


def test_every_fires_once_per_period_without_drift():
    every = Every(10.0)
    fired = [t for t in np.arange(0, 1.0 + 1e-9, 0.002) if every.due(float(t))]
    assert len(fired) == 11  # 0.0, 0.1, ..., 1.0
    assert np.allclose(np.diff(fired), 0.1, atol=2.5e-3)


def test_every_skips_missed_periods_instead_of_bursting():
    every = Every(10.0)
    assert every.due(0.0)
    assert every.due(0.55)  # late: fires once ...
    assert not every.due(0.56)  # ... and the next due time is the next period boundary, not 0.2
    assert every.due(0.6)


def test_every_never_fires_at_rate_zero():
    every = Every(0.0)
    assert not any(every.due(t) for t in (0.0, 1.0, 100.0))


def test_pose_msg_is_xyz_then_wxyz():
    msg = pose_msg(Header(frame_id="world"), np.array([1.0, 2.0, 3.0, 0.5, 0.1, 0.2, 0.3]))
    p, q = msg.pose.position, msg.pose.orientation
    assert msg.header.frame_id == "world"
    assert (p.x, p.y, p.z) == (1.0, 2.0, 3.0) and (q.w, q.x, q.y, q.z) == (0.5, 0.1, 0.2, 0.3)


def test_camera_info_msg_is_an_undistorted_pinhole():
    cam = CameraModel("c", 100, 80, 50.0, 51.0, 49.5, 39.5)
    msg = camera_info_msg(cam, Header(frame_id="c_optical_frame"))
    assert (msg.width, msg.height, msg.distortion_model) == (100, 80, "plumb_bob")
    assert list(msg.d) == [0.0] * 5
    assert np.allclose(np.reshape(msg.k, (3, 3)), cam.K)
    assert np.allclose(np.reshape(msg.p, (3, 4))[:, :3], cam.K) and np.allclose(np.reshape(msg.r, (3, 3)), np.eye(3))
