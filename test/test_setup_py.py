"""setup.py builds a real wheel: the library, the node entry points, the configs."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from plan_stack.executables import COMMANDS, NODES

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_has_library_entry_points_and_configs(tmp_path):
    src = tmp_path / "src_copy"
    src.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("src", "config", "launch"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "--disable-pip-version-check", "-q", "-w", str(out), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (wheel,) = out.glob("plan_stack-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "plan_stack/config.py" in names and "plan_stack/ros/params.py" in names
    assert any(n.endswith("data/share/plan_stack/config/aloha.yaml") for n in names)
    for name, target in {**NODES, **COMMANDS}.items():
        assert f"{name} = {target}" in entry_points
