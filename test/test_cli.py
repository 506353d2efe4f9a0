"""Every `plan-stack` command prints its help (a stray `%` in a help string once crashed one), and the help
says what an option does, never which machine a figure was measured on."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from plan_stack.cli import SUBCOMMANDS, main

SRC = Path(__file__).resolve().parents[1] / "src"
BENCH = SRC.parent / "bench"

#: wording about the development machine or the work behind an option (issue numbers), not about the option
MACHINE_WORDS = re.compile(r"2-core|2-vcpu|this machine|shared machine|development (machine|vm)|\bsession\b|#\d",
                           re.IGNORECASE)

#: `python -m` tools of src/ with a parser of their own (besides `plan-stack`): found, not listed, so that a
#: new one is checked too
MODULE_TOOLS = sorted(".".join(p.relative_to(SRC).with_suffix("").parts) for p in SRC.rglob("*.py")
                      if "ArgumentParser(" in p.read_text(encoding="utf-8") and p.name != "cli.py")
#: the benchmark scripts (bench/*.py with a parser)
BENCH_SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if "ArgumentParser(" in p.read_text(encoding="utf-8"))


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_command_prints_its_help(command, capsys):
    assert f"plan-stack {command}" in _help([command, "--help"], capsys)


def test_top_level_help(capsys):
    out = _help(["--help"], capsys)
    assert all(c in out for c in SUBCOMMANDS)


@pytest.mark.parametrize("command", ["", *sorted(SUBCOMMANDS)])
def test_help_says_what_options_do_not_which_machine_measured_them(command, capsys):
    out = _help([command, "--help"] if command else ["--help"], capsys)
    found = MACHINE_WORDS.search(out)
    assert found is None, f"plan-stack {command} --help mentions {found[0]!r}:\n{out}"


@pytest.mark.parametrize("tool", [*(f"-m {m}" for m in MODULE_TOOLS), *(f"bench/{b}" for b in BENCH_SCRIPTS)])
def test_python_tools_and_benchmarks_help_says_what_options_do(tool):
    argv = tool.split() if tool.startswith("-m ") else [str(BENCH.parent / tool)]
    res = subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    found = MACHINE_WORDS.search(res.stdout)
    assert found is None, f"python {tool} --help mentions {found[0]!r}:\n{res.stdout}"


@pytest.mark.parametrize("command", ["up", "params"])
def test_up_and_params_list_the_robots_and_configs_they_accept(command, capsys):
    from plan_stack.robot_config import config_names
    from plan_stack.robots import robot_names

    out = " ".join(_help([command, "--help"], capsys).split())  # argparse wraps lines
    assert config_names() and set(robot_names()) <= set(config_names())
    for name in [*robot_names(), *config_names()]:
        assert re.search(rf"\b{re.escape(name)}\b", out), f"plan-stack {command} --help does not name {name!r}"
