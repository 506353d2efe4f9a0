"""Scoring rows (ADE/FDE/SR/outliers/sub-task/IoU) and the blind baseline on hand-made keyframes."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.data.episodes import Keyframe
from plan_stack.eval import plans as EV
from plan_stack.robots import profile


def _kf(index, points, subtask="reach", boxes=None, seed=0):
    pts = [np.asarray(p, dtype=float) for p in points]
    uv = [np.full((len(p), 2), 10.0) for p in pts]
    return Keyframe("e", seed, index, 0.5 * index, "do it", subtask, [], pts, uv, boxes or {}, (64, 64))


def _line(offset):
    return np.stack([np.linspace(0, 1, 4), np.zeros(4), np.full(4, 0.5)], 1) + offset


def test_row_has_known_ade_fde_sr_outliers_and_subtask_match():
    spec = profile("aloha").learning
    kf = _kf(0, [_line(0), _line(0)])
    s = EV.Scorer("ar", spec.arms)
    # left exact, right 4 cm off at every waypoint; sub-task right
    s.add(kf, EV.Prediction("reach.", [_line(0), _line(np.array([0, 0.04, 0]))], [np.full((4, 2), 13.0)] * 2, {}))
    # left 0.6 m off (4 outliers), right exact; sub-task wrong
    s.add(kf, EV.Prediction("grasp.", [_line(np.array([0.6, 0, 0])), _line(0)], [np.full((4, 2), 10.0)] * 2, {}))
    s.add(kf, EV.Prediction("reach.", None, None, {}))  # no valid plan
    r = s.row()
    assert r["n"] == 3 and r["invalid"] == 1
    assert r["ade_3d_m"] == pytest.approx((0 + 0.04 + 0.6 + 0) / 4)
    assert r["fde_3d_m"] == pytest.approx((0 + 0.04 + 0.6 + 0) / 4)
    assert r["sr_5cm"] == pytest.approx(3 / 4)
    assert r["ade_3d_m_by_arm"] == {"left": pytest.approx(0.3), "right": pytest.approx(0.02)}
    assert r["ade_3d_m_by_subtask"]["reach"] == pytest.approx(0.16)
    assert r["outliers"] == 4
    assert r["subtask_match"] == pytest.approx(2 / 3)
    assert r["ade_2d_px"] == pytest.approx(8 * 3 * 2 ** 0.5 / 16)  # 8 waypoints 3 px off, 8 exact
    # an invalid plan costs 1 m in the selection score
    assert s.score == pytest.approx((0.64 + 2.0) / 6)


def test_box_iou_counts_missing_boxes_as_zero():
    spec = profile("franka").learning
    kf = _kf(0, [_line(0)], boxes={"cube": (0, 0, 2, 2)})
    s = EV.Scorer("ar", spec.arms, spec.box_objects)
    s.add(kf, EV.Prediction("reach.", [_line(0)], [np.full((4, 2), 10.0)], {"cube": (1, 0, 3, 2)}))
    s.add(kf, EV.Prediction("reach.", [_line(0)], [np.full((4, 2), 10.0)], {}))
    assert s.row()["box_iou"] == pytest.approx((2 / 6 + 0) / 2)


def test_blind_baseline_is_the_mean_plan_per_keyframe_index():
    kfs = [_kf(0, [_line(0), _line(0)], "reach"), _kf(0, [_line(0.2), _line(0.2)], "reach"),
           _kf(1, [_line(1), _line(1)], "grasp")]
    blind = EV.blind_baseline(kfs)
    assert sorted(blind) == ["0", "1"]
    p = EV.blind_prediction(blind, _kf(0, [_line(0), _line(0)]))
    np.testing.assert_allclose(p.points[0], _line(0.1), atol=1e-5)  # stored to 5 decimals
    assert p.subtask == "reach."
    far = EV.blind_prediction(blind, _kf(7, [_line(0), _line(0)]))  # beyond the training episodes: last index
    np.testing.assert_allclose(far.points[1], _line(1), atol=1e-5)


def test_blind_baseline_boxes_are_in_name_order_so_a_rebuild_writes_the_same_bytes():
    names = [f"obstacle_{i}" for i in (7, 2, 5, 0, 3, 6, 1, 4)]
    kfs = [_kf(0, [_line(0), _line(0)], boxes={n: (i, 1.0, i + 2.0, 3.0)}) for i, n in enumerate(names)]
    boxes = EV.blind_baseline(kfs)["0"]["boxes"]
    assert list(boxes) == sorted(names)
    assert boxes["obstacle_7"] == [0.0, 1.0, 2.0, 3.0]


def test_first_keyframe_end_error_counts_only_episode_starts():
    spec = profile("aloha").learning
    s = EV.Scorer("ar", spec.arms)
    off = np.array([0, 0.1, 0])
    uv = [np.full((4, 2), 10.0)] * 2
    s.add(_kf(0, [_line(0), _line(0)]), EV.Prediction("reach.", [_line(0), _line(off)], uv, {}))
    s.add(_kf(3, [_line(0), _line(0)]), EV.Prediction("reach.", [_line(off), _line(off)], uv, {}))
    r = s.row()
    assert r["fde_3d_m_first_keyframe"] == pytest.approx(0.05)  # (0 + 0.1) / 2 arms at index 0 only
    assert r["fde_3d_m"] == pytest.approx(0.3 / 4)
    assert EV.Scorer("ar", spec.arms).row()["fde_3d_m_first_keyframe"] is None
    assert "FDE t=0 cm" in EV.format_table([r])
