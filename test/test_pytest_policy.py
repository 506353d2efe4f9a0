"""Only timing-bound tests are rerun (`make test` has no blanket --reruns)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_does_not_rerun_every_test():
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^test:\n((?:\t.*\n)+)", makefile, re.M)
    assert target is not None
    assert "--reruns" not in target.group(1) and "--only-rerun" not in target.group(1)


def test_a_plain_test_gets_no_rerun(request):
    assert request.node.get_closest_marker("flaky") is None


@pytest.mark.ros
def test_a_dds_test_is_timing_bound_and_gets_one_rerun(request):
    assert request.node.get_closest_marker("timing") is not None
    assert request.node.get_closest_marker("flaky").kwargs == {"reruns": 1}
