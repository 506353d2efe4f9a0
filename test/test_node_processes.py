"""What a node process's exit status means (one policy for `plan-stack up` and the launch files), the niceness
it takes from the environment, and how it ends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from plan_stack.config import ConfigError
from plan_stack.node_processes import (
    CONFIG_ERROR_STATUS,
    NICE_ENV,
    AfterExit,
    after_exit,
    describe_exit,
    nice_from_env,
)


@pytest.mark.parametrize("returncode, action", [
    (CONFIG_ERROR_STATUS, AfterExit.STOP_ALL),  # refused its parameters: restarting cannot help
    (0, AfterExit.STOPPED),  # asked to stop
    (-signal.SIGINT, AfterExit.STOPPED),
    (-signal.SIGTERM, AfterExit.STOPPED),
    (1, AfterExit.RESPAWN),  # a failed worker, a raising callback, an uncaught exception
    (3, AfterExit.RESPAWN),
    (130, AfterExit.RESPAWN),
    (-signal.SIGKILL, AfterExit.RESPAWN),  # kill -9, the OOM killer
    (-signal.SIGSEGV, AfterExit.RESPAWN),
    (-signal.SIGABRT, AfterExit.RESPAWN),
])
def test_only_crashes_respawn_and_a_configuration_error_stops_everything(returncode, action):
    assert after_exit(returncode) is action
    assert action.respawns == (action is AfterExit.RESPAWN)


def test_exits_are_described_by_status_or_signal_name():
    assert describe_exit(2) == "exited with status 2"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"


def test_the_niceness_comes_from_the_environment_as_an_integer_0_to_19():
    assert nice_from_env({}) == 0 and nice_from_env({NICE_ENV: " "}) == 0
    assert nice_from_env({NICE_ENV: "10"}) == 10 and nice_from_env({NICE_ENV: "0"}) == 0
    for bad in ("-1", "20", "2.5", "high"):
        with pytest.raises(ConfigError, match=f"{NICE_ENV}: expected an integer 0-19, got {bad!r}"):
            nice_from_env({NICE_ENV: bad})


def test_exit_now_runs_the_atexit_handlers_flushes_and_keeps_the_status():
    code = textwrap.dedent("""
        import atexit, sys
        from plan_stack.node_processes import exit_now
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("unflushed ")
        exit_now(3)
        print("not reached")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "unflushed atexit ran\n", done.stdout


def test_exit_now_flushes_what_c_code_buffered_on_stdout():
    """rcutils (RCUTILS_LOGGING_USE_STDOUT, RCUTILS_LOGGING_BUFFERED_STREAM) and MuJoCo print through C stdio,
    which exit() flushes and os._exit does not."""
    code = textwrap.dedent("""
        import ctypes
        from plan_stack.node_processes import exit_now
        ctypes.CDLL(None).printf(b"from C\\n")
        exit_now(0)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # which makes C's stdout unbuffered
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout == "from C\n", done
