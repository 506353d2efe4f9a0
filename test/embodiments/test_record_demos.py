"""`plan-stack record-demos`: the bag opens with rosbags and has every documented topic; annotations agree with it.

ALOHA (the default robot) in depth; `--robot franka` and `--robot drive` reach their recorders (whose
bags and annotations test/embodiments/{franka,drive} check in depth)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from plan_stack.camera import CameraModel, project_points, world_to_camera
from plan_stack.cli import main as cli_main
from plan_stack.embodiments.aloha.annotation import read_annotation
from plan_stack.embodiments.aloha.model import JOINT_NAMES
from plan_stack.embodiments.aloha.recording import TOPICS


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    status = cli_main(["record-demos", "--task", "transfer_cube", "--episodes", "1", "--seed", "2", "--out", str(out),
                       "--width", "64", "--height", "48", "--camera-rate", "2", "--keyframe-period", "1.0"])
    assert status == 0
    return out


def test_bag_has_every_documented_topic(recorded):
    from rosbags.highlevel import AnyReader

    bag = recorded / "transfer_cube_0002"
    assert (bag / "transfer_cube_0002.mcap").is_file()
    with AnyReader([bag]) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        assert set(counts) == set(TOPICS)
        assert all(n > 0 for n in counts.values()), counts
        assert counts["/joint_states"] == 401 and counts["/action"] == 400
        seen = {}
        for conn, t_ns, raw in reader.messages():
            if conn.topic not in seen:
                seen[conn.topic] = (t_ns, reader.deserialize(raw, conn.msgtype))
    img = seen["/cameras/cam_high/image_raw"][1]
    assert (img.width, img.height, img.encoding, len(img.data)) == (64, 48, "rgb8", 64 * 48 * 3)
    assert list(seen["/joint_states"][1].name) == list(JOINT_NAMES)
    assert seen["/instruction"][1].data.startswith("pick up the red cube")
    assert seen["/cameras/cam_high/camera_info"][1].k[0] > 0


def test_annotation_matches_bag_ground_truth(recorded):
    from rosbags.highlevel import AnyReader

    ann = read_annotation(str(recorded / "transfer_cube_0002.json"))
    assert ann["success"] and ann["reward"] == 4 and ann["waypoints"] == 10
    assert [s["text"] for s in ann["subtasks"]][0] == "reach for the red cube with the right arm"
    assert len(ann["keyframes"]) == 9  # every 1.0 s over 8 s, both ends
    assert ann["keyframes"][0]["boxes"][0]["object"] == "box"
    with AnyReader([recorded / "transfer_cube_0002"]) as reader:
        conns = [c for c in reader.connections if c.topic == "/ground_truth/right_gripper/pose"]
        poses = {t: reader.deserialize(raw, c.msgtype).pose.position for c, t, raw in reader.messages(connections=conns)}
    cam = ann["camera"]
    pose = (np.array(cam["world_position"]), np.array(cam["world_rotation"]))
    K = np.array(cam["K"])
    model = CameraModel("cam_high", cam["width"], cam["height"], K[0, 0], K[1, 1], K[0, 2], K[1, 2])
    for kf in ann["keyframes"][:-1]:
        p = poses[int(round(kf["t_s"] * 1e9))]
        first = world_to_camera(np.array([[p.x, p.y, p.z]]), pose)
        right = kf["arms"]["right"]
        assert np.allclose(right["xyz"][0], first[0], atol=2e-3)  # a trajectory starts at the gripper
        uv, inside = project_points(np.array(right["xyz"]), model)
        for k in range(10):
            assert right["in_image"][k] == bool(inside[k])
            if inside[k]:
                assert np.allclose(right["uv"][k], uv[k], atol=0.02)


def test_bad_arguments_exit_2(tmp_path):
    assert cli_main(["record-demos", "--episodes", "0", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--width", "4", "--out", str(tmp_path)]) == 2


def test_bad_robot_arguments_exit_2(tmp_path):
    assert cli_main(["record-demos", "--robot", "franka", "--task", "transfer_cube", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--robot", "drive", "--task", "pick_place", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--task", "drive", "--out", str(tmp_path)]) == 2  # --robot defaults to aloha
    assert cli_main(["record-demos", "--robot", "franka", "--duration", "5", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--robot", "drive", "--horizon", "-1", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--robot", "franka", "--waypoints", "1", "--out", str(tmp_path)]) == 2
    assert not any(tmp_path.iterdir())  # nothing recorded


def test_drive_robot_records_with_its_options(tmp_path, capsys):
    from plan_stack.embodiments.drive.recording import FORMAT

    status = cli_main(["record-demos", "--robot", "drive", "--episodes", "1", "--seed", "3", "--out", str(tmp_path),
                       "--width", "64", "--height", "48", "--duration", "2", "--horizon", "1", "--waypoints", "4",
                       "--camera-rate", "2", "--keyframe-period", "1"])
    assert status == 0
    assert (tmp_path / "drive_0003" / "drive_0003.mcap").is_file()
    ann = json.loads((tmp_path / "drive_0003.json").read_text())
    assert ann["format"] == FORMAT and ann["duration_s"] == 2.0 and ann["horizon_s"] == 1.0
    assert ann["waypoints"] == 4 and all(len(kf["xy"]) == 4 for kf in ann["keyframes"])
    assert ann["camera"]["width"] == 64
    assert "episodes without collision or road departure" in capsys.readouterr().out
    assert cli_main(["record-demos", "--robot", "drive", "--episodes", "1", "--seed", "3",
                     "--out", str(tmp_path), "--duration", "1"]) == 1  # the bag exists: never overwritten


def test_jobs_record_in_worker_processes_the_same_files_as_one_process(tmp_path, capsys):
    """Each episode depends only on its seed: two workers write the bytes one process writes."""
    args = ["record-demos", "--robot", "drive", "--episodes", "2", "--seed", "5", "--width", "64", "--height", "48",
            "--duration", "2", "--horizon", "1", "--waypoints", "4", "--camera-rate", "2", "--keyframe-period", "1"]
    assert cli_main([*args, "--out", str(tmp_path / "one")]) == 0
    assert cli_main([*args, "--out", str(tmp_path / "two"), "--jobs", "2"]) == 0
    assert "2/2 episodes" in capsys.readouterr().out
    one = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert len(one) == 6 and one == sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*")
                                           if p.is_file())
    for rel in one:
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes(), rel
    # a worker's error reaches the exit status: the bags exist and are never overwritten
    assert cli_main([*args, "--out", str(tmp_path / "two"), "--jobs", "2"]) == 1
    assert cli_main([*args, "--out", str(tmp_path / "three"), "--jobs", "0"]) == 2


def test_franka_robot_records_pick_place(tmp_path, capsys):
    from plan_stack.embodiments.franka.recording import FORMAT

    status = cli_main(["record-demos", "--robot", "franka", "--episodes", "1", "--seed", "2", "--out", str(tmp_path),
                       "--width", "64", "--height", "48", "--camera-rate", "2", "--keyframe-period", "1.0",
                       "--waypoints", "6"])
    assert status == 0
    assert (tmp_path / "pick_place_0002" / "pick_place_0002.mcap").is_file()
    ann = json.loads((tmp_path / "pick_place_0002.json").read_text())
    assert ann["format"] == FORMAT and ann["task"] == "pick_place" and ann["success"]
    assert ann["waypoints"] == 6 and ann["camera"]["width"] == 64
    assert "pick_place seed 2: success" in capsys.readouterr().out


def test_franka_recovery_demonstration_is_annotated_from_the_missed_grasp(tmp_path):
    """`--miss`: keyframes start where the fingers sit beside the cube; their label is still the pick, whose
    path ends at the cube; the head's samples start there too (nothing before the first keyframe)."""
    from plan_stack.actions.demos import load_episode

    assert cli_main(["record-demos", "--robot", "franka", "--episodes", "1", "--seed", "400001", "--out",
                     str(tmp_path), "--width", "64", "--height", "48", "--camera-rate", "2", "--miss", "0.035"]) == 0
    ann = json.loads((tmp_path / "pick_place_400001.json").read_text())
    miss = ann["missed_grasp"]
    assert ann["success"] and miss["miss_m"] == 0.035 and miss["annotated_from_s"] == 2.5
    first = ann["keyframes"][0]
    assert first["t_s"] == 2.5 and all(k["t_s"] >= 2.5 for k in ann["keyframes"])
    assert first["subtask"] == "pick up the red cube"
    path = np.array(first["arms"]["single"]["xyz"])
    offset = np.linalg.norm(path[0] - path[-1])  # starts beside the cube, ends at it (camera frame)
    assert 0.03 < offset < 0.06, offset
    episode = load_episode(str(tmp_path / "pick_place_400001.json"))
    assert episode.actions.shape[0] == round((ann["subtasks"][-1]["end_s"] - 2.5) / 0.02)
    assert cli_main(["record-demos", "--robot", "franka", "--miss", "-0.01", "--out", str(tmp_path / "x")]) == 2
    assert cli_main(["record-demos", "--robot", "aloha", "--miss", "0.03", "--out", str(tmp_path / "y")]) == 2


