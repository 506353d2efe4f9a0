"""Driving demonstrations: the bag opens with rosbags; annotated waypoints are the driven future in the
ego frame and project onto the road in the recorded front images."""
from __future__ import annotations

import dataclasses
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


def _odometry(out, stem):
    msgs = read_bag(out / stem)["/odom"]
    t = np.array([t for t, _ in msgs])
    poses = np.array([[m.pose.pose.position.x, m.pose.pose.position.y,
                       2 * math.atan2(m.pose.pose.orientation.z, m.pose.pose.orientation.w)] for _, m in msgs])
    return t, poses


def test_recovery_pushes_are_seeded_bounded_in_time_and_refuse_a_bad_std():
    from plan_stack.embodiments.drive.recording import PUSH_FIRST_S, push_offset, recovery_pushes

    a, b = recovery_pushes(7, 30.0, 0.1), recovery_pushes(7, 30.0, 0.1)
    assert a == b and a != recovery_pushes(8, 30.0, 0.1)
    assert a[0].onset_s == PUSH_FIRST_S and all(p.onset_s < 30.0 for p in a) and len(a) >= 4
    p = a[0]
    assert push_offset(a, p.onset_s - 1e-3) == 0.0
    assert push_offset(a, p.onset_s + p.hold_s / 2) == pytest.approx(p.offset_rad)
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError):
            recovery_pushes(7, 30.0, bad)
    with pytest.raises(ValueError, match="perturbation"):
        DriveRecordOptions(perturbation=-1.0)


def test_recovery_demonstration_labels_the_experts_path_without_the_pushes(tmp_path):
    """Pushes move the car off the path it drives unpushed; a keyframe with no push in its horizon is
    labelled by the path the car then drove (the rollout is the recording loop, step for step), one with a
    push ahead by the expert's own path, which the pushed car did not drive."""
    from plan_stack.embodiments.drive.recording import SteeringPush, push_offset

    opts = DriveRecordOptions(width=48, height=36, duration_s=14.0, camera_rate_hz=1.0, keyframe_period_s=0.5)
    plain = record_episode(2, tmp_path / "plain", opts)
    pushed = record_episode(2, tmp_path / "pushed", dataclasses.replace(opts, perturbation=0.15))
    assert "perturbation" not in plain and pushed["perturbation"]["std_rad"] == 0.15
    pushes = pushed["perturbation"]["pushes"]
    assert len(pushes) >= 2 and pushed["success"]
    t_plain, p_plain = _odometry(tmp_path / "plain", "drive_0002")
    t_push, p_push = _odometry(tmp_path / "pushed", "drive_0002")
    # the pushes moved the car sideways (compared at the same distance along the road)
    assert np.abs(p_push[:, 1] - np.interp(p_push[:, 0], p_plain[:, 0], p_plain[:, 1])).max() > 0.15
    windows = [SteeringPush(p["onset_s"], p["hold_s"], p["offset_rad"]) for p in pushes]
    quiet = differ = 0
    for kf in pushed["keyframes"]:
        t = kf["t_s"]
        if t + pushed["horizon_s"] > t_push[-1]:
            continue
        driven = ego_waypoints(t_push, p_push, t, pushed["waypoints"], pushed["horizon_s"])[:, :2]
        ahead = np.linspace(t, t + pushed["horizon_s"], 400)
        if not any(push_offset(windows, s) for s in ahead):
            assert np.allclose(np.array(kf["xy"]), driven, atol=0.05), t
            quiet += 1
        elif np.abs(np.array(kf["xy"]) - driven).max() > 0.1:
            differ += 1
    assert quiet >= 2 and differ >= 3, (quiet, differ)


def test_pose_jumps_are_seeded_on_the_planning_grid_within_their_bounds():
    from plan_stack.embodiments.drive.recording import JUMP_GAP_S, PUSH_FIRST_S, pose_jumps

    a = pose_jumps(5, 60.0, 1.0, 0.15, 0.5)
    assert a == pose_jumps(5, 60.0, 1.0, 0.15, 0.5) and a != pose_jumps(6, 60.0, 1.0, 0.15, 0.5)
    assert a[0].t_s == PUSH_FIRST_S and all(j.t_s < 60.0 for j in a)
    assert all(abs(j.t_s / 0.5 - round(j.t_s / 0.5)) < 1e-9 for j in a)
    gaps = np.diff([j.t_s for j in a])
    assert gaps.min() >= JUMP_GAP_S[0] - 1e-9 and gaps.max() <= JUMP_GAP_S[1] + 0.5
    assert max(abs(j.dy_m) for j in a) <= 1.0 and max(abs(j.dyaw_rad) for j in a) <= 0.15
    assert max(abs(j.dy_m) for j in a) > 0.5  # uniform, not all tiny
    for bad in ((0.0, 0.0), (-1.0, 0.1), (float("inf"), 0.1)):
        with pytest.raises(ValueError):
            pose_jumps(5, 60.0, *bad, 0.5)
    with pytest.raises(ValueError, match="displacement"):
        DriveRecordOptions(displacement=(1.0, -0.1))
    with pytest.raises(ValueError, match="policy_model"):
        DriveRecordOptions(displacement=(1.0, 0.1), policy_model="drive")


def test_displacement_demonstration_jumps_the_pose_and_labels_the_way_back(tmp_path):
    """At an applied jump the odometry steps sideways, and that keyframe's label is the expert's path from the
    moved pose: it ends along the road again (in the ego frame, turned by minus the car's yaw), on the road."""
    opts = DriveRecordOptions(width=48, height=36, duration_s=16.0, camera_rate_hz=1.0, keyframe_period_s=0.5,
                              displacement=(1.0, 0.15))
    ann = record_episode(3, tmp_path, opts)
    assert ann["expert_labels"] and ann["displacement"]["max_dy_m"] == 1.0
    applied = [j for j in ann["displacement"]["jumps"] if j["applied"]]
    assert len(applied) >= 2 and max(abs(j["dyaw_rad"]) for j in applied) > 0.1, ann["displacement"]
    t, poses = _odometry(tmp_path, "drive_0003")
    by_t = {kf["t_s"]: kf for kf in ann["keyframes"]}
    for j in applied:
        i = int(np.searchsorted(t, j["t_s"] - 1e-6))
        assert t[i] == pytest.approx(j["t_s"])
        assert poses[i, 1] - poses[i - 1, 1] == pytest.approx(j["dy_m"], abs=0.05)
        xy = np.array(by_t[j["t_s"]]["xy"])
        _, y0, yaw0 = poses[i]
        end_dir = math.atan2(*(xy[-1] - xy[-2])[::-1])
        assert end_dir == pytest.approx(-yaw0, abs=0.08), (j, xy)
        y_end = y0 + math.sin(yaw0) * xy[-1, 0] + math.cos(yaw0) * xy[-1, 1]
        assert abs(y_end) < 3.5 - 0.9, (j, y_end)  # on the road, the car's half width from its edge
    assert len(ann["keyframes"]) == int(opts.duration_s / opts.keyframe_period_s) + 1
