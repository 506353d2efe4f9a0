"""aloha annotation: 3D->2D projection checked against the renderer, and the annotation structure."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.camera import project_points, world_to_camera
from plan_stack.data.annotation import KeyframeInput, box_from_mask
from plan_stack.embodiments.aloha.annotation import build_annotation
from plan_stack.embodiments.aloha.expert import Subtask, plan_episode, replay
from plan_stack.embodiments.aloha.sim import AlohaSim, CameraRenderer


@pytest.fixture(scope="module")
def mid_episode():
    """The rig 3 s into a seeded transfer-cube episode (right gripper holding the cube), rendered at 320x240."""
    ep = plan_episode("transfer_cube", 1)
    sim = AlohaSim("transfer_cube", offscreen_size=(320, 240))
    truncated = type(ep)(**{**ep.__dict__, "commands": ep.commands[:150], "times_s": ep.times_s[:150]})
    replay(truncated, sim)
    renderer = CameraRenderer(sim, 320, 240)
    yield sim, renderer
    renderer.close()


def test_projection_matches_rendered_gripper(mid_episode):
    sim, renderer = mid_episode
    seg = renderer.segmentation("cam_high")
    pose = renderer.pose("cam_high")
    cam = renderer.models["cam_high"]
    for arm in ("left", "right"):
        fingers = [sim.model.geom(f"vx300s_{arm}/10_{s}_gripper_finger").id for s in ("left", "right")]
        mask = np.isin(seg, fingers)
        assert mask.sum() > 20, f"{arm} fingers not visible"
        v, u = np.nonzero(mask)
        centre_px = np.array([u.mean(), v.mean()])
        centre_3d = sim.data.geom_xpos[fingers].mean(axis=0)
        uv, inside = project_points(world_to_camera(centre_3d[None], pose), cam)
        assert inside[0]
        assert np.linalg.norm(uv[0] - centre_px) < 5.0, (arm, uv[0], centre_px)
        # The annotated point (tool centre) lands on the gripper in the image.
        tcp_uv, _ = project_points(world_to_camera(sim.tcp_positions()[["left", "right"].index(arm)][None], pose), cam)
        gripper = [g for g in range(sim.model.ngeom) if sim.model.geom(g).name.startswith(f"vx300s_{arm}/")
                   and ("finger" in sim.model.geom(g).name or "gripper" in sim.model.geom(g).name)]
        box = box_from_mask(np.isin(seg, gripper))
        assert box[0] - 3 <= tcp_uv[0, 0] <= box[2] + 3 and box[1] - 3 <= tcp_uv[0, 1] <= box[3] + 3


def test_build_annotation_structure(mid_episode):
    sim, renderer = mid_episode
    pose = renderer.pose("cam_high")
    times = np.linspace(0, 2, 21)
    tcp = np.stack([np.stack([np.array([-0.2, 0.5, 0.3]) + [0.01 * i, 0, 0], np.array([0.1, 0.5, 0.2]) + [0, 0, 0.01 * i]])
                    for i in range(21)])
    far = tcp.copy()
    far[:, 0] = [-5.0, 0.5, 0.3]  # left arm far outside the image
    subtasks = [Subtask("first", 0.0, 1.0), Subtask("second", 1.0, 2.0)]
    ann = build_annotation(task="transfer_cube", seed=1, instruction="do it", subtasks=subtasks,
                           camera=renderer.models["cam_high"], times_s=times, tcp_world=far,
                           keyframes=[KeyframeInput(0.0, pose, {"box": [1, 2, 3, 4]}),
                                      KeyframeInput(1.5, pose, {"box": None})],
                           waypoints=10, success=True, reward=4, bag="b")
    k0, k1 = ann["keyframes"]
    assert (k0["subtask"], k1["subtask"]) == ("first", "second")
    right = np.array(k0["arms"]["right"]["xyz"])
    assert right.shape == (10, 3)
    # Right arm rises 10 cm during "first": endpoints are the sub-task's first and last positions.
    expected = world_to_camera(np.array([[0.1, 0.5, 0.2], [0.1, 0.5, 0.3]]), pose)
    assert np.allclose(right[[0, -1]], expected, atol=1e-4)
    assert all(k0["arms"]["right"]["in_image"]) and not any(k0["arms"]["left"]["in_image"])
    assert k0["arms"]["left"]["uv"] == [None] * 10
    assert k0["boxes"] == [{"object": "box", "bbox": [1, 2, 3, 4]}] and k1["boxes"] == []
    assert ann["camera"]["K"][0][0] == renderer.models["cam_high"].fx
