"""ROS_DOMAIN_ID reservation shared by the test suite, benchmarks and parallel evaluation jobs.

A domain is held through an advisory file lock (one lock file per domain in
the temp directory) for as long as the process keeps the returned handle, so
concurrent runs on one machine never share DDS traffic. Domains 1..200 keep
Fast DDS ports well inside the valid range. No ROS imports.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from typing import IO

__all__ = ["LOCK_DIR", "reserve_domain"]

LOCK_DIR = os.path.join(tempfile.gettempdir(), "plan_stack_ros_domains")


def reserve_domain(first: int = 1, last: int = 100, start: int | None = None) -> tuple[int, IO]:
    """(domain, lock handle) for a free domain in [first, last], searched from `start` (default: by pid).

    Keep the handle open while the domain is in use; closing it releases the domain.
    """
    os.makedirs(LOCK_DIR, exist_ok=True)
    span = last - first + 1
    offset = (os.getpid() if start is None else start - first) % span
    for i in range(span):
        domain = first + (offset + i) % span
        fh = open(os.path.join(LOCK_DIR, f"{domain}.lock"), "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        return domain, fh
    raise RuntimeError(f"no free ROS_DOMAIN_ID in {first}..{last} (locks in {LOCK_DIR})")
