"""`plan-stack up`: real nodes from a robot YAML, in one process or one per node."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from rcl_interfaces.srv import GetParameters
from rclpy.node import Node

from plan_stack.ros.testing import executor_with, ros_context, spin_until

pytestmark = pytest.mark.ros

CONFIG = """
common:
  use_sim_time: false
nodes:
  left_stitcher:
    executable: stitcher
    parameters:
      joint_names: [a, b]
      backend: ruckig
    remappings:
      action_chunk: left/action_chunk
  right_stitcher:
    executable: stitcher
    own_process: {own}
    nice: {nice}
    parameters:
      joint_names: [c]
      dt: {dt}
"""


def _start(tmp_path, *extra, dt="0.01", own="false", nice=0):
    path = tmp_path / "robot.yaml"
    path.write_text(CONFIG.format(dt=dt, own=own, nice=nice))
    return subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", str(path), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _parameter(probe, ex, node, name):
    client = probe.create_client(GetParameters, f"/{node}/get_parameters")
    assert spin_until(ex, client.service_is_ready, 20.0)
    fut = client.call_async(GetParameters.Request(names=[name]))
    assert spin_until(ex, fut.done, 10.0)
    return fut.result().values[0]


@pytest.mark.parametrize("mode,own", [([], "false"), (["--processes"], "false"), ([], "true")],
                         ids=["one_process", "processes", "own_process"])
def test_up_starts_configured_nodes_with_their_parameters_and_stops_on_sigint(tmp_path, mode, own):
    proc = _start(tmp_path, *mode, own=own)
    try:
        with ros_context() as ctx:
            probe = Node("bringup_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                up = spin_until(ex, lambda: {"left_stitcher", "right_stitcher"} <= set(probe.get_node_names()),
                                60.0, step_s=0.05)
                assert up, proc.stdout.read() if proc.poll() is not None else "nodes did not appear"
                assert _parameter(probe, ex, "left_stitcher", "backend").string_value == "ruckig"
                assert _parameter(probe, ex, "right_stitcher", "dt").double_value == pytest.approx(0.01)
                assert list(_parameter(probe, ex, "right_stitcher", "joint_names").string_array_value) == ["c"]
                topics = dict(probe.get_topic_names_and_types())
                assert spin_until(ex, lambda: "/left/action_chunk" in dict(probe.get_topic_names_and_types()),
                                  10.0), sorted(topics)
                # which processes run the nodes: the bring-up's children, each `--only` its group
                groups = sorted(_children_only_args(proc.pid))
                assert groups == {"one_process": [], "processes": ["left_stitcher", "right_stitcher"],
                                  "own_process": ["left_stitcher", "right_stitcher"]}[
                    "processes" if mode else ("own_process" if own == "true" else "one_process")], groups
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "Traceback" not in out


@pytest.mark.parametrize("mode", [[], ["--processes"]], ids=["one_process", "processes"])
def test_up_stops_with_status_2_naming_a_bad_parameter(tmp_path, mode):
    proc = _start(tmp_path, *mode, dt="fast")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "dt:" in out and "right_stitcher" in out
    assert "Traceback" not in out


def test_up_refuses_a_misspelled_parameter_naming_node_and_parameter(tmp_path):
    path = tmp_path / "robot.yaml"
    path.write_text("nodes:\n  lone_stitcher:\n    executable: stitcher\n"
                    "    parameters: {joint_names: [a], v_maxx: 1.0}\n")
    done = subprocess.run([sys.executable, "-m", "plan_stack.cli", "up", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "v_maxx" in done.stderr and "lone_stitcher" in done.stderr and "Traceback" not in done.stderr


def test_up_with_processes_restarts_a_killed_node_with_back_off_and_logs_it(tmp_path):
    """kill -9 of one node: the bring-up logs it, restarts it after the back-off, the node comes back."""
    import os
    import time

    from plan_stack.bringup import RESPAWN_DELAY_S, respawn_delay

    assert respawn_delay(1) == RESPAWN_DELAY_S and respawn_delay(3) == 4 * RESPAWN_DELAY_S
    proc = _start(tmp_path, "--processes")
    try:
        with ros_context() as ctx:
            probe = Node("respawn_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                names = lambda: set(probe.get_node_names())  # noqa: E731
                assert spin_until(ex, lambda: {"left_stitcher", "right_stitcher"} <= names(), 60.0, step_s=0.05)
                right = lambda: _node_pid("right_stitcher", proc.pid)  # noqa: E731
                pid = right()
                assert pid is not None, "no right_stitcher child of the bring-up"
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
                assert spin_until(ex, lambda: right() not in (None, pid), 60.0, step_s=0.1)
                assert time.monotonic() - killed_at >= RESPAWN_DELAY_S * 0.9
                assert _parameter_eventually(probe, ex, "right_stitcher", "dt", 60.0).double_value == \
                    pytest.approx(0.01)
                assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert "node right_stitcher killed by SIGKILL; restarting it in" in out
    assert "restarting node right_stitcher (restart 1)" in out
    assert proc.returncode == 0, out


def _parameter_eventually(probe, ex, node, name, timeout_s):
    """GetParameters, retried: right after a restart, discovery still lists the dead process's server."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client = probe.create_client(GetParameters, f"/{node}/get_parameters")
        if spin_until(ex, client.service_is_ready, 5.0):
            fut = client.call_async(GetParameters.Request(names=[name]))
            if spin_until(ex, fut.done, 5.0):
                return fut.result().values[0]
        probe.destroy_client(client)
    raise AssertionError(f"/{node}/get_parameters did not answer in {timeout_s} s")


