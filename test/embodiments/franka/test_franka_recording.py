"""Franka demonstrations: the bag opens with rosbags, and annotations project back onto the images."""
from __future__ import annotations

import json

import numpy as np
import pytest

from plan_stack.camera import CameraModel, project_points, world_to_camera
from plan_stack.data.bags import read_bag
from plan_stack.data.recording import RecordOptions
from plan_stack.embodiments.franka.recording import FORMAT, record_episode


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    out = tmp_path_factory.mktemp("franka_demos")
    ann = record_episode(2, out, RecordOptions(width=96, height=72, camera_rate_hz=2.0, keyframe_period_s=1.0,
                                               waypoints=6))
    return out, ann


def test_bag_and_annotation(episode):
    out, ann = episode
    assert ann["format"] == FORMAT and ann["success"] and json.loads((out / "pick_place_0002.json").read_text()) == ann
    msgs = read_bag(out / "pick_place_0002")
    for topic in ("/joint_states", "/action", "/cameras/external/image_raw", "/cameras/wrist/camera_info",
                  "/ground_truth/cube/pose", "/ground_truth/success", "/instruction", "/subtask"):
        assert msgs.get(topic), topic
    assert [m.data for _, m in msgs["/subtask"]] == [s["text"] for s in ann["subtasks"]]
    js = msgs["/joint_states"][0][1]
    assert list(js.name)[:7] == [f"fr3_joint{i}" for i in range(1, 8)] and len(js.position) == 9
    assert msgs["/ground_truth/success"][-1][1].data
    cam = ann["camera"]
    model = CameraModel(cam["name"], cam["width"], cam["height"], cam["K"][0][0], cam["K"][1][1], cam["K"][0][2],
                        cam["K"][1][2])
    pose = (np.array(cam["world_position"]), np.array(cam["world_rotation"]))
    images = {round(t, 3): m for t, m in msgs["/cameras/external/image_raw"]}
    cubes = {round(t, 3): m for t, m in msgs["/ground_truth/cube/pose"]}
    tcps = {round(t, 3): m for t, m in msgs["/ground_truth/tcp/pose"]}
    checked = 0
    for kf in ann["keyframes"]:
        t = round(kf["t_s"], 3)
        tcp = tcps[t].pose.position
        first = world_to_camera(np.array([[tcp.x, tcp.y, tcp.z]]), pose)[0]
        assert np.allclose(kf["arms"]["single"]["xyz"][0], first, atol=1e-4)  # the path starts at the gripper
        if kf["subtask"] != "pick up the red cube" or t not in images:
            continue
        c = cubes[t].pose.position
        uv, inside = project_points(world_to_camera(np.array([[c.x, c.y, c.z]]), pose), model)
        u, v = uv[0]
        box = next(b["bbox"] for b in kf["boxes"] if b["object"] == "cube")
        assert inside[0] and box[0] - 1 <= u <= box[2] + 1 and box[1] - 1 <= v <= box[3] + 1
        img = images[t]
        rgb = np.asarray(img.data).reshape(img.height, img.width, 3).astype(int)
        px = rgb[int(round(v)), int(round(u))]
        assert px[0] > px[1] + 50 and px[0] > px[2] + 50  # red cube under the annotation
        checked += 1
    assert checked >= 2
