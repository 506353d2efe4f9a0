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


@pytest.mark.ros
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_killed_runner_leaves_no_node_process(tmp_path, sig):
    """run-episodes killed while its graph starts (SIGKILL: no clean-up runs at all): every bring-up and node
    process it started ends within seconds instead of living on under init."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    runner = subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "run-episodes", "--robot", "aloha",
                               "--seeds", "1", "--time-limit", "1", "--json", str(tmp_path / "rows.json")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    me = psutil.Process(runner.pid)
    try:
        deadline = time.monotonic() + 120.0
        seen: dict[int, psutil.Process] = {}
        # wait for the bring-up's node processes (grandchildren of the runner)
        while time.monotonic() < deadline:
            for p in me.children(recursive=True):
                seen.setdefault(p.pid, p)
            if any(p.ppid() != runner.pid for p in _alive(seen.values())) and len(_alive(seen.values())) >= 4:
                break
            assert runner.poll() is None, "the runner exited by itself"
            time.sleep(0.2)
        else:
            pytest.fail(f"no node processes within 120 s: {[p.cmdline() for p in _alive(seen.values())]}")
        for p in me.children(recursive=True):
            seen.setdefault(p.pid, p)
        runner.send_signal(getattr(signal, sig))
        runner.wait(timeout=60.0)
        deadline = time.monotonic() + 30.0
        while _alive(seen.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _alive(seen.values())
        assert not left, f"still running after the runner died: {[(p.pid, p.cmdline()[:4]) for p in left]}"
    finally:
        if runner.poll() is None:
            runner.kill()
        for p in _alive(seen.values()) if "seen" in locals() else []:
            p.kill()


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
