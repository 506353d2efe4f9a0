"""Every robot config: the stitcher's limits are within its bridge's (the stitcher emits only what the bridge accepts)."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.config import ConfigError, field_kinds, from_mapping
from plan_stack.embodiments.registry import joint_limits
from plan_stack.robot_config import config_dir, load_robot_config
from plan_stack.robots import profile_of_bridge
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.limits import LimitRule
from plan_stack.trajectory.stitch_limits import joint_columns, limits_from_config

CONFIGS = sorted(p.stem for p in config_dir().glob("*.yaml"))


def _pairs(robot: str):
    """(stitcher config, bridge limits) for every stitcher and joint-space bridge in one robot config."""
    nodes = load_robot_config(robot).nodes
    bridges = [(s, profile_of_bridge(s.executable)) for s in nodes]
    bridges = [(s, r) for s, r in bridges if r is not None and r.parts.bridge_limits is not None]
    for spec in nodes:
        if spec.executable != "stitcher":
            continue
        known = field_kinds(StitcherConfig)
        cfg = from_mapping(StitcherConfig, {k: v for k, v in spec.parameters.items() if k in known})
        assert bridges, f"{robot}: a stitcher without a joint-space bridge"
        for bridge, r in bridges:
            yield cfg, joint_limits(r, bridge.parameters)


@pytest.mark.parametrize("robot", CONFIGS)
def test_stitcher_limits_are_within_the_bridge_limits(robot):
    for cfg, bridge in _pairs(robot):
        lim, rate = limits_from_config(cfg)
        cidx, didx = joint_columns(cfg)
        at = [bridge.joint_names.index(cfg.joint_names[i]) for i in cidx]
        assert np.all(lim.v_max <= bridge.v_max[at]) and np.all(lim.a_max <= bridge.a_max[at])
        assert np.all(lim.j_max <= bridge.j_max[at])
        assert np.all(lim.q_min >= bridge.q_min[at]) and np.all(lim.q_max <= bridge.q_max[at])
        grip = [bridge.joint_names.index(cfg.joint_names[i]) for i in didx]
        assert np.all(rate <= bridge.v_max[grip])


def test_aloha_stitcher_limits_follow_the_rule_from_the_urdf():
    (cfg, bridge), = list(_pairs("aloha"))
    lim, rate = limits_from_config(cfg)
    arm = [i for i, n in enumerate(bridge.joint_names) if not n.endswith("gripper")]
    grip = [i for i, n in enumerate(bridge.joint_names) if n.endswith("gripper")]
    # the grippers are planned by the MPC as joints (no discrete channels): every limit per joint
    assert lim.v_max[arm] == pytest.approx(0.9 * 3.141593)  # urdf/aloha.urdf: 3.141593 rad/s
    assert lim.v_max[grip] == pytest.approx(0.9 * 5.0)  # the bridge's gripper rate (not the finger's 5.35)
    assert lim.a_max == pytest.approx(0.8 * bridge.a_max)
    assert lim.q_min[1] == pytest.approx(-1.85005 + 0.03) and lim.q_max[1] == pytest.approx(1.25664 - 0.03)
    assert (lim.q_min[grip], lim.q_max[grip]) == (pytest.approx(0.0), pytest.approx(1.0))  # exact_range_joints
    assert len(rate) == 0


def test_limits_from_is_checked(tmp_path):
    src = (config_dir() / "aloha.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(src.replace("      bridge: aloha_bridge\n", "      bridge: nobody\n"))
    with pytest.raises(ConfigError, match="limits_from.bridge: no node 'nobody'"):
        load_robot_config(bad)
    bad.write_text(src.replace("      velocity_scale: 0.9\n", "      velocity_scale: 1.5\n"))
    with pytest.raises(ConfigError, match="velocity_scale: must be in"):
        load_robot_config(bad)
    bad.write_text(src.replace("      j_max: [200.0,", "      v_max: 1.0\n      j_max: [200.0,", 1))
    with pytest.raises(ConfigError, match="parameters.v_max: derived from aloha_bridge"):
        load_robot_config(bad)


def test_rule_scales_and_insets_each_limit():
    from plan_stack.trajectory.limits import Limits

    bridge = Limits.for_joints(("a", "b", "g"), [-1.0, -np.inf, 0.0], [1.0, np.inf, 1.0], [2.0, 3.0, 5.0],
                               [10.0, 20.0, 40.0], [100.0, 200.0, np.inf])
    out = LimitRule(0.5, 0.25, 0.1, 0.8, 0.2).stitcher_limits(bridge, ("a", "g"), ("g",))
    # every joint bounded: one range per joint, the discrete channel at the bridge's own range
    assert out == {"v_max": (1.0,), "a_max": (2.5,), "j_max": (10.0,), "q_min": (-0.8, 0.0), "q_max": (0.8, 1.0),
                   "discrete_rate": (4.0,),
                   # the bridge's own limits, one per joint (no jerk: the bridge limits the gripper's not)
                   "bridge_v_max": (2.0, 5.0), "bridge_a_max": (10.0, 40.0), "bridge_q_min": (-1.0, 0.0),
                   "bridge_q_max": (1.0, 1.0)}
    open_gripper = Limits.for_joints(("a", "g"), [-1.0, -np.inf], [1.0, np.inf], [2.0, 5.0], [10.0, 40.0])
    out = LimitRule(0.5, 0.25, 0.1, 0.8, 0.2).stitcher_limits(open_gripper, ("a", "g"), ("g",))
    assert (out["q_min"], out["q_max"]) == ((-0.8,), (0.8,))  # the continuous joints' only
    both = LimitRule().stitcher_limits(bridge, ("a", "b"))
    assert "q_min" not in both  # b has no position range: nothing to derive
    assert both["j_max"] == pytest.approx((80.0, 160.0))


def test_exact_range_joints_keep_the_bridge_range():
    from plan_stack.trajectory.limits import Limits

    bridge = Limits.for_joints(("a", "g"), [-1.0, 0.0], [1.0, 1.0], [2.0, 5.0], [10.0, 40.0])
    out = LimitRule(position_margin=0.2, exact_range_joints=("g",)).stitcher_limits(bridge, ("a", "g"))
    assert out["q_min"] == pytest.approx((-0.8, 0.0)) and out["q_max"] == pytest.approx((0.8, 1.0))
    assert out["v_max"] == pytest.approx((1.8, 4.5))  # the gripper planned as a joint: scaled like the others
