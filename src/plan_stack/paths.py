"""Where the package's data folders (config/, urdf/, models/, launch/) are.

The same code runs from the source tree (tests, `make demo`), from a colcon
install (`share/plan_stack/<folder>`) and from a pip install
(`<prefix>/share/plan_stack/<folder>`); `$PLAN_STACK_SHARE_DIR` overrides all.
No ROS imports (ament_index is not needed for this).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["data_dirs", "find_data"]

_HERE = Path(__file__).resolve().parent  # .../src/plan_stack or .../site-packages/plan_stack


def data_dirs(folder: str) -> list[Path]:
    """Candidate directories for a data folder, most specific first."""
    roots = []
    if os.environ.get("PLAN_STACK_SHARE_DIR"):
        roots.append(Path(os.environ["PLAN_STACK_SHARE_DIR"]))
    roots.append(_HERE.parent.parent)  # source tree: src/plan_stack -> repository root
    # colcon/ament install: <prefix>/lib/pythonX.Y/site-packages/plan_stack -> <prefix>/share/plan_stack
    roots += [p / "share" / "plan_stack" for p in _HERE.parents[2:4]]
    roots.append(Path(sys.prefix) / "share" / "plan_stack")  # pip install data_files
    return [r / folder for r in roots]


def find_data(folder: str, name: str = "") -> Path:
    """The first existing `<folder>/<name>` (or `<folder>` itself when name is empty).

    `name` may also be an absolute path or a path relative to the current
    directory, which is returned as is when it exists. Raises FileNotFoundError
    listing where it looked.
    """
    if name:
        direct = Path(name).expanduser()
        if direct.is_absolute() or direct.exists():
            if direct.exists():
                return direct
            raise FileNotFoundError(f"{name}: no such file or directory")
    candidates = [d / name if name else d for d in data_dirs(folder)]
    for c in candidates:
        if c.exists():
            return c
    raise FileNotFoundError(f"{folder}/{name}: not found (looked in {[str(c) for c in candidates]})")
