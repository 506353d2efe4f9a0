"""bags: the recorders' message writer and reader round trip; the split writer: every closed split is
readable, a killed writer loses only the open one."""
from __future__ import annotations

import time

import numpy as np
import pytest
import yaml

from plan_stack.camera import CameraModel
from plan_stack.data.bags import BagError, BagWriter, BagWriterError, SplitBagWriter, check_bag_folder, read_bag
from plan_stack.viz.bag import plan_typestore

STRING = "std_msgs/msg/String"


@pytest.fixture(scope="module")
def ts():
    return plan_typestore()


def _cdr(ts, text):
    return ts.serialize_cdr(ts.types[STRING](data=text), STRING)


def test_splits_are_listed_and_read_back_in_order(tmp_path, ts):
    w = SplitBagWriter(tmp_path / "bag", ts, split_s=3600)
    w.add_topic("/a", STRING)
    w.add_topic("/b", "plan_stack/msg/PlanFeatures")
    feats = ts.types["plan_stack/msg/PlanFeatures"]
    stamp = ts.types["builtin_interfaces/msg/Time"](sec=1, nanosec=5)
    header = ts.types["std_msgs/msg/Header"](stamp=stamp, frame_id="")
    for k in range(6):
        w.write("/a", 1_000 + k, _cdr(ts, f"m{k}"))
        if k == 2:
            w._close_split()  # what the split timer does after split_s
    msg = feats(header=header, shape=np.array([1, 2], np.uint32), data=np.array([1.0, 2.0], np.float32),
                plan_stamp=stamp)
    w.write("/b", 2_000, ts.serialize_cdr(msg, "plan_stack/msg/PlanFeatures"))
    w.close()
    info = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["relative_file_paths"] == ["bag_0.mcap", "bag_1.mcap"] and info["message_count"] == 7
    assert {t["topic_metadata"]["name"]: t["message_count"] for t in info["topics_with_message_count"]} == {
        "/a": 6, "/b": 1}
    msgs = read_bag(tmp_path / "bag")
    assert [m.data for _, m in msgs["/a"]] == [f"m{k}" for k in range(6)]
    assert list(msgs["/b"][0][1].data) == [1.0, 2.0]
    assert not [p for p in (tmp_path / "bag").iterdir() if p.name.startswith(".split")]


def test_a_writer_that_dies_leaves_the_closed_splits_readable(tmp_path, ts):
    w = SplitBagWriter(tmp_path / "bag", ts, split_s=0.05)
    w.add_topic("/a", STRING)
    w.write("/a", 1, _cdr(ts, "kept"))
    time.sleep(0.06)
    w.maybe_split()
    w.write("/a", 2, _cdr(ts, "lost"))  # the open split: never closed (the process "dies" here)
    msgs = read_bag(tmp_path / "bag")
    assert [m.data for _, m in msgs["/a"]] == ["kept"]


def test_misuse_is_refused(tmp_path, ts):
    (tmp_path / "exists").mkdir()
    with pytest.raises(BagWriterError, match="already exists"):
        SplitBagWriter(tmp_path / "exists", ts)
    w = SplitBagWriter(tmp_path / "bag", ts)
    with pytest.raises(BagWriterError, match="not in the type store"):
        w.add_topic("/x", "nope_msgs/msg/Nope")
    with pytest.raises(BagWriterError, match="add_topic first"):
        w.write("/y", 0, b"")
    w.add_topic("/a", STRING)
    with pytest.raises(BagWriterError, match="differs"):
        w.add_topic("/a", "std_msgs/msg/Int32")
    w.close()
    assert read_bag(tmp_path / "bag") == {}  # an empty bag is still a valid bag


def test_bag_round_trip_with_camera_pair(tmp_path):
    cam = CameraModel("front", 8, 6, 5.0, 5.0, 3.5, 2.5)
    topics = {"/cameras/front/image_raw": "sensor_msgs/msg/Image",
              "/cameras/front/camera_info": "sensor_msgs/msg/CameraInfo", "/instruction": "std_msgs/msg/String"}
    writer = BagWriter(tmp_path / "bag", topics)
    try:
        writer.write("/instruction", 0.0, writer.string("go"))
        rgb = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
        writer.write_camera("front", 1.25, "front_optical_frame", rgb, cam)
    finally:
        writer.close()
    msgs = read_bag(tmp_path / "bag")
    [(t_img, img)] = msgs["/cameras/front/image_raw"]
    [(t_info, info)] = msgs["/cameras/front/camera_info"]
    assert t_img == t_info == 1.25
    assert list(read_bag(tmp_path / "bag", topics=["/instruction"])) == ["/instruction"]
    assert img.header == info.header and info.header.frame_id == "front_optical_frame"
    assert (img.header.stamp.sec, img.header.stamp.nanosec) == (1, 250_000_000)
    assert np.array_equal(np.asarray(img.data).reshape(6, 8, 3), rgb) and img.encoding == "rgb8"
    assert np.allclose(np.asarray(info.k).reshape(3, 3), cam.K)
    assert msgs["/instruction"][0][1].data == "go"


def test_header_stamp_just_below_a_second_is_not_a_second_early(tmp_path):
    writer = BagWriter(tmp_path / "bag", {"/clock_probe": "std_msgs/msg/Header"})
    try:
        header = writer.header(1.9999999999)
        assert (header.stamp.sec, header.stamp.nanosec) == (2, 0)
        header = writer.header(12.25)
        assert (header.stamp.sec, header.stamp.nanosec) == (12, 250_000_000)
    finally:
        writer.close()


def test_only_a_folder_holding_metadata_yaml_passes_as_a_bag(tmp_path, ts):
    w = SplitBagWriter(tmp_path / "bag", ts)
    w.close()
    assert check_bag_folder(tmp_path / "bag") == tmp_path / "bag"
    (tmp_path / "file.mcap").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    for path, match in ((tmp_path / "missing", "does not exist"), (tmp_path / "file.mcap", "not a bag folder"),
                        (tmp_path / "empty", "no metadata.yaml")):
        with pytest.raises(BagError, match=f"^{path}: .*{match}"):
            check_bag_folder(path)
