"""Suite-wide isolation: every pytest process gets its own ROS domain, on loopback.

The domain is reserved with an advisory file lock for the life of the process,
so parallel runs (xdist workers, several developers, CI) never share DDS
traffic; subprocesses started by tests inherit it.
"""
from __future__ import annotations

import os

import pytest

_held = []


def pytest_configure(config: pytest.Config) -> None:
    from plan_stack.ros.domains import reserve_domain

    domain, handle = reserve_domain(1, 100)
    _held.append(handle)
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    os.environ.setdefault("MUJOCO_GL", "egl")


#: Reruns of a timing-bound test that missed a deadline (the only tests that are rerun).
TIMING_RERUNS = 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Timing-bound tests (`timing`, and every DDS test marked `ros`) get one rerun; no other test does."""
    for item in items:
        if item.get_closest_marker("ros") is not None and item.get_closest_marker("timing") is None:
            item.add_marker(pytest.mark.timing)
        if item.get_closest_marker("timing") is not None and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=TIMING_RERUNS))


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models run fastest, and parallel test processes do not oversubscribe, on one torch thread."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


class SteppedClock:
    """Wall time that moves only when the test says so (`clock.t += dt`); callable like `time.monotonic`."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def stepped_clock() -> SteppedClock:
    return SteppedClock()


@pytest.fixture(scope="session")
def aloha_demo(tmp_path_factory):
    """`plan-stack record-demos` output: DIR/transfer_cube_0002/ (bag) and DIR/transfer_cube_0002.json."""
    from plan_stack.cli import main as cli_main

    out = tmp_path_factory.mktemp("demos")
    assert cli_main(["record-demos", "--task", "transfer_cube", "--episodes", "1", "--seed", "2", "--out", str(out),
                     "--width", "64", "--height", "48", "--camera-rate", "2", "--keyframe-period", "1.0"]) == 0
    return out / "transfer_cube_0002"
