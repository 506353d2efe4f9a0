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


_STUBBORN = """
import signal, subprocess, sys, time
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)  # hung as a process blocked in a DDS mutex is: only SIGKILL ends it
grandchild = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, "
                               "signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
print(grandchild.pid, flush=True)
time.sleep(120)
"""


def _keeper(grace_s: float, code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "plan_stack.child_processes", "--grace", str(grace_s), "--",
                             sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True,
                            **kwargs)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the group is read from /proc")
def test_keep_group_kills_a_group_that_ignores_the_stop_after_the_grace_period():
    keeper = _keeper(0.5, _STUBBORN)
    grandchild = int(keeper.stdout.readline())
    try:
        from plan_stack.child_processes import group_members

        members = group_members(keeper.pid)
        assert keeper.pid in members and grandchild in members and len(members) == 3  # keeper, command, its child
        t0 = time.monotonic()
        keeper.send_signal(signal.SIGTERM)  # as from die_with_parent when the runner dies
        assert keeper.wait(timeout=10.0) == 128 + signal.SIGKILL  # the command's own end: killed
        assert time.monotonic() - t0 >= 0.5
        assert _gone(grandchild, 5.0) and group_members(keeper.pid) == []
    finally:
        kill_group(keeper.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_keep_group_ends_its_group_when_the_runner_that_started_it_is_killed():
    runner = subprocess.Popen([sys.executable, "-c", f"""
import signal, subprocess, sys, time
from plan_stack.child_processes import die_with_parent
keeper = subprocess.Popen([sys.executable, "-m", "plan_stack.child_processes", "--grace", "0.5", "--",
                           sys.executable, "-c", {_STUBBORN!r}], start_new_session=True,
                          preexec_fn=die_with_parent(signal.SIGTERM))
print(keeper.pid, flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    keeper = int(runner.stdout.readline())
    try:
        from plan_stack.child_processes import group_members

        deadline = time.monotonic() + 10.0
        while len(group_members(keeper)) < 3 and time.monotonic() < deadline:  # the command and its child started
            time.sleep(0.05)
        assert len(group_members(keeper)) == 3
        runner.kill()  # SIGKILL: no clean-up in the runner
        runner.wait()
        deadline = time.monotonic() + 10.0
        while group_members(keeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_members(keeper) == []
    finally:
        kill_group(keeper)


def test_keep_group_passes_on_the_exit_status_of_its_command():
    keeper = _keeper(0.5, "import sys; sys.exit(3)")
    assert keeper.wait(timeout=20.0) == 3
    done = subprocess.run([sys.executable, "-m", "plan_stack.child_processes", "--grace", "1"], capture_output=True,
                          text=True, timeout=20.0)
    assert done.returncode == 2 and "give a command after --" in done.stderr
