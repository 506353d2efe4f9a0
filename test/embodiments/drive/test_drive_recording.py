"""Driving demonstrations: the bag opens with rosbags; annotated waypoints are the driven future in the
ego frame and project onto the road in the recorded front images."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.data.bags import read_bag
from plan_stack.embodiments.drive.recording import FORMAT, DriveRecordOptions, ego_waypoints, record_episode


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    out = tmp_path_factory.mktemp("drive_demos")
    ann = record_episode(1, out, DriveRecordOptions(width=96, height=72, duration_s=6.0, camera_rate_hz=2.0,
                                                    keyframe_period_s=1.0))
    return out, ann


def test_ego_waypoints_are_uniform_in_time_in_the_ego_frame():
    t = np.linspace(0.0, 10.0, 101)
    poses = np.stack([10.0 + 0 * t, 3.0 * t, np.full_like(t, math.pi / 2)], axis=1)  # driving +y at 3 m/s
    pts = ego_waypoints(t, poses, 2.0, 8, 4.0)
    assert np.allclose(pts[:, 0], 1.5 * np.arange(1, 9)) and np.allclose(pts[:, 1:], 0.0, atol=1e-9)


def test_bag_and_annotation(episode):
    out, ann = episode
    assert ann["format"] == FORMAT and ann["success"] and len(ann["keyframes"]) == 7
    msgs = read_bag(out / "drive_0001")
    for topic in ("/odom", "/cameras/front/image_raw", "/cameras/front/camera_info", "/instruction",
                  "/ground_truth/obstacles"):
        assert msgs.get(topic), topic
    odom_t = np.array([t for t, _ in msgs["/odom"]])
    odom = np.array([[m.pose.pose.position.x, m.pose.pose.position.y,
                      2 * math.atan2(m.pose.pose.orientation.z, m.pose.pose.orientation.w)] for _, m in msgs["/odom"]])
    images = {round(t, 3): m for t, m in msgs["/cameras/front/image_raw"]}
    on_road = 0
    for kf in ann["keyframes"]:
        t = kf["t_s"]
        if t + ann["horizon_s"] <= odom_t[-1]:  # the recorded odometry covers this future
            expected = ego_waypoints(odom_t, odom, t, ann["waypoints"], ann["horizon_s"])
            assert np.allclose(np.array(kf["xy"]), expected[:, :2], atol=0.05)
        img = images.get(round(t, 3))
        if img is None:
            continue
        rgb = np.asarray(img.data).reshape(img.height, img.width, 3).astype(int)
        for uv, inside in zip(kf["uv"], kf["in_image"]):
            if not inside:
                continue
            r, g, b = rgb[int(round(uv[1])), int(round(uv[0]))]
            assert abs(r - b) < 30 and g < r + 25, (t, uv, (r, g, b))  # asphalt or lane paint, not grass or sky
            on_road += 1
    assert on_road >= 10