def test_franka_pick_only_records_the_approach_until_the_grasp_closes(tmp_path):
    """`--pick-only`: keyframes of the pick sub-task only, success = the cube held; closing above the cube
    (nothing between the fingers) is a failure."""
    from plan_stack.embodiments.franka.expert import ExpertConfig
    from plan_stack.embodiments.franka.recording import FrankaRecordOptions, record_episode

    assert cli_main(["record-demos", "--robot", "franka", "--episodes", "1", "--seed", "500000", "--out",
                     str(tmp_path / "ok"), "--width", "64", "--height", "48", "--camera-rate", "2",
                     "--pick-only"]) == 0
    ann = json.loads((tmp_path / "ok" / "pick_place_500000.json").read_text())
    assert ann["success"] and ann["pick_only"]
    assert [st["text"] for st in ann["subtasks"]] == ["pick up the red cube"]
    grasped = ann["subtasks"][0]["end_s"]
    assert [k["t_s"] for k in ann["keyframes"]] == [0.5 * i for i in range(int(grasped / 0.5))]
    assert {k["subtask"] for k in ann["keyframes"]} == {"pick up the red cube"}
    in_air = record_episode(500000, tmp_path / "air", FrankaRecordOptions(width=64, height=48, pick_only=True),
                            expert=ExpertConfig(grasp_height_m=0.15))
    assert not in_air["success"]
    assert cli_main(["record-demos", "--robot", "drive", "--pick-only", "--out", str(tmp_path / "x")]) == 2


