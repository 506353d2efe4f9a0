"""config/<robot>.yaml: the node list shared by `plan-stack up` and the launch files."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from plan_stack.config import ConfigError
from plan_stack.executables import NODES
from plan_stack.robot_config import config_dir, load_robot_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("robot", sorted(p.stem for p in (ROOT / "config").glob("*.yaml")))
def test_shipped_robot_configs_load_and_name_known_executables(robot):
    cfg = load_robot_config(robot)
    assert cfg.path == ROOT / "config" / f"{robot}.yaml"
    for spec in cfg.nodes:
        assert spec.executable in NODES


def test_config_dir_is_the_source_tree_here():
    assert config_dir() == ROOT / "config"


def _write(tmp_path, text):
    path = tmp_path / "robot.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, match", [
    ("nodez: {}\n", r"^nodez: unknown top-level key"),
    ("nodes: {a: {executable: no_such_node}}\n", r"^nodes.a.executable: unknown executable 'no_such_node'"),
    ("nodes: {a: {parameters: [1, 2]}}\n", r"^nodes.a.parameters in .*robot.yaml: expected a mapping"),
    ("nodes: {a: {params: {}}}\n", r"^nodes.a.params: unknown key"),
    ("nodes: [1]\n", r"nodes: expected a mapping"),
    ("nodes: {a: {nice: 1}}\n", r"^nodes.a: no executable given and 'a' is not one"),
])
def test_malformed_configs_are_rejected_with_the_key(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_robot_config(_write(tmp_path, text))


def test_unknown_robot_lists_known_ones():
    with pytest.raises(ConfigError, match=r"robot: no config .*nosuchbot.yaml \(known robots: \[.*'aloha'"):
        load_robot_config("nosuchbot")


def _up(*args):
    return subprocess.run([sys.executable, "-m", "plan_stack.cli", "up", *args],
                          capture_output=True, text=True, timeout=60)


def test_plan_stack_up_refuses_unknown_robot_and_empty_config(tmp_path):
    res = _up("nosuchbot")
    assert res.returncode == 2 and "no config" in res.stderr
    res = _up(str(_write(tmp_path, "common: {use_sim_time: true}\nnodes: {}\n")))
    assert res.returncode == 2 and "lists no nodes" in res.stderr


def test_cli_without_subcommand_shows_usage():
    res = subprocess.run([sys.executable, "-m", "plan_stack.cli"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "usage: plan-stack" in res.stderr


def test_yaml_syntax_error_is_one_line_with_file_and_line(tmp_path):
    path = _write(tmp_path, "nodes:\n  s:\n    executable: stitcher\n    parameters: {dt: [0.1\n")
    with pytest.raises(ConfigError) as info:
        load_robot_config(path)
    message = str(info.value)
    assert "\n" not in message and "YAML syntax error" in message
    assert message.startswith(f"{path}:5:") or message.startswith(f"{path}:4:")
    done = subprocess.run([sys.executable, "-m", "plan_stack.cli", "up", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and f"{path}:" in done.stderr


def test_mixed_integer_and_float_lists_become_floats_and_use_sim_time_overrides(tmp_path):
    path = _write(tmp_path, "common: {use_sim_time: true}\nnodes:\n  s:\n    executable: stitcher\n"
                            "    parameters: {a_max: [1, 2.5], stitch_len: 3}\n")
    spec = load_robot_config(path).nodes[0]
    assert spec.parameters["a_max"] == [1.0, 2.5] and all(isinstance(v, float) for v in spec.parameters["a_max"])
    assert spec.parameters["stitch_len"] == 3 and spec.parameters["use_sim_time"] is True
    assert load_robot_config(path, use_sim_time=False).nodes[0].parameters["use_sim_time"] is False


@pytest.mark.parametrize("robot, bridge, parameter, value, problem", [
    ("aloha", "aloha_bridge", "velocity_scale", "fast", "expected a number, got 'fast'"),
    ("aloha", "aloha_bridge", "acceleration_limits", [1.0, 2.0], "expected 1 or 14 values, got 2"),
    ("aloha", "aloha_bridge", "urdf_path", "/no/such.urdf", "no such file '/no/such.urdf'"),
    ("franka", "franka_bridge", "watchdog_timeout", "soon", "expected a number, got 'soon'"),
])
def test_a_bad_bridge_parameter_read_by_limits_from_names_the_bridge_and_the_parameter(
        tmp_path, robot, bridge, parameter, value, problem):
    """The stitcher's `limits_from` reads the bridge's parameters first: an error in them is the bridge's entry,
    not the stitcher's (both through load_robot_config and through `plan-stack up`)."""
    import yaml

    raw = yaml.safe_load((config_dir() / f"{robot}.yaml").read_text())
    raw["nodes"][bridge]["parameters"][parameter] = value
    path = _write(tmp_path, yaml.safe_dump(raw))
    expected = f"nodes.{bridge}.parameters.{parameter}: {problem} (read by nodes.stitcher.limits_from)"
    with pytest.raises(ConfigError) as info:
        load_robot_config(path)
    assert str(info.value) == expected
    res = _up(str(path))
    assert res.returncode == 2 and res.stderr.strip() == f"plan-stack up: {expected}"