def _children_only_args(pid):
    """The `--only` argument of each direct child process of `pid` that is a bring-up."""
    return list(_bringup_children(pid))


def _bringup_children(parent):
    """`--only` argument -> pid of each live direct child process of `parent` that is a bring-up. Only the
    test's own bring-up's children: tests side by side (pytest -n) run nodes of the same names, and a test
    that found another's process killed it or read its priority."""
    import pathlib

    out = {}
    for proc_dir in pathlib.Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            stat = (proc_dir / "stat").read_text()
            cmd = (proc_dir / "cmdline").read_bytes().decode().split("\0")
        except (OSError, UnicodeDecodeError):
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and "--only" in cmd:
            out[cmd[cmd.index("--only") + 1]] = int(proc_dir.name)
    return out


def test_process_groups_share_one_process_except_own_process_nodes():
    from plan_stack.bringup import process_groups
    from plan_stack.robot_config import NodeSpec

    a, b, c = (NodeSpec(n, "stitcher", {}, {}, own_process=n == "b") for n in "abc")
    assert process_groups([a, b, c], processes=False) == [[a, c], [b]]
    assert process_groups([a, b, c], processes=True) == [[a], [b], [c]]
    assert process_groups([b], processes=False) == [[b]]
    assert process_groups([a, c], processes=False) == [[a, c]]


def _niceness(pid):
    import os

    return os.getpriority(os.PRIO_PROCESS, pid)


@pytest.mark.parametrize("mode", [["--processes"], []], ids=["processes", "one_process"])
def test_a_node_s_nice_lowers_the_priority_of_its_own_process_only(tmp_path, mode):
    """`nice: 7` on one node: its process runs 7 nicer than the bring-up; a process it shares with a node
    without `nice` is not deprioritised (and the log says so)."""
    import os

    proc = _start(tmp_path, *mode, nice=7)
    try:
        with ros_context() as ctx:
            probe = Node("nice_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: {"left_stitcher", "right_stitcher"} <= set(probe.get_node_names()),
                                  60.0, step_s=0.05)
                base = os.getpriority(os.PRIO_PROCESS, 0)
                if mode:
                    assert _niceness(_node_pid("right_stitcher", proc.pid)) == min(base + 7, 19)
                    assert _niceness(_node_pid("left_stitcher", proc.pid)) == base
                else:
                    assert _niceness(proc.pid) == base
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert ("share one process: it runs at +0" in out) == (not mode), out


def test_nice_must_be_an_integer_from_0_to_19(tmp_path):
    from plan_stack.config import ConfigError
    from plan_stack.robot_config import load_robot_config

    path = tmp_path / "robot.yaml"
    for bad in ("-1", "20", "2.5", "true", "high"):
        path.write_text(f"nodes:\n  s:\n    executable: stitcher\n    nice: {bad}\n")
        with pytest.raises(ConfigError, match="nodes.s.nice: expected an integer 0-19"):
            load_robot_config(str(path))
    nice = {s.name: s.nice for s in load_robot_config("aloha").nodes}
    assert nice["planner"] == nice["aloha_sim"] == 10 and nice["aloha_bridge"] == nice["stitcher"] == 0


def test_own_process_must_be_a_boolean(tmp_path):
    from plan_stack.config import ConfigError
    from plan_stack.robot_config import load_robot_config

    path = tmp_path / "robot.yaml"
    path.write_text("nodes:\n  s:\n    executable: stitcher\n    own_process: yes please\n")
    with pytest.raises(ConfigError, match="nodes.s.own_process: expected true or false"):
        load_robot_config(str(path))
    assert any(s.own_process for s in load_robot_config("aloha").nodes if s.name == "planner")


def _node_pid(name, parent):
    """pid of `parent`'s `plan_stack.bringup ... --only NAME` child process, None when none runs."""
    return _bringup_children(parent).get(name)


