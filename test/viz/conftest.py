"""A recorded ALOHA demonstration (bag + annotation), shared by the render and episode tests."""
from __future__ import annotations

import pytest

from plan_stack.cli import main as cli_main


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """`plan-stack record-demos` output: DIR/transfer_cube_0002/ (bag) and DIR/transfer_cube_0002.json."""
    out = tmp_path_factory.mktemp("demos")
    assert cli_main(["record-demos", "--task", "transfer_cube", "--episodes", "1", "--seed", "2", "--out", str(out),
                     "--width", "64", "--height", "48", "--camera-rate", "2", "--keyframe-period", "1.0"]) == 0
    return out / "transfer_cube_0002"