def test_perturb_is_an_aloha_transfer_cube_and_drive_option(tmp_path, capsys):
    assert cli_main(["record-demos", "--robot", "franka", "--perturb", "0.1", "--out", str(tmp_path)]) == 2
    assert "--robot aloha/drive only" in capsys.readouterr().err
    assert cli_main(["record-demos", "--perturb", "-0.1", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--robot", "drive", "--perturb", "-0.1", "--out", str(tmp_path)]) == 2
    assert cli_main(["record-demos", "--task", "insertion", "--perturb", "0.1", "--width", "32", "--height", "32",
                     "--out", str(tmp_path)]) == 2
    assert "insertion" in capsys.readouterr().err
    assert not any(p for p in tmp_path.iterdir() if p.name.endswith(".json") or (p / "metadata.yaml").exists())


def test_displace_is_a_drive_option_of_two_numbers(tmp_path, capsys):
    assert cli_main(["record-demos", "--robot", "aloha", "--displace", "1,0.1", "--out", str(tmp_path)]) == 2
    assert "--robot drive only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["record-demos", "--robot", "drive", "--displace", "1", "--out", str(tmp_path)])
    assert "M,RAD" in capsys.readouterr().err
    assert cli_main(["record-demos", "--robot", "drive", "--displace", "1,-0.1", "--out", str(tmp_path)]) == 2
    assert "displacement" in capsys.readouterr().err
    assert cli_main(["record-demos", "--robot", "drive", "--displace", "1,0.1", "--policy-model", "drive",
                     "--out", str(tmp_path)]) == 2
    assert not any(tmp_path.iterdir())


def test_perturbed_recording_labels_each_keyframe_with_the_pushes_it_could_see(recorded, tmp_path):
    """Before the first push the labels are the plain demonstration's; after a push the path starts where
    the pushed arm is and comes back to the expert's path by the end of the sub-task."""
    out = tmp_path / "pushed"
    assert cli_main(["record-demos", "--task", "transfer_cube", "--episodes", "1", "--seed", "2", "--out", str(out),
                     "--width", "64", "--height", "48", "--camera-rate", "2", "--keyframe-period", "0.25",
                     "--perturb", "0.1"]) == 0
    plain_out = tmp_path / "plain"
    assert cli_main(["record-demos", "--task", "transfer_cube", "--episodes", "1", "--seed", "2", "--out",
                     str(plain_out), "--width", "64", "--height", "48", "--camera-rate", "2",
                     "--keyframe-period", "0.25"]) == 0
    pushed = read_annotation(str(out / "transfer_cube_0002.json"))
    plain = read_annotation(str(plain_out / "transfer_cube_0002.json"))
    pushes = pushed["perturbation"]["pushes"]
    assert pushed["perturbation"]["std_rad"] == 0.1 and len(pushes) == 4
    first = min(p["onset_s"] for p in pushes)
    moved_start = 0
    for a, b in zip(pushed["keyframes"], plain["keyframes"]):
        assert a["t_s"] == b["t_s"] and a["subtask"] == b["subtask"]
        for arm in ("left", "right"):
            xa, xb = np.array(a["arms"][arm]["xyz"]), np.array(b["arms"][arm]["xyz"])
            if a["t_s"] < first:
                np.testing.assert_allclose(xa, xb, atol=1e-5)  # no push seen yet: the expert's own path
            elif a["subtask"].startswith("reach"):
                moved_start += np.linalg.norm(xa[0] - xb[0]) > 0.01
                assert np.linalg.norm(xa[-1] - xb[-1]) < 0.02  # recovered by the end of the reach
    assert moved_start > 0  # some label starts where the pushed arm is, off the expert's path
    assert "perturbation" not in plain
    # the bag holds the pushed commands and the expert's own; a head learns the expert's (DART's label)
    from plan_stack.actions.demos import load_episode
    from plan_stack.data.bags import read_bag
    from plan_stack.embodiments.aloha.expert import plan_episode

    bag = read_bag(out / "transfer_cube_0002", topics=("/action", "/expert_action"))
    sent = np.array([m.position for _, m in bag["/action"]])
    own = np.array([m.position for _, m in bag["/expert_action"]])
    assert [t for t, _ in bag["/action"]] == [t for t, _ in bag["/expert_action"]]
    np.testing.assert_allclose(own, plan_episode("transfer_cube", 2).commands)
    assert np.abs(sent - own).max() > 0.02
    np.testing.assert_allclose(load_episode(str(out / "transfer_cube_0002.json")).actions, own)
    assert "/expert_action" not in read_bag(plain_out / "transfer_cube_0002")
