"""recording: the shared bag writer and recorder options (the recorders' own tests read real episodes)."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.camera import CameraModel
from plan_stack.embodiments.recording import (BagWriter, RecordOptions, check_image_size, every_steps, new_bag_path,
                                              read_bag)


def test_options_validate():
    with pytest.raises(ValueError, match="^width/height"):
        RecordOptions(width=8)
    with pytest.raises(ValueError, match="^width/height"):
        check_image_size(64, 15)
    with pytest.raises(ValueError, match="^camera_rate_hz/keyframe_period_s"):
        RecordOptions(camera_rate_hz=0.0)
    with pytest.raises(ValueError, match="^waypoints"):
        RecordOptions(waypoints=1)


def test_every_steps():
    assert every_steps(0.02, rate_hz=10.0) == 5
    assert every_steps(0.02, period_s=0.5) == 25
    assert every_steps(0.02, rate_hz=100.0) == 1  # faster than the loop: every step, never 0


def test_new_bag_path_refuses_to_overwrite(tmp_path):
    path = new_bag_path(tmp_path / "out", "ep_0001")
    assert path == tmp_path / "out" / "ep_0001" and path.parent.is_dir() and not path.exists()
    path.mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        new_bag_path(tmp_path / "out", "ep_0001")


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
    from plan_stack.embodiments.recording import BagWriter

    writer = BagWriter(tmp_path / "bag", {"/clock_probe": "std_msgs/msg/Header"})
    try:
        header = writer.header(1.9999999999)
        assert (header.stamp.sec, header.stamp.nanosec) == (2, 0)
        header = writer.header(12.25)
        assert (header.stamp.sec, header.stamp.nanosec) == (12, 250_000_000)
    finally:
        writer.close()