@pytest.mark.parametrize("robot", ["aloha", "franka", "drive"])
def test_ingest_makes_the_images_the_shipped_planner_model_was_trained_on(robot):
    """A model shipped at another image size needs its config changed with it (driving: 112 -> 80 px)."""
    from plan_stack.paths import find_data
    from plan_stack.planning.model_dir import read_manifest

    manifest = read_manifest(find_data("models", robot))  # as the planner reads it
    ingest = next(s for s in load_robot_config(robot).nodes if s.executable == "ingest")
    assert list(ingest.parameters["output_size"]) == manifest["image_size"]
    assert set(manifest["cameras"]) <= set(ingest.parameters["camera_names"])  # the planner takes its own


@pytest.mark.parametrize("robot", ["aloha_real", "franka_real", "drive_real"])
def test_real_robot_configs_run_the_whole_stack_without_simulator_on_wall_time(robot):
    cfg = load_robot_config(robot)
    assert cfg.nodes and not any(s.executable.endswith("_sim") for s in cfg.nodes)
    assert all(s.parameters["use_sim_time"] is False for s in cfg.nodes)
    sim_cfg = load_robot_config(robot.removesuffix("_real"))
    # every node of the simulated stack but the simulator (franka_real and drive_real once started the bridge
    # alone), with the simulated stack's parameters
    assert [s.name for s in cfg.nodes] == [s.name for s in sim_cfg.nodes if not s.executable.endswith("_sim")]
    sim_nodes = {s.name: s for s in sim_cfg.nodes}
    for spec in cfg.nodes:
        same = {k: v for k, v in sim_nodes[spec.name].parameters.items() if k not in ("use_sim_time", "joint_qos")}
        assert {k: v for k, v in spec.parameters.items() if k != "joint_qos"} == {**same, "use_sim_time": False}
        sim = sim_nodes[spec.name]
        assert (spec.executable, spec.remappings, spec.own_process, spec.nice) == (
            sim.executable, sim.remappings, sim.own_process, sim.nice)


def test_a_config_extends_another_and_says_only_what_differs(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "common: {use_sim_time: true, x: 1}\nnodes:\n"
        "  sim: {executable: aloha_sim}\n"
        "  s: {executable: stitcher, nice: 5, parameters: {dt: 0.1, horizon: 3}, remappings: {a: b}}\n"
        "  c: {executable: chunker}\n")
    (tmp_path / "real.yaml").write_text(
        "extends: base.yaml\ndrop_nodes: [sim]\ncommon: {use_sim_time: false}\nnodes:\n"
        "  s: {parameters: {horizon: 5}, remappings: {c: d}}\n  v: {executable: viz}\n")
    cfg = load_robot_config(tmp_path / "real.yaml")
    assert [n.name for n in cfg.nodes] == ["s", "c", "v"]
    s = cfg.nodes[0]
    assert s.parameters == {"use_sim_time": False, "x": 1, "dt": 0.1, "horizon": 5}
    assert s.remappings == {"a": "b", "c": "d"} and s.nice == 5 and s.executable == "stitcher"
    (tmp_path / "realer.yaml").write_text("extends: real.yaml\nnodes: {c: {nice: 3}}\n")  # a chain
    assert [(n.name, n.nice) for n in load_robot_config(tmp_path / "realer.yaml").nodes] == [
        ("s", 5), ("c", 3), ("v", 0)]


