"""Ingest configs: every validation rule names its field."""
from __future__ import annotations

import pytest

from plan_stack.config import ConfigError
from plan_stack.ingest.config import IngestConfig, SyncConfig


def test_defaults_and_per_camera_values():
    cfg = SyncConfig(camera_names=("a", "b"), min_interval=[0.01, 0.02])
    assert cfg.min_interval == (0.01, 0.02) and cfg.min_interval_of(1) == 0.02
    assert SyncConfig(camera_names=("a",)).min_interval_of(0) == 0.0
    ing = IngestConfig(camera_timeout=(1.0, 2.0))
    assert ing.output_size == (224, 224) and ing.camera_timeout_of(1, 2) == 2.0
    assert IngestConfig().camera_timeout_of(0, 3) == 1.0


@pytest.mark.parametrize("kw, match", [
    (dict(camera_names=()), r"^camera_names: need 1 to 8 cameras"),
    (dict(camera_names=tuple("abcdefghi")), r"^camera_names: need 1 to 8"),
    (dict(camera_names=("a", "a")), r"^camera_names: names must be unique"),
    (dict(camera_names=("a", "")), r"^camera_names: names must be unique and non-empty"),
    (dict(camera_names=("a", "b"), min_interval=(0.1,)), r"^min_interval: 1 values for 2 cameras"),
    (dict(camera_names=("a",), joint_names=("j", "j")), r"^joint_names: names must be unique"),
    (dict(camera_names=("a",), max_spread=0.5, max_age=0.2), r"^max_spread: 0.5 exceeds max_age"),
    (dict(camera_names=("a",), max_age=2.0, clock_jump_threshold=1.0), r"^clock_jump_threshold: 1.0 is below"),
    (dict(camera_names=("a",), max_spread=-0.1), r"^max_spread: -0.1 is below the minimum"),
    (dict(camera_names=("a",), queue_size=0), r"^queue_size: 0 is below the minimum"),
    (dict(camera_names=("a",), policy="exact"), r"^policy: 'exact' is not one of"),
    (dict(camera_names=("a",), reference="median"), r"^reference: 'median' is not one of"),
    (dict(camera_names=("a",), joint_mode="spline"), r"^joint_mode: 'spline' is not one of"),
])
def test_sync_config_rules(kw, match):
    with pytest.raises(ConfigError, match=match):
        SyncConfig(**kw)


@pytest.mark.parametrize("kw, match", [
    (dict(output_size=(224,)), r"^output_size: expected \[width, height\]"),
    (dict(output_size=(0, 10)), r"^output_size\[0\]: 0 is below the minimum"),
    (dict(resize_mode="zoom"), r"^resize_mode: 'zoom' is not one of"),
    (dict(image_qos="fast"), r"^image_qos: 'fast' is not one of"),
    (dict(camera_timeout=0.0), r"^camera_timeout: 0.0 is below the minimum"),
])
def test_ingest_config_rules(kw, match):
    with pytest.raises(ConfigError, match=match):
        IngestConfig(**kw)


def test_per_camera_timeout_length_is_checked_against_the_cameras():
    with pytest.raises(ConfigError, match=r"^camera_timeout: 2 values for 3 cameras"):
        IngestConfig(camera_timeout=(1.0, 2.0)).camera_timeout_of(0, 3)
