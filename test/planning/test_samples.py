"""Keyframe -> response tokens: layout, spans, the model's ranges, and the inverse through the decoder's maths."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.data.episodes import Keyframe
from plan_stack.planning.fields import tokens_to_fields
from plan_stack.planning.quantisation import merge_ranges
from plan_stack.planning.samples import KeyframeSamples, fit_ranges, make_sample, primitives_of, response_tokens
from plan_stack.planning.tool_call import tool_call_text
from plan_stack.robots import profile


@pytest.fixture(scope="module")
def tiny_model():
    """An in-memory PlannerModel (random tiny VL target) with ALOHA-like coordinate ranges."""
    from plan_stack.planning.model_dir import PlannerModel
    from plan_stack.planning.target_build import tiny_target

    target = tiny_target("vl", layers=2, seed=3)
    manifest = {"cameras": ["cam_high"], "image_size": [32, 32], "history_frames": 1, "instruction": "do it",
                "primitive_kinds": ["dual_3d"], "budget": 160,
                "coordinate_ranges": {"robot": {"x": [-0.5, 0.5], "y": [-0.2, 0.3], "z": [0.3, 0.9]}},
                "workspace": {}, "gate_max_step_m": 0.0}
    return PlannerModel("unsaved", target, None, manifest)


def _kf(offset=0.0, boxes=None):
    pts = np.stack([np.linspace(-0.2, 0.2, 10), np.full(10, 0.1), np.linspace(0.5, 0.7, 10)], 1) + offset
    uv = np.stack([np.linspace(5, 25, 10), np.full(10, 16.0)], 1)
    uv[0] = np.nan
    img = np.zeros((32, 32, 3), np.uint8)
    return Keyframe("e", 0, 0, 0.0, "do it", "reach for the cube", [img], [pts, pts + 0.01], [uv, uv], boxes or {},
                    (32, 32))


def test_aloha_response_is_text_tool_call_block_eos(tiny_model):
    spec = profile("aloha").learning
    kf = _kf()
    ids, spans = response_tokens(tiny_model.target, kf, spec, tiny_model.ranges)
    tok = tiny_model.target.tokenizer
    (start, layout), = spans
    assert layout.kind == spec.kind and layout.waypoints == 10
    assert ids[-1] == tok.eos_token_id
    assert ids[start] == tiny_model.target.vocab[layout.start_token]
    text = tok.decode(ids[:start])
    assert text.startswith("reach for the cube. ") and text.endswith(tool_call_text(layout.block_size))
    fields = tokens_to_fields(tiny_model.target.vocab, layout, ids[start:start + layout.block_size], (32, 32),
                                ranges=tiny_model.ranges)
    # 1000 bins over 1 m (x): 1 mm steps, so the round trip is within half a bin
    np.testing.assert_allclose(np.array(fields[0].points), kf.points[0], atol=0.0006)
    np.testing.assert_allclose(np.array(fields[1].points), kf.points[1], atol=0.0006)
    sample = make_sample(tiny_model, kf, spec)
    assert sample.response == ids and sample.spans == spans
    assert sample.prompt.pixel_values is not None


def test_keyframe_samples_build_each_sample_when_read_the_same_as_make_sample(tiny_model):
    spec = profile("aloha").learning
    kfs = [_kf(0.0), _kf(0.05)]
    kfs[1].images = [np.full((32, 32, 3), 200, np.uint8)]
    lazy = KeyframeSamples(tiny_model, kfs, spec)
    assert len(lazy) == 2
    for kf, got in zip(kfs, [lazy[0], lazy[-1]]):
        want = make_sample(tiny_model, kf, spec)
        assert got.response == want.response and got.spans == want.spans
        assert torch.equal(got.prompt.input_ids, want.prompt.input_ids)
        assert torch.equal(got.prompt.pixel_values, want.prompt.pixel_values)
    assert not torch.equal(lazy[0].prompt.pixel_values, lazy[1].prompt.pixel_values)
    assert [s.response for s in lazy[0:2]] == [lazy[0].response, lazy[1].response]
    assert lazy[0] is not lazy[0]  # built on each read, kept by nobody
    # the float patches a built sample holds are what the sequence does not keep: 8x the uint8 pixels here
    patches = lazy[0].prompt.pixel_values
    assert patches.numel() * patches.element_size() >= 4 * kfs[0].images[0].nbytes
    with pytest.raises(IndexError):
        lazy[2]


def test_franka_response_has_the_box_before_the_trajectory(tiny_model):
    spec = profile("franka").learning
    kf = _kf(boxes={"cube": (3.0, 4.0, 9.0, 12.0)})
    kf.points, kf.uv = kf.points[:1], kf.uv[:1]
    prims = primitives_of(kf, spec)
    assert [layout.kind for layout, _ in prims] == ["box", "robot_2d3d"]
    ids, spans = response_tokens(tiny_model.target, kf, spec, tiny_model.ranges)
    assert [s[1].kind for s in spans] == ["box", "robot_2d3d"]
    box = tokens_to_fields(tiny_model.target.vocab, spans[0][1], ids[spans[0][0]:spans[0][0] + 6], (32, 32))
    np.testing.assert_allclose(box[0].uv, (3, 4, 9, 12), atol=0.05)
    traj = tokens_to_fields(tiny_model.target.vocab, spans[1][1], ids[spans[1][0]:spans[1][0] + spans[1][1].block_size],
                              (32, 32), ranges=tiny_model.ranges)
    assert np.isnan(traj[0].uv[0]) and traj[0].uv[2] == pytest.approx(kf.uv[0][1, 0], abs=0.05)


def test_fit_ranges_cover_the_data_with_margins():
    kfs = [_kf(0.0), _kf(0.1)]
    ranges, workspace = fit_ranges(kfs, profile("aloha").learning, margin=0.05, grid=0.05)
    pts = np.concatenate([p for k in kfs for p in k.points])
    for i, axis in enumerate("xyz"):
        lo, hi = workspace["robot"][axis]
        assert lo == pytest.approx(pts[:, i].min() - 0.05, abs=1e-4)
        assert hi == pytest.approx(pts[:, i].max() + 0.05, abs=1e-4)
        rlo, rhi = ranges["robot"][axis]
        assert rlo <= lo - 0.05 + 1e-9 and rhi >= hi + 0.05 - 1e-9
        assert rlo / 0.05 == pytest.approx(round(rlo / 0.05)) and rhi / 0.05 == pytest.approx(round(rhi / 0.05))
    merge_ranges(ranges)  # valid as a model's ranges


def test_mirrored_keyframe_is_the_scene_seen_in_a_mirror():
    """The road scene is symmetric about its centre line and the camera sits on the ego's axis: the render at
    (x, -y, -yaw) is the render at (x, y, yaw) flipped left to right, and a ground path projects to the
    mirrored pixel columns. `mirrored` makes that keyframe; arm keyframes are refused."""
    from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, FrontCamera
    from plan_stack.embodiments.drive.vehicle import VehicleParams
    from plan_stack.planning.samples import mirrored

    sim = DriveSim(DriveSceneConfig(road_length_m=200.0, obstacles=0), VehicleParams(), offscreen_size=(64, 48))
    cam = FrontCamera(sim, 64, 48)
    path = np.stack([np.linspace(4, 30, 8), np.linspace(0.2, 2.5, 8), np.zeros(8)], 1)
    views = []
    for sign in (1, -1):
        sim.state.x, sim.state.y, sim.state.yaw = 20.0, sign * 0.7, sign * 0.06
        image = cam.render()
        world = sim.ego_to_world(path * np.array([1, sign, 1]), (sim.state.x, sim.state.y, sim.state.yaw))
        from plan_stack.camera import project_points, world_to_camera

        uv, _ = project_points(world_to_camera(world, sim.camera_pose()), cam.model)
        views.append((image, uv))
    cam.close()
    (img, uv), (img_m, uv_m) = views
    assert np.abs(img.astype(int) - img_m.astype(int)).mean() > 2.5  # the two poses do look different
    kf = Keyframe("drive_1", 1, 0, 0.0, "drive", "follow the road", [img], [path], [uv], {"obstacle_0": (3, 4, 10, 9)},
                  (64, 48))
    m = mirrored(kf)
    # up to the road's shading (one big lit box: its brighter half is not mirrored, <= 16 grey levels, inside
    # the photometric jitter the target trains with)
    diff = np.abs(m.images[0].astype(int) - img_m.astype(int)).max(-1)
    assert diff.mean() < 2.5 and diff.max() < 24, (diff.mean(), diff.max())
    np.testing.assert_allclose(m.points[0], path * np.array([1, -1, 1]))
    np.testing.assert_allclose(m.uv[0], uv_m, atol=1e-6)
    assert m.boxes == {"obstacle_0": (53, 4, 60, 9)} and m.episode == "drive_1:mirrored"
    np.testing.assert_allclose(mirrored(m).images[0], img)
    with pytest.raises(ValueError, match="ground paths"):
        mirrored(_kf())
