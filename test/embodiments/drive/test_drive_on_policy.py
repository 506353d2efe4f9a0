"""On-policy driving demonstrations (DAgger): the learned planner drives through the drive bridge with its
latency, the expert labels every keyframe with its path from the state reached; plans the bridge refuses
never move the car, and the keyframes stay training labels whatever happened to the car."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.data.episodes import load_episode_keyframes
from plan_stack.embodiments.drive.policy import PlanDelay, PlannerDriver
from plan_stack.embodiments.drive.recording import DriveRecordOptions, record_episode
from plan_stack.robots import profile

OPTS = DriveRecordOptions(width=112, height=112, duration_s=4.0, camera_rate_hz=1.0, keyframe_period_s=0.5,
                          policy_model="drive")


class ScriptedPolicy:
    """Stands in for `PlannerDriver` where a test needs plans of a known shape (the bridge's input)."""

    model_dir, decoder = "scripted", "none"

    def __init__(self, plan) -> None:
        self.plan, self.plans, self.invalid, self.plan_ms, self.stamps = plan, 0, 0, [], []

    def reset(self) -> None:
        self.plans = 0

    def __call__(self, image, t_s):
        assert image.ndim == 3 and image.dtype == np.uint8
        self.plans += 1
        self.stamps.append(t_s)
        return self.plan


def test_plan_delay_releases_each_plan_after_its_latency_in_stamp_order():
    d = PlanDelay(0.3)
    d.put(0.0, ["a"])
    d.put(0.5, ["b"])
    assert d.due(0.29) == [] and d.due(0.3) == [(0.0, ["a"])] and d.due(0.79) == []
    assert d.due(5.0) == [(0.5, ["b"])] and d.due(9.0) == []
    with pytest.raises(ValueError, match="older"):
        d.put(1.0, [])
        d.put(0.9, [])
    for bad in (-0.1, math.nan):
        with pytest.raises(ValueError):
            PlanDelay(bad)
    with pytest.raises(ValueError, match="max_latency_s"):
        PlanDelay(0.3, 0.2)
    with pytest.raises(ValueError, match="policy_latency_max_s"):
        DriveRecordOptions(policy_latency_s=0.3, policy_latency_max_s=0.2)


def test_plan_delay_draws_each_latency_from_its_range_and_never_reorders():
    d = PlanDelay(0.1, 0.5, seed=3)
    for i in range(200):
        d.put(0.05 * i, [i])
    lat = np.array(d.latencies_s)
    assert lat.min() >= 0.1 - 1e-12 and lat.max() <= 0.5 + 1e-12 and lat.std() > 0.05
    released = [p[0] for t in np.arange(0.0, 12.0, 0.01) for _, p in d.due(float(t))]
    assert released == list(range(200))  # every plan, in order, though drawn delays would overtake
    again = PlanDelay(0.1, 0.5, seed=3)
    for i in range(200):
        again.put(0.05 * i, [i])
    assert again.latencies_s == d.latencies_s  # seeded: an episode's delays are reproducible
    with pytest.raises(ValueError, match="perturbation and policy_model"):
        DriveRecordOptions(perturbation=0.1, policy_model="drive")


def test_a_named_policy_model_without_its_driver_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="policy_model 'drive'"):
        record_episode(5, tmp_path, OPTS)
    assert not list(tmp_path.iterdir())


def test_the_shipped_planner_drives_and_the_expert_labels(tmp_path):
    policy = PlannerDriver("drive")
    ann = record_episode(3, tmp_path / "policy", OPTS, policy=policy)
    expert = record_episode(3, tmp_path / "expert", DriveRecordOptions(
        width=112, height=112, duration_s=4.0, camera_rate_hz=1.0, keyframe_period_s=0.5))
    by = ann["driven_by"]
    assert ann["expert_labels"] and by["decoder"] == "vflash" and by["latency_s"] == 0.3
    assert by["plans"] == len(ann["keyframes"]) == 8 and by["invalid_plans"] == 0
    # every plan but those still in flight at the end reached the bridge, and most drove the car
    assert sum(v for k, v in by["bridge"].items() if k != "watchdog_stop") >= by["plans"] - 1
    assert by["bridge"].get("forwarded", 0) + by["bridge"].get("smoothed", 0) >= by["plans"] - 2
    assert by["end"] == "time" and ann["success"] and by["distance_m"] > 5.0
    # from the same start the first label is the expert's own first path; later ones start at the car
    assert np.allclose(ann["keyframes"][0]["xy"], expert["keyframes"][0]["xy"], atol=0.05)
    for kf in ann["keyframes"]:
        xy = np.array(kf["xy"])
        assert np.all(np.diff(xy[:, 0]) > -1e-6) and abs(xy[0, 1]) < 0.5


@pytest.mark.parametrize("plan", [
    [("drive_3d", np.array([[1.0, 0.0, 0.0], [2.0, math.nan, 0.0]]), 4.0)],  # non-finite waypoint
    [("drive_3d", np.array([[2.0, 0.0, 0.0], [2.1, 3.0, 0.0], [2.2, -3.0, 0.0]]), 4.0)],  # beyond the steering
    [],  # an invalid plan: the planner publishes nothing
], ids=["nan", "kink", "invalid"])
def test_plans_the_bridge_refuses_never_move_the_car_and_the_labels_stay(tmp_path, plan):
    policy = ScriptedPolicy(plan)
    ann = record_episode(4, tmp_path, OPTS, policy=policy)
    by = ann["driven_by"]
    assert np.allclose(policy.stamps, [kf["t_s"] for kf in ann["keyframes"]], atol=1e-6)
    assert by.get("bridge", {}).get("forwarded", 0) == by["bridge"].get("smoothed", 0) == 0
    assert by["distance_m"] == pytest.approx(0.0, abs=1e-6)  # standing where it started
    assert by["end"] == "time" and ann["success"]
    # the labels are the expert's path from the standing car: training data, loaded as such
    kfs = load_episode_keyframes(str(tmp_path / "drive_0004.json"), profile("drive").learning, (112, 112))
    assert len(kfs) == len(ann["keyframes"]) and all(kf.points[0][-1][0] > 1.0 for kf in kfs)


def test_keyframes_of_an_on_policy_drive_that_left_the_road_are_training_labels(tmp_path):
    """A failed expert demonstration is skipped; an on-policy one is not (its labels are the expert's)."""
    import json

    ann = record_episode(4, tmp_path, DriveRecordOptions(width=112, height=112, duration_s=1.0,
                                                         camera_rate_hz=1.0, keyframe_period_s=0.5))
    path = tmp_path / "drive_0004.json"
    ann["success"] = False
    path.write_text(json.dumps(ann))
    assert load_episode_keyframes(str(path), profile("drive").learning, (112, 112)) == []
    ann["expert_labels"] = True
    path.write_text(json.dumps(ann))
    assert len(load_episode_keyframes(str(path), profile("drive").learning, (112, 112))) == len(ann["keyframes"])
