"""Child processes that never outlive the process that started them (Linux).

A runner killed with SIGKILL runs no clean-up: without help its children are
re-parented to init and keep running (node processes holding DDS domains,
cores and GPU memory). `die_with_parent` is a `preexec_fn` that asks the kernel
(`prctl(PR_SET_PDEATHSIG)`) to signal the child when its parent dies, whatever
way it dies; `kill_group` ends what is left of a process group.

A signal only helps a process that still acts on it. A bring-up hung in its
own shutdown (rclpy.shutdown waiting on a DDS mutex: its Python signal handlers
never run) stops nothing, and the node processes it started then outlive it and
the runner. `keep_group` (`python -m plan_stack.child_processes --grace S --
CMD...`) closes that hole: started in a session and process group of its own
(`start_new_session`), it runs CMD in that group and, when asked to stop
(SIGINT or SIGTERM, including the SIGTERM that `die_with_parent` sends when the
runner dies), passes SIGINT on to CMD, gives the group `grace` seconds, then
sends SIGKILL to every process still in it. Only this small process, which
imports nothing that can hang, has to react.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

__all__ = ["die_with_parent", "kill_group", "group_members", "keep_group", "main"]

_PR_SET_PDEATHSIG = 1
#: How often `keep_group` looks at its child and the stop request (s).
_POLL_S = 0.05


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A `subprocess.Popen(preexec_fn=...)` that makes the child receive `sig` when this process dies.

    The signal is tied to the thread that forks the child (Linux semantics): start children from a thread that
    lives as long as they should. It survives `exec` (e.g. through `nice`). Where prctl is missing (not Linux)
    it does nothing."""
    parent = os.getpid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        prctl = None

    def preexec() -> None:
        if prctl is None:
            return
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), sig)

    return preexec


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal every process still in group `pgid` (nothing when the group is gone)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes (not zombies) in process group `pgid`, from /proc (Linux; [] elsewhere)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def _kill_others(pgid: int) -> None:
    """SIGKILL to every process of group `pgid` but this one."""
    me = os.getpid()
    for pid in group_members(pgid):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _reap_group(pgid: int, deadline: float) -> None:
    """Wait until this process is alone in its group or `deadline` (monotonic) passes, then kill the rest."""
    me = os.getpid()
    while time.monotonic() < deadline and [p for p in group_members(pgid) if p != me]:
        time.sleep(_POLL_S)
    _kill_others(pgid)


def keep_group(cmd: Sequence[str], grace_s: float) -> int:
    """Run `cmd` in this process's group until it exits or this process is asked to stop (module docstring).

    Stop request (SIGINT/SIGTERM): SIGINT to `cmd`, then `grace_s` for the group to end, then SIGKILL to what
    is left. When `cmd` exits by itself, what it left in the group gets the same `grace_s`. Returns `cmd`'s exit
    status (128 + N when a signal N ended it). Meant to run as a group leader (`start_new_session=True`): it
    kills its own process group."""
    pgid = os.getpgid(0)
    stop: list[int] = []

    def request(signum: int, _frame: object) -> None:
        stop.append(signum)

    previous = {s: signal.signal(s, request) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(list(cmd), preexec_fn=die_with_parent(signal.SIGTERM))
        while child.poll() is None and not stop:
            time.sleep(_POLL_S)
        deadline = time.monotonic() + grace_s
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        _reap_group(pgid, deadline)
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan_stack.child_processes",
                                     description="Run a command in this process group; on SIGINT/SIGTERM stop it, "
                                                 "then kill whatever is left of the group after a grace period.")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds the group gets to stop (default 10)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give a command after --")
    return keep_group(cmd, args.grace)


if __name__ == "__main__":
    sys.exit(main())
