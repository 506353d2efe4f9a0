"""config/franka.yaml: the planner's features reach the shipped action head, whose chunks the stitcher turns into
trajectories inside franka_bridge's limits, in the bridge's channels and units (no DDS: the config contract)."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.actions.config import ChunkerConfig
from plan_stack.actions.head import load_checkpoint
from plan_stack.config import ConfigError, from_mapping
from plan_stack.embodiments.franka.bridge import FrankaBridgeConfig, load_limits
from plan_stack.embodiments.franka.sim_node import FrankaSimConfig
from plan_stack.paths import find_data
from plan_stack.planning.model_dir import load_planner_model
from plan_stack.robot_config import load_robot_config
from plan_stack.trajectory.config import StitcherConfig, StitcherNodeConfig


def _params(spec, cls):
    fields = set(cls.__dataclass_fields__)
    return from_mapping(cls, {k: tuple(v) if isinstance(v, list) else v for k, v in spec.parameters.items()
                              if k in fields})


@pytest.fixture(scope="module")
def nodes():
    return {n.name: n for n in load_robot_config("franka").nodes}


def test_the_graph_runs_every_stage(nodes):
    assert [nodes[n].executable for n in ("franka_sim", "ingest", "planner", "chunker", "stitcher",
                                          "franka_bridge")] == ["franka_sim", "ingest", "planner", "chunker",
                                                                "stitcher", "franka_bridge"]
    sim = _params(nodes["franka_sim"], FrankaSimConfig)
    # a paced simulator waits for a subscriber on every camera it renders: only what ingest reads
    assert set(sim.cameras) <= set(nodes["ingest"].parameters["camera_names"])


def test_chunker_matches_the_shipped_head_and_the_bridge(nodes):
    chunker = _params(nodes["chunker"], ChunkerConfig)
    bridge = _params(nodes["franka_bridge"], FrankaBridgeConfig)
    head, meta = load_checkpoint(str(find_data("models", chunker.checkpoint)))
    assert chunker.joint_names == bridge.joint_names  # chunk rows in the bridge's channel order
    assert head.cfg.action_dim == head.cfg.state_dim == len(chunker.joint_names)
    assert int(meta.get("rtc_max_delay", 0)) > 0  # method training_time needs a head trained with RTC
    # the head is conditioned on the planner's plan features (width = the planner target's hidden size)
    model = load_planner_model(find_data("models", nodes["planner"].parameters["model_dir"]))
    assert head.cfg.cond_width == model.target.model.config.text_config.hidden_size
    # the head's state: arm joints as measured, the gripper width = 2 x one finger joint (what the bridge sums)
    observed = nodes["ingest"].parameters["joint_names"]
    assert set(chunker.state_joint_names) <= set(observed)
    q = {n: 0.1 * i for i, n in enumerate(observed)}
    q["fr3_finger_joint1"] = q["fr3_finger_joint2"] = 0.031
    state = (np.array([q[n] for n in chunker.state_joint_names]) - chunker.state_offset) * chunker.state_scale
    assert state[:7] == pytest.approx([q[n] for n in bridge.arm_joints])
    assert state[7] == pytest.approx(0.062)
    with pytest.raises(ConfigError, match="state_offset: 1 values for 2 joint_names"):
        ChunkerConfig(checkpoint="x", joint_names=("a", "b"), state_offset=(0.0,), state_scale=(1.0,))


def test_stitcher_limits_are_inside_the_bridge_limits(nodes):
    stitcher = _params(nodes["stitcher"], StitcherConfig)
    node_cfg = _params(nodes["stitcher"], StitcherNodeConfig)
    chunker = _params(nodes["chunker"], ChunkerConfig)
    head, _ = load_checkpoint(str(find_data("models", chunker.checkpoint)))
    bridge = load_limits(_params(nodes["franka_bridge"], FrankaBridgeConfig))
    assert stitcher.joint_names == bridge.joint_names and not stitcher.discrete_joints
    assert stitcher.dt == pytest.approx(head.cfg.dt_s) and node_cfg.expected_horizon == head.cfg.horizon
    assert np.all(np.asarray(stitcher.v_max) <= bridge.v_max) and np.all(np.asarray(stitcher.a_max) <= bridge.a_max)
    assert np.all(np.asarray(stitcher.j_max)[:7] <= bridge.j_max[:7])
    assert np.all(np.asarray(stitcher.q_min) >= bridge.q_min) and np.all(np.asarray(stitcher.q_max) <= bridge.q_max)
    assert (stitcher.q_min[7], stitcher.q_max[7]) == (0.0, 0.08)  # open width 0.08 m is inside the range
    assert node_cfg.state_joint_names == chunker.state_joint_names and node_cfg.state_scale == chunker.state_scale
    assert node_cfg.reanchor_ignore_joints == ("fr3_gripper",)
    assert 0 < node_cfg.point_lead_s <= stitcher.command_latency_s
