"""pip-installable plan_stack: the ROS-free libraries, the nodes and `plan-stack`.

`make setup` builds the ROS 2 package with colcon (CMakeLists.txt: interfaces +
this Python package + lib/plan_stack executables); colcon ignores this file in
that layout. This file serves `pip install .` (e.g. a training machine without
ROS: the planning/actions/trajectory libraries need no ROS) and declares the
same console entry points, read from src/plan_stack/executables.py.
"""
import runpy
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
table = runpy.run_path(str(HERE / "src" / "plan_stack" / "executables.py"))
scripts = [f"{name} = {target}" for name, target in {**table["NODES"], **table["COMMANDS"]}.items()]

setup(
    name="plan_stack",
    version="0.1.0",
    description=("Camera streams to robot motion: VFlash planning, RTC action chunks, MPC/Ruckig stitching, "
                 "robot bridges"),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    package_dir={"": "src"},
    packages=find_packages("src"),
    install_requires=["numpy>=1.26", "PyYAML>=6"],
    extras_require={
        "test": ["pytest", "hypothesis"],
        "trajectory": ["daqp>=0.11", "osqp>=1.0", "ruckig>=0.12", "scipy"],
        "models": ["torch", "transformers>=5.24", "safetensors", "tokenizers"],
        "engines": ["onnx>=1.17", "onnxruntime>=1.20"],
        "sim": ["mujoco>=3.2", "gym-aloha", "rosbags", "opencv-python-headless<5"],
    },
    data_files=[
        (f"share/plan_stack/{d.relative_to(HERE)}", [str(p.relative_to(HERE)) for p in sorted(d.glob("*.*"))])
        for folder in ("config", "launch", "urdf", "models")
        for d in sorted({p.parent for p in (HERE / folder).rglob("*.*")})
    ],
    entry_points={"console_scripts": scripts},
    zip_safe=False,
)
