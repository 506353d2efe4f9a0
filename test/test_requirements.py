"""Every third-party module src/plan_stack imports is installed by each way of installing it.

The syntax trees of src/plan_stack are walked (top-level and lazy imports alike), each module is mapped to the
distribution that provides it, and each setup is checked to install it:

* `requirements/lock.txt`: the self-contained venv of the quick start (ROS 2 core from PyPI wheels);
* `requirements/ros-apt.txt`: an apt ROS 2 install (Jazzy/Kilted), where ROS, numpy and torch come from
  elsewhere (`APT_PROVIDED`, the README's recipe);
* `requirements/runtime.txt`: the non-ROS packages of a ROS 2 install, numpy and torch included.

A missing package is no small thing on a real install: without `daqp` the stitcher died at import, and the
launch files restarted it every 2 s forever. Optional packages (`OPTIONAL`) are imported only inside functions,
behind an ImportError guard that says what to install.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "plan_stack"
REQUIREMENTS = ROOT / "requirements"

#: import name -> the PyPI distribution that provides it, for every third-party module of src/plan_stack
#: except the ROS 2 ones (ROS_MODULES).
DISTRIBUTIONS = {
    "cv2": "opencv-python-headless",
    "daqp": "daqp",
    "gym_aloha": "gym-aloha",
    "matplotlib": "matplotlib",
    "mujoco": "mujoco",
    "numpy": "numpy",
    "onnxruntime": "onnxruntime",
    "osqp": "osqp",
    "rosbags": "rosbags",
    "ruckig": "ruckig",
    "safetensors": "safetensors",
    "scipy": "scipy",
    "tensorrt": "tensorrt",
    "tokenizers": "tokenizers",
    "torch": "torch",
    "tqdm": "tqdm",
    "transformers": "transformers",
    "yaml": "PyYAML",
}

#: ROS 2 Python packages: on an apt install the package of the same name (`ros-$ROS_DISTRO-<name>`, declared in
#: package.xml for rosdep); here the PyPI wheel `ros-<name>` of lock.txt, where one exists.
ROS_MODULES = {
    "ament_index_python", "builtin_interfaces", "diagnostic_msgs", "geometry_msgs", "launch", "launch_ros",
    "nav_msgs", "rcl_interfaces", "rclpy", "rosgraph_msgs", "sensor_msgs", "std_msgs", "std_srvs",
    "trajectory_msgs", "visualization_msgs",
}

#: Installed outside ros-apt.txt on an apt ROS 2 install (its header and the README say so): module -> how.
APT_PROVIDED = {
    **{name: f"apt: ros-$ROS_DISTRO-{name.replace('_', '-')}" for name in ROS_MODULES},
    # ROS's compiled message modules are built against apt's numpy 1.26: pip must not replace it
    "numpy": "apt: python3-numpy (kept: ROS's message modules fail under numpy 2)",
    "torch": "pip from the PyTorch CPU index (README), not from ros-apt.txt",
}

#: Optional packages: module -> (setups that may lack it, why the code runs without it).
OPTIONAL = {
    "tensorrt": ({"lock.txt", "ros-apt.txt", "runtime.txt"},
                 "NVIDIA's package, for the tensorrt backend on a CUDA machine only; engines.runtime.tensorrt_status "
                 "says why it is unusable"),
    "onnxruntime": ({"ros-apt.txt"},
                    "only the `onnx` backend (engines) needs it; device.import_onnxruntime refuses that backend "
                    "naming the package to install"),
    "launch": ({"lock.txt"},
               "not on PyPI: only the launch files need it (an apt ROS 2 install has it); "
               "launch_support.generate_launch_description_for says what to install"),
    "launch_ros": ({"lock.txt"}, "as `launch`"),
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(name: str) -> dict[str, str]:
    """distribution (normalised) -> version of one requirements file."""
    out = {}
    for line in (REQUIREMENTS / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            dist, _, version = line.partition("==")
            out[_normalise(dist)] = version
    return out


class _Import:
    def __init__(self, module: str, path: Path, line: int, lazy: bool, guarded: bool) -> None:
        self.module, self.path, self.line, self.lazy, self.guarded = module, path, line, lazy, guarded

    def __repr__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


def _imports() -> list[_Import]:
    """Every absolute import of a module outside the standard library and plan_stack, with whether it sits in a
    function (lazy) and in the body of a `try` that catches ImportError (guarded). `if TYPE_CHECKING:` blocks
    are not imports at run time and are skipped."""
    found: list[_Import] = []

    def visit(node: ast.AST, path: Path, lazy: bool, guarded: bool) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child, path, lazy, guarded)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("plan_stack", "__future__"):
                found.append(_Import(top, path, node.lineno, lazy, guarded))
        if isinstance(node, ast.Try):
            catches = any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, path, lazy, guarded or catches)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, path, lazy, guarded)
            return
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, path, inner, guarded)

    for path in sorted(PKG.rglob("*.py")):
        visit(ast.parse(path.read_text(), filename=str(path)), path, False, False)
    return found


IMPORTS = _imports()
MODULES = sorted({i.module for i in IMPORTS})


def test_every_third_party_import_is_mapped_to_its_distribution():
    unknown = {i.module: i for i in IMPORTS if i.module not in DISTRIBUTIONS and i.module not in ROS_MODULES}
    assert not unknown, f"add to DISTRIBUTIONS or ROS_MODULES: {unknown}"
    assert {"cv2", "daqp", "mujoco", "yaml", "rclpy", "launch"} <= set(MODULES)  # the walk sees lazy imports too
    stale = (set(DISTRIBUTIONS) | ROS_MODULES) - set(MODULES)
    assert not stale, f"nothing imports {sorted(stale)}: drop them here"


@pytest.mark.parametrize("module", sorted(DISTRIBUTIONS))
def test_the_distribution_map_matches_what_the_installed_distributions_provide(module):
    """cv2 comes from opencv-python-headless, yaml from PyYAML...: read from the files each installed
    distribution lists (a module not installed here, tensorrt, is skipped)."""
    dist = DISTRIBUTIONS[module]
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        assert module in OPTIONAL, f"{dist} is not installed here"
        pytest.skip(f"{dist} is not installed here")
    tops = {f.parts[0].split(".")[0] for f in files}
    assert module in tops, f"{dist} provides {sorted(t for t in tops if not t.endswith('-info'))[:10]}, not {module}"


def _installed_by(setup: str, module: str) -> str | None:
    """How `setup` installs `module`, or None."""
    pins = _pins(setup)
    if module in ROS_MODULES:
        if setup == "lock.txt":
            wheel = _normalise(f"ros-{module}")
            return f"{wheel}=={pins[wheel]}" if wheel in pins else None
        return APT_PROVIDED[module]  # ros-apt.txt and runtime.txt: ROS itself comes from apt
    dist = _normalise(DISTRIBUTIONS[module])
    if dist in pins:
        return f"{dist}=={pins[dist]}"
    if setup == "ros-apt.txt":
        return APT_PROVIDED.get(module)
    return None


@pytest.mark.parametrize("setup", ["lock.txt", "ros-apt.txt", "runtime.txt"])
def test_each_setup_installs_every_module_the_code_imports(setup):
    missing = {}
    for module in MODULES:
        if _installed_by(setup, module) is None and setup not in OPTIONAL.get(module, ((), ""))[0]:
            missing[module] = [i for i in IMPORTS if i.module == module][:3]
    assert not missing, f"requirements/{setup} does not install: {missing}"


def test_ros_apt_installs_daqp_the_stitchers_qp_solver():
    """trajectory/mpc.py imports daqp at the top: the stitcher cannot start without it."""
    assert [i for i in IMPORTS if i.module == "daqp" and not i.lazy]
    assert _installed_by("ros-apt.txt", "daqp") == f"daqp=={_pins('lock.txt')['daqp']}"


@pytest.mark.parametrize("module", sorted(OPTIONAL))
def test_optional_packages_are_imported_lazily_behind_an_import_error_guard(module):
    """Never at module level (importing our module must not need it), and at least one import in each module
    that uses it catches ImportError to say what is missing; the others run after that check."""
    setups, reason = OPTIONAL[module]
    assert reason and setups <= {"lock.txt", "ros-apt.txt", "runtime.txt"}
    uses = [i for i in IMPORTS if i.module == module]
    assert uses, f"nothing imports {module}"
    assert not [i for i in uses if not i.lazy], f"{module} imported at module level: {uses}"
    for path in {i.path for i in uses}:
        assert any(i.guarded for i in uses if i.path == path), \
            f"{path.relative_to(ROOT)}: no import of {module} catches ImportError"


def test_the_apt_setup_gets_its_ros_packages_numpy_and_torch_where_it_says():
    """What ros-apt.txt leaves to apt is declared in package.xml (rosdep installs it); its header documents
    numpy and torch; the README's recipe installs torch from the CPU index and keeps apt's numpy."""
    root = ET.parse(ROOT / "package.xml").getroot()
    declared = {e.text for kind in ("depend", "exec_depend") for e in root.iter(kind)}
    assert ROS_MODULES <= declared, sorted(ROS_MODULES - declared)
    assert "python3-numpy" in declared
    header = [line for line in (REQUIREMENTS / "ros-apt.txt").read_text().splitlines() if line.startswith("#")]
    assert any("numpy" in line for line in header) and any("torch" in line for line in header)
    pins = _pins("ros-apt.txt")
    assert "numpy" not in pins and "torch" not in pins
    readme = (ROOT / "README.md").read_text()
    assert "download.pytorch.org/whl/cpu" in readme and "-c numpy-apt.txt" in readme


def test_apt_requirements_match_the_runtime_pins():
    apt, runtime = _pins("ros-apt.txt"), _pins("runtime.txt")
    differing = {k for k in apt if apt[k] != runtime.get(k)}
    assert differing == {"opencv-python-headless"}  # the last release that runs on numpy 1.x


def test_runtime_pins_match_the_lock_file():
    runtime, lock = _pins("runtime.txt"), _pins("lock.txt")
    assert {k: v for k, v in runtime.items() if lock.get(k) != v} == {}
