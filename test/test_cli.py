"""Every `plan-stack` command prints its help (a stray `%` in a help string once crashed one)."""
from __future__ import annotations

import pytest

from plan_stack.cli import SUBCOMMANDS, main


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_command_prints_its_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"plan-stack {command}" in out


def test_top_level_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(c in out for c in SUBCOMMANDS)
