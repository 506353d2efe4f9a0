"""The parameters every simulator shares, and the robots' own ranges and texts on top of them."""
from __future__ import annotations

import dataclasses

import pytest

from plan_stack.config import ConfigError, info_of
from plan_stack.embodiments.aloha.sim_node import AlohaSimConfig
from plan_stack.embodiments.drive.sim_node import DriveSimConfig
from plan_stack.embodiments.franka.sim_node import FrankaSimConfig
from plan_stack.embodiments.pacing import PacingConfig
from plan_stack.embodiments.sim_config import SimConfig

SHARED = ("pace_chunk_lead_s", "pace_plan_lead_s", "max_catch_up_s", "pace_timeout_s", "seed", "real_time_factor",
          "clock_rate_hz", "camera_rate_hz", "camera_width", "camera_height")


def test_a_simulator_config_is_paced_and_runs_in_real_time_by_default():
    cfg = SimConfig()
    assert isinstance(cfg, PacingConfig) and tuple(f.name for f in dataclasses.fields(cfg)) == SHARED
    assert (cfg.real_time_factor, cfg.clock_rate_hz, cfg.camera_rate_hz, cfg.camera_width) == (1.0, 250.0, 10.0, 320)
    assert cfg.pace_chunk_lead_s == cfg.pace_plan_lead_s == 0.0  # not paced to the stack unless asked


@pytest.mark.parametrize("kw, match", [
    (dict(real_time_factor=-1.0), r"^real_time_factor: -1.0 is below the minimum 0.0"),
    (dict(clock_rate_hz=600.0), r"^clock_rate_hz: 600.0 is above the maximum 500.0"),
    (dict(camera_width=8), r"^camera_width: 8 is below the minimum 16"),
    (dict(pace_timeout_s=0.0), r"^pace_timeout_s: 0.0 is below the minimum 0.1"),
])
def test_bad_values_are_refused_naming_the_parameter(kw, match):
    with pytest.raises(ConfigError, match=match):
        SimConfig(**kw)


@pytest.mark.parametrize("cls", [AlohaSimConfig, FrankaSimConfig, DriveSimConfig])
def test_every_simulator_extends_the_shared_config(cls):
    names = [f.name for f in dataclasses.fields(cls)]
    assert issubclass(cls, SimConfig) and names[:len(SHARED)] == list(SHARED)
    cls()  # the defaults are valid


def test_a_driving_scene_keeps_its_own_clock_and_camera_ranges():
    fields = DriveSimConfig.__dataclass_fields__
    assert info_of(fields["clock_rate_hz"]).max == 100.0 and fields["clock_rate_hz"].default == 100.0
    assert info_of(fields["camera_rate_hz"]).max == 30.0
    with pytest.raises(ConfigError, match=r"^clock_rate_hz: 150.0 is above the maximum 100.0"):
        DriveSimConfig(clock_rate_hz=150.0)
    with pytest.raises(ConfigError, match=r"^cameras: unknown camera"):
        AlohaSimConfig(cameras=("nope",))  # the robots' own checks run after the shared ones
