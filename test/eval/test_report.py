"""The report of a replay on an outputs bag with known answers (built here, no graph)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from plan_stack.data.bags import SplitBagWriter
from plan_stack.eval.report import aggregate, bag_report, compare_reports
from plan_stack.viz.bag import plan_typestore

LEFT = [[0.0, 0.0, 1.0], [0.1, 0.0, 1.0]]
RIGHT = [[0.5, 0.0, 1.0], [0.5, 0.2, 1.0]]


@pytest.fixture(scope="module")
def ts():
    return plan_typestore()


def _time(ts, t):
    ns = int(round(t * 1e9))
    return ts.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)


def _header(ts, t):
    return ts.types["std_msgs/msg/Header"](stamp=_time(ts, t), frame_id="")


def _plan(ts, t, right_offset):
    T = ts.types
    prims = []
    for arm, pts in (("left", LEFT), ("right", (np.array(RIGHT) + [right_offset, 0, 0]).tolist())):
        prims.append(T["plan_stack/msg/Primitive"](
            kind="robot_2d3d", arm=arm, frame_id="cam", points=[T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2])
                                                                for p in pts],
            uv=np.array([10, 10, 20, 10], np.float32), horizon_s=0.0, block_size=24, accepted_direct=True,
            fallback_from=-1))
    return T["plan_stack/msg/VisualPlan"](header=_header(ts, t), instruction="", subtask="reach", primitives=prims,
                                          vision_ms=1.0, prefill_ms=2.0, decode_ms=3.0, total_ms=6.0,
                                          target_forwards=2, drafter_forwards=1, tokens_out=24, decoder="vflash")


def _chunk(ts, t, offset):
    times = t + 0.1 * np.arange(10)
    q = np.stack([times + offset, np.zeros(10)], axis=1).reshape(-1)  # one line in time (+ offset)
    return ts.types["plan_stack/msg/ActionChunk"](header=_header(ts, t), joint_names=["j0", "j1"], dt=0.1,
                                                  horizon=10, positions=q, prefix_len=0, inference_ms=5.0,
                                                  delay_steps=0.0)


def _trajectory(ts, t, v):
    T = ts.types
    pts = [T["trajectory_msgs/msg/JointTrajectoryPoint"](
        positions=np.array([v * k * 0.1, 0.0]), velocities=np.array([v, 0.0]), accelerations=np.zeros(2),
        effort=np.zeros(0), time_from_start=T["builtin_interfaces/msg/Duration"](sec=0, nanosec=int(k * 1e8)))
        for k in range(5)]
    return T["trajectory_msgs/msg/JointTrajectory"](header=_header(ts, t), joint_names=["j0", "j1"], points=pts)


@pytest.fixture()
def replay(tmp_path, ts):
    """Outputs of two camera sets: plans (right arm 2 cm off in the second), chunks with a 0.05 seam jump,
    trajectories at 1 and 3 rad/s; annotation with the true paths at both times."""
    bag = tmp_path / "episode"
    bag.mkdir()
    kf = lambda t: {"t_s": t, "subtask": "reach", "boxes": [],  # noqa: E731
                    "arms": {"left": {"xyz": LEFT, "uv": [[10, 10], [20, 10]]},
                             "right": {"xyz": RIGHT, "uv": [[10, 10], [20, 10]]}}}
    (tmp_path / "episode.json").write_text(json.dumps({
        "format": "plan_stack.aloha_annotation/1", "camera": {"name": "cam_high", "frame_id": "cam"},
        "instruction": "", "keyframes": [kf(1.0), kf(1.4)]}))
    w = SplitBagWriter(tmp_path / "outputs", ts)
    for topic, ty in (("/plan", "VisualPlan"), ("/action_chunk", "ActionChunk")):
        w.add_topic(topic, f"plan_stack/msg/{ty}")
    w.add_topic("/trajectory", "trajectory_msgs/msg/JointTrajectory")
    ser = ts.serialize_cdr
    w.write("/plan", 10, ser(_plan(ts, 1.0, 0.0), "plan_stack/msg/VisualPlan"))
    w.write("/plan", 20, ser(_plan(ts, 1.4, 0.02), "plan_stack/msg/VisualPlan"))
    w.write("/action_chunk", 30, ser(_chunk(ts, 1.0, 0.0), "plan_stack/msg/ActionChunk"))
    w.write("/action_chunk", 40, ser(_chunk(ts, 1.4, 0.05), "plan_stack/msg/ActionChunk"))
    w.write("/trajectory", 50, ser(_trajectory(ts, 1.0, 1.0), "trajectory_msgs/msg/JointTrajectory"))
    w.write("/trajectory", 60, ser(_trajectory(ts, 1.4, 3.0), "trajectory_msgs/msg/JointTrajectory"))
    w.close()
    return bag, tmp_path / "outputs"


def test_known_answers(replay):
    bag, outputs = replay
    r = bag_report(bag, outputs, "aloha", {"camera_sets": 2, "sets_published": 2})
    acc = r["plan_accuracy"]
    assert acc["paired_keyframes"] == 2
    # four tracks: three exact, the second plan's right arm 2 cm off at both waypoints
    assert acc["ade_3d_m"]["count"] == 4 and acc["ade_3d_m"]["mean"] == pytest.approx(0.005)
    assert acc["ade_3d_m"]["max"] == pytest.approx(0.02) and acc["fde_3d_m"]["max"] == pytest.approx(0.02)
    assert acc["sr_5cm"] == 1.0 and acc["ade_2d_px"]["max"] == 0.0 and acc["subtask_match"] == 1.0
    assert r["decoding"]["total_ms"]["mean"] == 6.0 and r["decoding"]["tokens_per_target_forward"]["p50"] == 12.0
    assert r["decoding"]["gate_accepted"] == 4 and r["decoding"]["gate_fallback"] == 0
    assert r["chunks"]["seam_jump_pos"]["max"] == pytest.approx(0.05)
    assert r["chunks"]["seam_jump_vel"]["max"] == pytest.approx(0.0, abs=1e-9)
    assert r["trajectories"]["c2_jump_vel"]["max"] == pytest.approx(2.0)
    # the ALOHA stitcher's joints are not in these trajectories: the limit check says so instead of passing
    assert r["trajectories"]["limit_unchecked"] == 2 and r["trajectories"]["limit_ratio"]["count"] == 0
    assert any("lack the stitcher's joints" in w for w in r["not_computed"])
    assert r["counts"] == {"camera_sets": 2, "observations": 0, "plans": 2, "chunks": 2, "trajectories": 2,
                           "dropped_sets": 2, "observations_without_plan": 0}
    agg = aggregate([r, r])
    assert agg["metrics"]["plan_accuracy.ade_3d_m.mean"]["count"] == 2
    rows = {x["metric"]: x for x in compare_reports({"aggregate": agg}, {"aggregate": aggregate([r])})}
    assert rows["plan_accuracy.ade_3d_m.mean.mean"]["diff"] == 0.0


def test_what_was_not_computed_is_named(tmp_path, ts):
    w = SplitBagWriter(tmp_path / "outputs", ts)
    w.close()
    r = bag_report(tmp_path / "nothing", tmp_path / "outputs", "aloha", {})
    text = " ".join(r["not_computed"])
    assert "no annotation" in text and "no plan" in text and "chunk seams" in text and "trajectories" in text
    assert r["latency_ms"]["end_to_end"]["count"] == 0 and r["latency_ms"]["end_to_end"]["mean"] is None
