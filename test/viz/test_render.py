"""`plan-stack render`: PNGs from a bag with plans + Observations (and an annotation), and from a
recorded demonstration (ground truth only)."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from plan_stack.cli import main as cli_main
from plan_stack.viz.bag import plan_typestore, truth_plans
from plan_stack.viz.config import VizStyle, to_rgb8
from plan_stack.viz.render import render_bag

STYLE = VizStyle()
NAN = float("nan")
H, W = 60, 80
FRAME = "cam_high_optical_frame"


def _read_png(path) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


def _image(seed):
    return np.random.default_rng(seed).integers(0, 200, (H, W, 3), dtype=np.uint8)


class _Bag:
    """A rosbag2 MCAP bag with VisualPlan and Observation messages, written with rosbags."""

    def __init__(self, path):
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.ts = plan_typestore()
        self.T = self.ts.types
        self.w = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
        self.w.open()
        self.conn = {t: self.w.add_connection(t, ty, typestore=self.ts) for t, ty in (
            ("/plan", "plan_stack/msg/VisualPlan"), ("/observation", "plan_stack/msg/Observation"),
            ("/cameras/cam_high/image_raw", "sensor_msgs/msg/Image"))}

    def header(self, t, frame=""):
        sec = int(t)
        return self.T["std_msgs/msg/Header"](
            stamp=self.T["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((t - sec) * 1e9))), frame_id=frame)

    def image(self, t, rgb):
        return self.T["sensor_msgs/msg/Image"](header=self.header(t, FRAME), height=H, width=W, encoding="rgb8",
                                                is_bigendian=0, step=3 * W, data=rgb.reshape(-1))

    def observation(self, t, seed):
        T = self.T
        js = T["sensor_msgs/msg/JointState"](header=self.header(t), name=[], position=np.zeros(0),
                                             velocity=np.zeros(0), effort=np.zeros(0))
        msg = T["plan_stack/msg/Observation"](
            header=self.header(t), camera_names=["cam_high", "cam_low"],
            images=[self.image(t, _image(seed)), self.image(t, _image(seed + 50))],
            source_stamps=[self.header(t).stamp] * 2, joint_state=js, max_skew=0.0, instruction="transfer")
        self._write("/observation", t, msg, "plan_stack/msg/Observation")

    def camera(self, t, seed):
        self._write("/cameras/cam_high/image_raw", t, self.image(t, _image(seed)), "sensor_msgs/msg/Image")

    def plan(self, t, prims, subtask="grasp"):
        T = self.T
        ps = [T["plan_stack/msg/Primitive"](
            kind=k, arm=a, frame_id=FRAME, points=[T["geometry_msgs/msg/Point"](x=float(x), y=float(y), z=float(z))
                                                   for x, y, z in pts],
            uv=np.asarray(uv, dtype=np.float32), horizon_s=0.0, block_size=0, accepted_direct=True, fallback_from=-1)
            for k, a, pts, uv in prims]
        msg = T["plan_stack/msg/VisualPlan"](
            header=self.header(t), instruction="transfer", subtask=subtask, primitives=ps, vision_ms=0.0,
            prefill_ms=0.0, decode_ms=0.0, total_ms=0.0, target_forwards=0, drafter_forwards=0, tokens_out=0,
            decoder="vflash")
        self._write("/plan", t + 0.1, msg, "plan_stack/msg/VisualPlan")

    def _write(self, topic, t, msg, ty):
        self.w.write(self.conn[topic], int(t * 1e9), self.ts.serialize_cdr(msg, ty))

    def close(self):
        self.w.close()


LEFT_PTS = [[0.1, 0.0, 0.5], [0.12, 0.01, 0.52], [0.15, 0.02, 0.55]]
LEFT_UV = [10, 10, 25, 12, NAN, NAN]
RIGHT_PTS = [[-0.1, 0.0, 0.5], [-0.2, 0.0, 0.6]]
RIGHT_UV = [60, 40, 70, 50]
TRUTH_UV = [[10, 45], [20, 50], None]


@pytest.fixture(scope="module")
def plan_bag(tmp_path_factory):
    root = tmp_path_factory.mktemp("bags")
    bag = _Bag(root / "run")
    bag.observation(1.0, seed=1)
    bag.observation(2.0, seed=2)
    bag.plan(1.0, [("robot_2d3d", "left", LEFT_PTS, LEFT_UV), ("robot_2d3d", "right", RIGHT_PTS, RIGHT_UV),
                   ("box", "", [], [30, 30, 50, 45])])
    bag.plan(2.0, [("robot_2d3d", "left", [[0, NAN, 1]] * 3, LEFT_UV)])  # bad: NaN point
    bag.plan(3.0, [("robot_3d", "right", RIGHT_PTS, [])])  # no Observation at 3.0: 3D plot only
    bag.close()
    annotation = {
        "format": "plan_stack.aloha_annotation/1", "instruction": "transfer",
        "camera": {"name": "cam_high", "frame_id": FRAME, "width": W, "height": H},
        "keyframes": [{"t_s": 1.0, "subtask": "grasp", "boxes": [],
                       "arms": {"left": {"xyz": [[0.1, 0.0, 0.5], [0.11, 0.0, 0.5], [0.14, 0.02, 0.56]],
                                         "uv": TRUTH_UV, "in_image": [True, True, False]}}}]}
    (root / "run.json").write_text(json.dumps(annotation))
    return root / "run"


def test_render_plan_bag_writes_overlays_and_3d_plots(plan_bag, tmp_path, capsys):
    status = cli_main(["render", str(plan_bag), "--out", str(tmp_path)])
    assert status == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overlay_0000.png", "plan3d_0000.png", "plan3d_0002.png"]
    err = capsys.readouterr().err
    assert "plan 1 at 2.000 s" in err and "NaN" in err and "plan 2 at 3.000 s: no image" in err
    img = _read_png(tmp_path / "overlay_0000.png")
    src = _image(1)
    for uv, arm in ((LEFT_UV, "left"), (RIGHT_UV, "right")):
        for u, v in np.asarray(uv).reshape(-1, 2):
            if np.isfinite(u):
                assert tuple(img[int(v), int(u)]) == STYLE.rgb8_of(arm)
    for uv in TRUTH_UV[:2]:
        assert tuple(img[uv[1], uv[0]]) == to_rgb8(STYLE.colour_truth)
    assert tuple(img[30, 40]) == to_rgb8(STYLE.colour_box)
    changed = np.any(img != src, axis=2)
    assert np.array_equal(img[~changed], src[~changed]) and not changed[H - 4:, W - 4:].any()
    plot = _read_png(tmp_path / "plan3d_0000.png")
    assert plot.shape[2] == 3 and plot.std() > 5


def test_render_options_and_errors(plan_bag, tmp_path, capsys):
    res = render_bag(plan_bag, tmp_path / "a", every=2, truth_tolerance_s=0.0)
    assert res.plans == 2 and [p.name for p in res.files] == ["overlay_0000.png", "plan3d_0000.png",
                                                            "plan3d_0001.png"]
    assert res.with_truth == 1
    res = render_bag(plan_bag, tmp_path / "b", camera="cam_low", limit=1)
    assert res.plans == 1 and tuple(_read_png(res.files[0])[10, 10]) == STYLE.rgb8_of("left")
    assert cli_main(["render", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "render: bag:" in capsys.readouterr().err
    assert cli_main(["render", str(plan_bag), "--out", str(tmp_path / "c"), "--camera", "cam_side"]) == 2
    assert "cam_side" in capsys.readouterr().err


def test_render_recorded_demo_draws_the_annotated_ground_truth(aloha_demo, tmp_path):
    res = render_bag(aloha_demo, tmp_path)
    assert res.source == "keyframes"
    ann = json.loads((aloha_demo.parent / "transfer_cube_0002.json").read_text())
    assert [p.name for p in res.files] == [f"truth_{k:04d}.png" for k in range(len(ann["keyframes"]))]
    assert not res.skipped
    colours = {STYLE.rgb8_of("left"), STYLE.rgb8_of("right")}
    checked = 0
    for path, kf in zip(res.files, ann["keyframes"]):
        img = _read_png(path)
        assert img.shape == (48, 64, 3)
        for arm in ("left", "right"):
            for uv in kf["arms"][arm]["uv"]:
                if uv is not None:
                    assert tuple(img[int(round(uv[1])), int(round(uv[0]))]) in colours
                    checked += 1
    assert checked > 0
    truths = truth_plans(ann)
    assert truths[0].primitives_3d[0].frame_id == "cam_high_optical_frame"


def test_without_observations_the_raw_frame_with_the_plans_stamp_is_used(tmp_path):
    bag = _Bag(tmp_path / "raw")
    bag.camera(1.0, seed=7)
    bag.camera(1.1, seed=8)
    bag.plan(1.1, [("robot_2d3d", "right", RIGHT_PTS, RIGHT_UV)])
    bag.plan(1.05, [("robot_2d3d", "right", RIGHT_PTS, RIGHT_UV)])  # no frame with this stamp
    bag.close()
    res = render_bag(tmp_path / "raw", tmp_path / "out")
    assert [p.name for p in res.files] == ["plan3d_0000.png", "overlay_0001.png", "plan3d_0001.png"]
    assert "plan 0 at 1.050 s: no image" in res.skipped[0]
    img, src = _read_png(res.files[1]), _image(8)
    assert tuple(img[40, 60]) == STYLE.rgb8_of("right")
    changed = np.any(img != src, axis=2)
    assert np.array_equal(img[~changed], src[~changed])
