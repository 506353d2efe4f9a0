"""recording: the shared recorder options (the recorders' own tests read real episodes)."""
from __future__ import annotations

import pytest

from plan_stack.data.recording import RecordOptions, check_image_size, every_steps, new_bag_path


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
