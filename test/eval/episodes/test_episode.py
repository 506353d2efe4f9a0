"""Episode configuration and message stamps (no DDS)."""
from __future__ import annotations

import pytest

from plan_stack.eval.episodes.episode import EpisodeOptions, episode_config, header_stamp_ns


def test_episode_config_sets_seed_time_and_planner():
    raw = episode_config(EpisodeOptions("aloha", 100007, real_time_factor=0.5, decoder="ar",
                                        pace_chunk_lead_s=0.6, sets=(("chunker", "max_plan_age_s", 1.5),)))
    nodes = raw["nodes"]
    sim = nodes["aloha_sim"]["parameters"]
    assert (sim["seed"], sim["real_time_factor"], sim["pace_chunk_lead_s"]) == (100007, 0.5, 0.6)
    # the runner ends the episode by its own criterion: the simulator neither resets nor stops at the task's end
    assert (sim["on_task_end"], sim["task_time_limit_s"]) == ("continue", 0.0)
    assert nodes["planner"]["parameters"]["decoder"] == "ar"
    assert nodes["chunker"]["parameters"]["max_plan_age_s"] == 1.5
    assert "viz" not in nodes


def test_a_graph_without_a_chunker_is_not_paced_to_chunks():
    # driving: nothing publishes action_chunk, so a chunk gate would keep the simulator's clock at 0
    opts = dict(pace_chunk_lead_s=0.6, pace_plan_lead_s=1.0)
    drive = episode_config(EpisodeOptions("drive", 100000, **opts))["nodes"]["drive_sim"]["parameters"]
    assert (drive["pace_chunk_lead_s"], drive["pace_plan_lead_s"]) == (0.0, 1.0)
    aloha = episode_config(EpisodeOptions("aloha", 100000, **opts))["nodes"]["aloha_sim"]["parameters"]
    assert (aloha["pace_chunk_lead_s"], aloha["pace_plan_lead_s"]) == (0.6, 1.0)


def test_gt_plans_drop_the_planner_and_bad_overrides_are_named():
    assert "planner" not in episode_config(EpisodeOptions("aloha", 1, gt_plans=True))["nodes"]
    with pytest.raises(ValueError, match="nosuch"):
        episode_config(EpisodeOptions("aloha", 1, sets=(("nosuch", "x", 1),)))


def test_header_stamp_from_serialised_messages():
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    msg = Image()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 345
    assert header_stamp_ns(serialize_message(msg)) == 12_000_000_345
    with pytest.raises(ValueError):
        header_stamp_ns(b"\x00\x01")


def _alive(procs) -> list:
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _start_runner(tmp_path):
    """`plan-stack run-episodes` in a child process, and its process (psutil)."""
    import subprocess
    import sys

    import psutil

    runner = subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "run-episodes", "--robot", "aloha",
                               "--seeds", "1", "--time-limit", "1", "--json", str(tmp_path / "rows.json")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return runner, psutil.Process(runner.pid)


def _wait_for_node_processes(runner, me, seen: dict, timeout_s: float = 120.0) -> None:
    """Wait until the bring-up's node processes (grandchildren of the runner) exist; every descendant seen is
    kept in `seen` (this test's own process tree only)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in me.children(recursive=True):
            seen.setdefault(p.pid, p)
        nodes = [p for p in _alive(seen.values())
                 if p.cmdline()[1:3] == ["-m", "plan_stack.bringup"] and "--only" in p.cmdline()]
        if nodes and len(_alive(seen.values())) >= 4:
            return
        assert runner.poll() is None, "the runner exited by itself"
        time.sleep(0.2)
    pytest.fail(f"no node processes within {timeout_s:.0f} s: {[p.cmdline() for p in _alive(seen.values())]}")


def _left_after(runner, sig, seen: dict, timeout_s: float) -> list:
    """Signal the runner, wait for it, then up to `timeout_s` for everything it started to end; what is left."""
    import time

    runner.send_signal(sig)
    runner.wait(timeout=90.0)
    deadline = time.monotonic() + timeout_s
    while _alive(seen.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(seen.values())


@pytest.mark.ros
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_killed_runner_leaves_no_node_process(tmp_path, sig):
    """run-episodes killed while its graph starts (SIGKILL: no clean-up runs at all; SIGINT: Ctrl-C): every
    group keeper, bring-up and node process it started ends within seconds instead of living on under init."""
    import signal

    runner, me = _start_runner(tmp_path)
    seen: dict = {}
    try:
        _wait_for_node_processes(runner, me, seen)
        left = _left_after(runner, getattr(signal, sig), seen, 30.0)
        assert not left, f"still running after the runner died: {[(p.pid, p.cmdline()[:6]) for p in left]}"
    finally:
        if runner.poll() is None:
            runner.kill()
        for p in _alive(seen.values()):
            p.kill()


@pytest.mark.ros
@pytest.mark.slow
def test_a_killed_runner_leaves_no_node_process_even_when_its_bring_up_hangs(tmp_path):
    """The stack's bring-up hangs (stopped here with SIGSTOP: like a process blocked in rclpy.shutdown on a
    DDS mutex, it acts on no signal but SIGKILL) and the runner is killed with SIGKILL: the bring-up cannot stop
    its node processes and, alive, gives them no parent-death signal. Its group keeper kills the whole group
    after STOP_TIMEOUT_S; without it the bring-up and every node process lived on under init. (A runner stopped
    by SIGINT or SIGTERM stops the groups from its own `finally`.)"""
    import signal

    from plan_stack.eval.episodes.episode import STOP_TIMEOUT_S

    runner, me = _start_runner(tmp_path)
    seen: dict = {}
    try:
        _wait_for_node_processes(runner, me, seen)
        bringup = next(p for p in _alive(seen.values())
                       if p.cmdline()[1:3] == ["-m", "plan_stack.bringup"] and "--processes" in p.cmdline())
        bringup.suspend()
        left = _left_after(runner, signal.SIGKILL, seen, STOP_TIMEOUT_S + 30.0)
        assert not left, f"still running after the runner died: {[(p.pid, p.cmdline()[:6]) for p in left]}"
    finally:
        if runner.poll() is None:
            runner.kill()
        for p in _alive(seen.values()):
            p.kill()


_CLOSE_UNDER_TRAFFIC = """
import os, sys, threading, time
import rclpy
from rclpy.context import Context
from rclpy.node import Node
from sensor_msgs.msg import Image
from plan_stack.eval.episodes.episode import EpisodeOptions, _Monitor, episode_config
from plan_stack.robots import profile
from plan_stack.ros.qos import RELIABLE_QOS

