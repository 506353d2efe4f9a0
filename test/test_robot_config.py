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
    ("nodes: {a: {parameters: [1, 2]}}\n", r"nodes.a.parameters: expected a mapping"),
    ("nodes: {a: {params: {}}}\n", r"^nodes.a.params: unknown key"),
    ("nodes: [1]\n", r"nodes: expected a mapping"),
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
