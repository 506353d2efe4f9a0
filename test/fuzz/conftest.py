"""Counts the fuzz cases run over DDS and prints them at the end of the session."""
from __future__ import annotations

import collections
import os

import pytest

#: Hypothesis examples per fuzzed input (topic or action). CI keeps it small;
#: `FUZZ_EXAMPLES=1000 python -m pytest test/fuzz` is the long manual run.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))

CASES: collections.Counter = collections.Counter()


@pytest.fixture(scope="session")
def fuzz_cases() -> collections.Counter:
    return CASES


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not CASES:
        return
    terminalreporter.write_sep("-", f"fuzz: {sum(CASES.values())} malformed inputs over DDS")
    for key, n in sorted(CASES.items()):
        terminalreporter.write_line(f"  {key}: {n}")