domain, out = int(os.environ["ROS_DOMAIN_ID"]), sys.argv[2]
for k in range(int(sys.argv[1])):
    opts = EpisodeOptions("aloha", 0, bag=os.path.join(out, f"bag{k}"))
    monitor = _Monitor(opts, profile("aloha"), domain, episode_config(opts))
    monitor.start_recording()
    ctx = Context()
    rclpy.init(args=[], context=ctx, domain_id=domain)
    cameras = Node("cameras", context=ctx)
    pubs = [cameras.create_publisher(Image, f"/cameras/{c}/image_raw", RELIABLE_QOS) for c in ("cam_high", "cam_low")]
    image = Image(height=1080, width=1920, encoding="rgb8", step=5760, data=bytes(1920 * 1080 * 3))
    stop = threading.Event()

    def flood():
        while not stop.is_set():
            for pub in pubs:
                pub.publish(image)

    flooding = threading.Thread(target=flood)
    flooding.start()
    time.sleep(1.5)
    monitor.close()  # while the frames still arrive, as when an episode ends
    stop.set()
    flooding.join()
    assert monitor.spin_error is None, monitor.spin_error
    cameras.destroy_node()
    rclpy.shutdown(context=ctx)
"""


@pytest.mark.ros
@pytest.mark.slow
def test_the_monitor_closes_under_traffic_without_an_unretrieved_task_error(tmp_path):
    """The demo's shutdown path: run_episode closes its monitor (observer node, bag recorder, ThreadedExecutor)
    while messages still arrive. A callback picked up just before the close used to finish after rclpy had
    destroyed the executor's guard condition, and its task's InvalidHandle was printed when the process
    exited: "The following exception was never retrieved: cannot use Destroyable because destruction was
    requested" (4 to 6 of 10 closes here before the fix)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CLOSE_UNDER_TRAFFIC, "10", str(tmp_path)], capture_output=True,
                          text=True, timeout=300.0)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "never retrieved" not in done.stderr and "Destroyable" not in done.stderr, done.stderr[-3000:]


@pytest.mark.ros
def test_start_up_probe_resends_a_call_whose_reply_was_lost(monkeypatch):
    """A node's first list_parameters reply never arrives (as when rmw drops it on a loaded machine):
    the start-up wait asks again and sees the node up, instead of failing the episode."""
    import threading
    import time
    import types

    from rcl_interfaces.srv import ListParameters
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.node import Node

    from plan_stack.eval.episodes import episode
    from plan_stack.ros.testing import executor_with, ros_context

    monkeypatch.setattr(episode, "SERVICE_RETRY_S", 0.5)
    release, calls = threading.Event(), []

    def serve(request, response):
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(30.0)  # the first reply is held back until the test ends
        return response

    with ros_context() as ctx:
        server = Node("slow_node", context=ctx, start_parameter_services=False)
        server.create_service(ListParameters, "/slow_node/list_parameters", serve,
                              callback_group=ReentrantCallbackGroup())
        client = Node("probe", context=ctx)
        with executor_with(ctx, server, client, threads=4) as ex:
            spinner = threading.Thread(target=ex.spin, daemon=True)
            spinner.start()
            try:
                t0 = time.monotonic()
                missing = episode._Monitor.wait_for_nodes(types.SimpleNamespace(node=client), ["slow_node"], 8.0,
                                                          lambda: None)
                waited = time.monotonic() - t0
            finally:
                release.set()
    assert missing == [] and len(calls) >= 2, (missing, len(calls))
    assert waited < 6.0
