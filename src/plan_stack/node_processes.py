"""What a node process's exit status means, and the priority it runs at (no ROS).

`plan-stack up` (bringup.py) and the launch files (launch_support.py) supervise
node processes the same way, from `after_exit`:

* status 2 (`CONFIG_ERROR_STATUS`: the node refused its parameters) stops the
  whole bring-up: restarting cannot help, and a node restarted every few
  seconds forever hides the message;
* status 0, or killed by SIGINT/SIGTERM: the node stopped on request; it is
  not restarted and the others keep running;
* anything else is a crash (status 1 from a failed worker or a raising
  callback, another status, SIGKILL, SIGSEGV, SIGABRT...): restarted, when
  restarting is on.

A node's `nice` (config) reaches a process started by launch through the
environment (`NICE_ENV`): the node applies it itself at start-up
(`apply_nice_from_env`, called by `ros.lifecycle.node_main`), so a launch
prefix of the user's (`ros2 launch ... --launch-prefix`) still applies and
launch's output keeps the node's name.

A node process ends with `exit_now`: once its nodes are closed, Python's own
finalisation (a garbage collection over every object of torch, transformers
and MuJoCo, then clearing each module) has nothing left to do but took 2-8 s
on a loaded 2-core machine, past launch's 5 s SIGINT-to-SIGTERM escalation.
"""
from __future__ import annotations

import atexit
import ctypes
import enum
import os
import signal
import sys
from collections.abc import Mapping
from typing import NoReturn

from plan_stack.config import ConfigError

__all__ = ["CONFIG_ERROR_STATUS", "AfterExit", "after_exit", "describe_exit", "NICE_ENV", "nice_from_env",
           "apply_nice_from_env", "exit_now"]

#: Exit status of a node that refused its parameters (`ros.lifecycle.run_nodes`).
CONFIG_ERROR_STATUS = 2
#: Signals that ask a process to stop: a node they end stopped on request, it did not crash.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Environment variable with the niceness increment (0-19) a node process applies to itself at start-up.
NICE_ENV = "PLAN_STACK_NICE"


class AfterExit(enum.Enum):
    """What a supervisor does once a node process has exited."""

    RESPAWN = "respawn"  # a crash: restart it (when restarting is on)
    STOPPED = "stopped"  # stopped on request: leave it stopped, keep the others
    STOP_ALL = "stop_all"  # a configuration error: stop every node

    @property
    def respawns(self) -> bool:
        return self is AfterExit.RESPAWN


def after_exit(returncode: int) -> AfterExit:
    """The policy for a node process's exit; `returncode` as `subprocess` and launch report it (a negative
    value: killed by that signal)."""
    if returncode == CONFIG_ERROR_STATUS:
        return AfterExit.STOP_ALL
    if returncode == 0 or -returncode in STOP_SIGNALS:
        return AfterExit.STOPPED
    return AfterExit.RESPAWN


def describe_exit(returncode: int) -> str:
    """`exited with status N` or `killed by SIGNAME`."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def nice_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The niceness increment `NICE_ENV` asks for (0 when unset or empty). A value that is not an integer
    0-19 raises ConfigError naming the variable."""
    text = (os.environ if environ is None else environ).get(NICE_ENV, "").strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise ConfigError(f"{NICE_ENV}: expected an integer 0-19, got {text!r}")
    return value


def apply_nice_from_env(environ: Mapping[str, str] | None = None) -> int:
    """Lower this process's priority by `NICE_ENV` (relative to what it started at, so it composes with a
    `nice` in a launch prefix). Returns the increment applied."""
    increment = nice_from_env(environ)
    if increment:
        os.nice(increment)
    return increment


def exit_now(status: int) -> NoReturn:
    """End this process with `status` at once: run the atexit handlers and flush stdout/stderr, then skip the
    interpreter's finalisation (`os._exit`). For a node process whose nodes are closed; never in a process
    that has work left (a test runner). A further SIGINT/SIGTERM (Ctrl-C reaches a node from the terminal
    and again from its supervisor) is ignored from here on: it would interrupt an atexit handler."""
    for sig in STOP_SIGNALS:
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            break
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):  # closed or replaced streams
                pass
        try:  # C stdio buffers too (rcutils logging to a buffered stream, MuJoCo's messages): exit() flushed them
            ctypes.CDLL(None).fflush(None)
        except (OSError, AttributeError):
            pass
        os._exit(status)