@pytest.mark.parametrize("text, match", [
    ("extends: loop.yaml\n", r"extends itself"),
    ("extends: base.yaml\ndrop_nodes: [nope]\n", r"drop_nodes: 'nope' is not a node of"),
    ("extends: base.yaml\ndrop_nodes: [s]\nnodes: {s: {nice: 1}}\n", r"nodes.s: dropped by drop_nodes"),
    ("drop_nodes: [s]\nnodes: {}\n", r"drop_nodes: only a config that extends another"),
    ("extends: [base]\n", r"extends: expected a robot name or a path"),
    ("extends: nosuchbot\n", r"robot: no config"),
    ("extends: base.yaml\ndrop_nodes: s\n", r"drop_nodes: expected a list of node names"),
])
def test_a_bad_extension_is_refused_with_the_reason(tmp_path, text, match):
    (tmp_path / "base.yaml").write_text("nodes: {s: {executable: stitcher}}\n")
    path = tmp_path / "loop.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_robot_config(path)


@pytest.mark.parametrize("base, match", [
    ("nodes: {s: {executable: stitcher, paramters: {}}}\n", r"^nodes.s.paramters: unknown key in .*base.yaml$"),
    ("nodes: {s: {executable: no_such_node}}\n", r"^nodes.s.executable: unknown executable 'no_such_node' in .*base"),
    ("nodes: {s: {executable: stitcher, nice: 25}}\n", r"^nodes.s.nice: expected an integer 0-19, got 25 in .*base"),
    ("nodes: {s: {executable: stitcher, remappings: [a]}}\n", r"^nodes.s.remappings in .*base.yaml: expected a map"),
])
def test_an_error_in_the_extended_file_names_that_file(tmp_path, base, match):
    """The merge happens after each file is checked, so the error points at the file to edit, not the one
    that extends it."""
    (tmp_path / "base.yaml").write_text(base)
    path = tmp_path / "overlay.yaml"
    path.write_text("extends: base.yaml\nnodes: {s: {parameters: {dt: 0.1}}}\n")
    with pytest.raises(ConfigError, match=match):
        load_robot_config(path)


def test_params_command_writes_standard_ros_parameter_files(tmp_path):
    out = tmp_path / "params"
    done = subprocess.run([sys.executable, "-m", "plan_stack.cli", "params", "aloha", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    import yaml

    cfg = load_robot_config("aloha")
    for spec in cfg.nodes:
        data = yaml.safe_load((out / f"{spec.name}.yaml").read_text())
        assert list(data) == [f"/{spec.name}"]
        assert data[f"/{spec.name}"]["ros__parameters"] == spec.parameters


@pytest.mark.ros
def test_written_parameter_file_is_read_by_rcl_for_the_node(tmp_path):
    """`--params-file` with a file from `plan-stack params`: rcl parses it and the node takes its values."""
    from plan_stack.robot_config import ros_parameter_files
    from plan_stack.ros.testing import ros_context
    from plan_stack.trajectory.stitcher_node import StitcherNode

    path = _write(tmp_path, "nodes:\n  arm_stitcher:\n    executable: stitcher\n"
                            "    parameters: {joint_names: [a, b], v_max: 2, a_max: [1, 2.5], stitch_len: 4}\n")
    files = ros_parameter_files(load_robot_config(path), tmp_path / "params")
    with ros_context() as ctx:
        node = StitcherNode(context=ctx, cli_args=["--ros-args", "-r", "__node:=arm_stitcher",
                                                   "--params-file", str(files[0])])
        try:
            assert node.get_name() == "arm_stitcher"
            assert list(node.get_parameter("joint_names").value) == ["a", "b"]
            assert node.get_parameter("v_max").value == 2.0  # an integer accepted for a float
            assert list(node.get_parameter("a_max").value) == [1.0, 2.5]
            assert node.get_parameter("stitch_len").value == 4
        finally:
            node.destroy_node()
