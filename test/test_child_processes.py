"""die_with_parent / kill_group: a child never outlives its parent, however the parent dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from plan_stack.child_processes import kill_group

_PARENT = """
import subprocess, sys, time
from plan_stack.child_processes import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=die_with_parent({protect}))
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # a zombie nobody reaps: it has ended
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
@pytest.mark.parametrize("protect, dies", [("signal.SIGTERM", True), ("0", False)])
def test_the_child_dies_when_its_parent_is_killed(protect, dies):
    code = _PARENT.format(protect=protect).replace("import subprocess", "import signal, subprocess")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        parent.kill()  # SIGKILL: the parent runs no clean-up
        parent.wait()
        assert _gone(child, 10.0) is dies  # signal 0 = no request: the child lives on (the test can fail)
    finally:
        if not _gone(child, 0.0):
            os.kill(child, signal.SIGKILL)


def test_kill_group_ends_a_group_and_ignores_a_missing_one():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    kill_group(p.pid)
    assert p.wait(timeout=10.0) == -signal.SIGKILL
    kill_group(p.pid)  # gone: nothing happens
