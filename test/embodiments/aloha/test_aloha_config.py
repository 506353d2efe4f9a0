"""config/aloha.yaml wires existing executables with parameters the configs accept."""
from __future__ import annotations

from plan_stack.config import from_mapping
from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits
from plan_stack.embodiments.aloha.sim_node import AlohaSimConfig
from plan_stack.robot_config import load_robot_config


def test_aloha_yaml_parameters_are_valid():
    cfg = load_robot_config("aloha")
    nodes = {n.name: n for n in cfg.nodes}
    assert {n.executable for n in cfg.nodes} >= {"aloha_sim", "aloha_bridge"}
    sim = {k: v for k, v in nodes["aloha_sim"].parameters.items() if k != "use_sim_time"}
    bridge = {k: v for k, v in nodes["aloha_bridge"].parameters.items() if k != "use_sim_time"}
    assert nodes["aloha_bridge"].parameters["use_sim_time"] is True
    sim_cfg = from_mapping(AlohaSimConfig, {k: tuple(v) if isinstance(v, list) else v for k, v in sim.items()})
    bridge_cfg = from_mapping(AlohaBridgeConfig, {k: tuple(v) if isinstance(v, list) else v for k, v in bridge.items()})
    assert sim_cfg.left_arm_controller == bridge_cfg.left_arm_controller
    assert load_limits(bridge_cfg).a_max.shape == (14,)
