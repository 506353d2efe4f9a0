"""Recorded-demonstration loader: bag + annotation -> Episode with time-varying plan tokens."""
from __future__ import annotations

import json

import numpy as np
import pytest

from plan_stack.actions.data import ChunkWindows
from plan_stack.actions.demos import COND_WIDTH, load_demo_dir, plan_tokens, text_features
from plan_stack.actions.errors import DatasetError

JOINTS = [f"j{i}" for i in range(3)]


def _keyframe(t_s, subtask, x):
    arm = {"xyz": [[x, 0.0, 0.5], [x + 0.1, 0.0, 0.5]], "uv": [[10.0, 20.0], None], "in_image": [True, False]}
    return {"t_s": t_s, "subtask": subtask, "arms": {"left": arm, "right": arm},
            "boxes": [{"object": "box", "bbox": [4, 8, 12, 16]}]}


def _record(tmp_path, name="ep_0000", success=True, steps=10, dt=0.02):
    """A small episode written with the recorder's own bag writer (same format as record-demos)."""
    from plan_stack.embodiments.aloha.recording import BagWriter

    w = BagWriter(tmp_path / name, {"/action": "sensor_msgs/msg/JointState",
                                    "/joint_states": "sensor_msgs/msg/JointState"})
    for k in range(steps + 1):
        t = k * dt
        w.write("/joint_states", t, w.joint_state(t, JOINTS, [k - 1.0, 0.0, 0.0] if k else [0.0, 0.0, 0.0]))
        if k < steps:
            w.write("/action", t, w.joint_state(t, JOINTS, [float(k), 1.0, 2.0]))
    w.close()
    ann = {"format": "plan_stack.aloha_annotation/1", "bag": name, "instruction": "hand the cube over",
           "success": success, "camera": {"width": 40, "height": 40},
           "keyframes": [_keyframe(0.0, "reach", 0.1), _keyframe(0.1, "grasp", 0.2)]}
    (tmp_path / f"{name}.json").write_text(json.dumps(ann))


def test_loader_aligns_states_and_switches_plan_tokens_at_keyframes(tmp_path):
    _record(tmp_path)
    _record(tmp_path, "ep_0001", success=False)
    (ep,) = load_demo_dir(str(tmp_path))  # the failed demonstration is skipped
    assert ep.name == "ep_0000" and ep.dt_s == pytest.approx(0.02)
    assert ep.actions.shape == (10, 3) and ep.actions[:, 0].tolist() == list(range(10))
    # state at each command = joint state stamped at the command time
    assert ep.states[:, 0].tolist() == [0.0] + list(range(9))
    # keyframe 0 for t < 0.1 s, keyframe 1 from then on
    assert ep.cond_index.tolist() == [0] * 5 + [1] * 5
    assert ep.cond.shape == (2, 2 * 2 + 1 + 2, COND_WIDTH)
    assert ep.cond[0, 0, 0] == pytest.approx(0.1) and ep.cond[1, 0, 0] == pytest.approx(0.2)
    w = ChunkWindows([ep], horizon=4)
    b = w.batch(np.array([2, 7]))
    np.testing.assert_allclose(b["cond"][:, 0, 0], [0.1, 0.2])
    assert b["cond_mask"].all()


def test_plan_tokens_layout_and_text_features():
    tok = plan_tokens(_keyframe(0.0, "reach", 0.1), "hand over", 40, 40)
    assert tok.shape == (7, COND_WIDTH)
    np.testing.assert_allclose(tok[0, :9], [0.1, 0.0, 0.5, 0.25, 0.5, 1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(tok[1, 3:9], [0.0, 0.0, 0.0, 1.0, 0.0, 1.0])  # out of image: no uv
    assert tok[4, 9] == 1.0 and tok[4, 11:15].tolist() == [0.1, 0.2, 0.3, 0.4]
    assert tok[5, 10] == 1.0 and np.array_equal(tok[5, 11:], text_features("reach"))
    assert np.array_equal(text_features("Hand over"), text_features("hand over"))
    assert not np.allclose(text_features("grasp"), text_features("release"))


def test_loader_errors(tmp_path):
    with pytest.raises(DatasetError, match="no annotation"):
        load_demo_dir(str(tmp_path))
    _record(tmp_path, success=False)
    with pytest.raises(DatasetError, match="no successful"):
        load_demo_dir(str(tmp_path))


def test_train_cli_reads_recorded_demonstrations(tmp_path):
    from plan_stack.actions.head import load_checkpoint
    from plan_stack.cli import main

    (tmp_path / "demos").mkdir()
    for i in range(3):
        _record(tmp_path / "demos", f"ep_{i:04d}", steps=12)
    out = tmp_path / "head"
    rc = main(["train-action-head", "--demos", str(tmp_path / "demos"), "--out", str(out), "--steps", "2",
               "--batch-size", "4", "--horizon", "4", "--width", "16", "--layers", "1", "--heads", "2",
               "--eval-fraction", "0.34", "--threads", "1"])
    assert rc == 0
    head, meta = load_checkpoint(str(out))
    assert (head.cfg.action_dim, head.cfg.cond_width) == (3, COND_WIDTH)
    assert meta["data"]["source"] == "demos" and len(meta["data"]["eval"]) == 1
    assert main(["train-action-head", "--demos", str(tmp_path / "nothing"), "--out", str(out)]) == 2


def test_a_width_commanded_gripper_reads_the_sum_of_its_two_finger_joints():
    from plan_stack.actions.demos import _states_as_actions

    js = ["j1", "j2", "fr3_finger_joint1", "fr3_finger_joint2"]
    states = np.array([[0.1, 0.2, 0.03, 0.04], [0.5, 0.6, 0.01, 0.01]])
    out = _states_as_actions(states, js, ["j1", "j2", "fr3_gripper"], "bag")
    np.testing.assert_allclose(out, [[0.1, 0.2, 0.07], [0.5, 0.6, 0.02]])
    with pytest.raises(DatasetError, match="differ"):
        _states_as_actions(states, js, ["j1", "elbow"], "bag")


def test_plan_tokens_of_a_single_arm_plan():
    arm = {"xyz": [[0.1, 0.0, 1.0], [0.2, 0.0, 1.0]], "uv": [[10.0, 20.0], [12.0, 22.0]], "in_image": [True, True]}
    tok = plan_tokens({"t_s": 0.0, "subtask": "reach", "arms": {"single": arm}, "boxes": []}, "pick", 64, 64)
    assert tok.shape == (2 + 2, COND_WIDTH)  # two waypoints, sub-task text, instruction
    np.testing.assert_allclose(tok[1, 0:3], [0.2, 0.0, 1.0])
    assert tok[0, 6] == 1.0 and tok[0, 7] == 0.0


def test_keyframe_in_force_is_the_newest_at_or_before_t_and_the_first_before_any():
    from plan_stack.actions.demos import keyframe_in_force

    keys = [0.0, 0.5, 1.0]
    assert keyframe_in_force(keys, 0.49) == 0 and keyframe_in_force(keys, 0.5) == 1
    assert keyframe_in_force(keys, 0.5 - 1e-7) == 1  # float stamps a hair early still count
    assert keyframe_in_force(keys, -1.0) == 0 and keyframe_in_force(keys, 9.0) == 2
    assert keyframe_in_force(keys, np.array([0.2, 0.7, 3.0])).tolist() == [0, 1, 2]
    assert isinstance(keyframe_in_force(keys, 0.7), int)
