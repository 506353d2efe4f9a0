"""Child processes that never outlive the process that started them (Linux).

A runner killed with SIGKILL runs no clean-up: without help its children are
re-parented to init and keep running (node processes holding DDS domains,
cores and GPU memory). `die_with_parent` is a `preexec_fn` that asks the kernel
(`prctl(PR_SET_PDEATHSIG)`) to signal the child when its parent dies, whatever
way it dies; `kill_group` ends what is left of a process group.
"""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

__all__ = ["die_with_parent", "kill_group"]

_PR_SET_PDEATHSIG = 1


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