def test_up_rviz_says_so_where_rviz2_is_not_installed(tmp_path):
    import shutil

    if shutil.which("rviz2"):
        pytest.skip("rviz2 is installed here; the message is for installs without it")
    proc = _start(tmp_path, "--rviz", "--only", "left_stitcher")
    try:
        with ros_context() as ctx:
            probe = Node("rviz_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: "left_stitcher" in probe.get_node_names(), 60.0, step_s=0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert "rviz2 is not installed" in out and proc.returncode == 0, out


def test_real_robot_bridge_runs_on_wall_time_without_a_clock():
    """aloha_real: no simulator, no /clock; the bridge's timers still fire (diagnostics flow)."""
    from diagnostic_msgs.msg import DiagnosticArray

    from plan_stack.ros.qos import DIAGNOSTICS_QOS

    proc = subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", "aloha_real", "--only", "aloha_bridge"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with ros_context() as ctx:
            probe = Node("diagnostics_probe", context=ctx)
            seen = []
            probe.create_subscription(DiagnosticArray, "/diagnostics",
                                      lambda m: seen.extend(s.name for s in m.status), DIAGNOSTICS_QOS)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: len(seen) >= 2 or proc.poll() is not None, 60.0, step_s=0.05)
            assert any(name.startswith("aloha_bridge") for name in seen), seen
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


def test_up_with_processes_leaves_a_node_stopped_on_request_stopped(tmp_path):
    """A node process that ends cleanly (SIGTERM or SIGINT to it alone: status 0) stopped on request: it is not
    restarted (the launch files decide the same, `node_processes.after_exit`), and the others keep running."""
    import os
    import time

    from plan_stack.bringup import RESPAWN_DELAY_S

    proc = _start(tmp_path, "--processes")
    try:
        with ros_context() as ctx:
            probe = Node("stopped_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: {"left_stitcher", "right_stitcher"} <= set(probe.get_node_names()),
                                  60.0, step_s=0.05)
                pid = _node_pid("right_stitcher", proc.pid)
                os.kill(pid, signal.SIGTERM)
                assert spin_until(ex, lambda: _node_pid("right_stitcher", proc.pid) is None, 30.0, step_s=0.1)
                time.sleep(RESPAWN_DELAY_S * 3)
                assert _node_pid("right_stitcher", proc.pid) is None
                assert _node_pid("left_stitcher", proc.pid) is not None and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert "node right_stitcher exited with status 0: it stopped on request and is not restarted" in out, out
    assert "restarting" not in out and proc.returncode == 0, out


def _exit_time(pid, timeout_s):
    """Seconds until process `pid` (not a child of ours) is gone or a zombie; None when it outlives `timeout_s`."""
    import time

    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.01)
    else:
        return None
    return time.monotonic() - start


#: How long the planner may take to exit after Ctrl-C; launch escalates to SIGTERM after 5 s.
PLANNER_STOP_S = 2.0


@pytest.mark.timing
def test_up_stops_the_planner_within_2_s_of_sigint_while_it_loads_its_model():
    """Ctrl-C while the planner builds itself (its node exists; it imports transformers and loads the model for
    10-60 s): the construction is abandoned and the process exits within PLANNER_STOP_S. Before, the signal
    waited for the model (7-17 s), then for Python's finalisation over every torch/transformers object."""
    import time

    proc = subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", "aloha", "--only", "planner"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with ros_context() as ctx:
            probe = Node("planner_stop_probe", context=ctx)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: "planner" in probe.get_node_names() or proc.poll() is not None,
                                  120.0, step_s=0.02)
        assert proc.poll() is None, proc.stdout.read()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert took < PLANNER_STOP_S, f"the planner took {took:.2f} s to exit after SIGINT\n{out[-2000:]}"


@pytest.mark.slow
@pytest.mark.timing
def test_up_aloha_stops_the_planning_planner_within_2_s_of_ctrl_c():
    """`plan-stack up aloha`, planning: Ctrl-C (SIGINT to the process group) ends the planner's process within
    PLANNER_STOP_S, and the bring-up exits with status 0."""
    import os

    from plan_stack.msg import VisualPlan
    from plan_stack.ros.qos import RELIABLE_QOS

    proc = subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", "aloha"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        with ros_context() as ctx:
            probe = Node("planner_ctrl_c_probe", context=ctx)
            plans = []
            probe.create_subscription(VisualPlan, "/plan", plans.append, RELIABLE_QOS)
            with executor_with(ctx, probe) as ex:
                assert spin_until(ex, lambda: plans or proc.poll() is not None, 240.0, step_s=0.05)
        assert plans and proc.poll() is None
        planner = _node_pid("planner", proc.pid)
        assert planner is not None
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        took = _exit_time(planner, 30.0)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert took is not None and took < PLANNER_STOP_S, f"planner exit after Ctrl-C: {took} s\n{out[-3000:]}"
    assert proc.returncode == 0, out[-3000:]
