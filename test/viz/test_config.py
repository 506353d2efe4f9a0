"""VizStyle / VizConfig: validation names the field; every robot config's viz section builds them."""
from __future__ import annotations

import pytest

from plan_stack.config import ConfigError, field_kinds, from_mapping
from plan_stack.robot_config import load_robot_config
from plan_stack.viz.config import VizConfig, VizStyle


def test_style_rules():
    with pytest.raises(ConfigError, match="^colour_left: an RGB colour needs 3 values"):
        VizStyle(colour_left=(1.0, 0.0))
    with pytest.raises(ConfigError, match=r"^colour_box\[0\]: 2.0 is above the maximum"):
        VizStyle(colour_box=(2.0, 0.0, 0.0))
    with pytest.raises(ConfigError, match="^endpoint_radius_px: 3 must exceed point_radius_px 3"):
        VizStyle(endpoint_radius_px=3, point_radius_px=3)
    with pytest.raises(ConfigError, match="^overlay_qos: 'fast' is not one of"):
        VizConfig(overlay_qos="fast")
    assert VizStyle().rgb8_of("left") != VizStyle().rgb8_of("right") != VizStyle().rgb8_of("")


@pytest.mark.parametrize("robot, camera", [("aloha", "cam_high"), ("franka", "external"), ("drive", "front")])
def test_robot_configs_start_viz(robot, camera):
    specs = {n.name: n for n in load_robot_config(robot).nodes}
    assert specs["viz"].executable == "viz"
    params = {k: v for k, v in specs["viz"].parameters.items() if k != "use_sim_time"}
    style_keys, cfg_keys = set(field_kinds(VizStyle)), set(field_kinds(VizConfig))
    assert set(params) <= style_keys | cfg_keys
    from_mapping(VizStyle, {k: v for k, v in params.items() if k in style_keys})
    cfg = from_mapping(VizConfig, {k: v for k, v in params.items() if k in cfg_keys})
    assert cfg.overlay_camera == camera
