"""Task after task over DDS: `plan-stack up` of the ALOHA simulator, bridge and stitcher (config/aloha.yaml,
`on_task_end: reset`, a short time limit), one process per node, driven by a stand-in for the chunker.

Each task ends at its time limit; the simulator says so (`ground_truth/task_outcome`), resets to the next
seed and restarts sim time. The bridge and the stitcher see the clock reset, drop the old scene's state and
recover: no ERROR diagnostic anywhere (no refusal, no protective stop: a finished task is no fault), their
`clock` status back to OK, and the robot moves again in every scene. (The chunker's and the planner's sides
of a reset are tested with those nodes: test/actions/test_chunker_node.py, test/planning/test_scheduler.py;
the whole stack in the soak, test/test_soak.py.)
"""
from __future__ import annotations

import math
import signal
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.ros

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.node import Node  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from plan_stack.embodiments.aloha.model import JOINT_NAMES  # noqa: E402
from plan_stack.msg import ActionChunk, TaskOutcome  # noqa: E402
from plan_stack.ros.qos import DIAGNOSTICS_QOS, LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS  # noqa: E402
from plan_stack.ros.testing import executor_with, ros_context, spin_until  # noqa: E402
from plan_stack.ros.time import stamp_to_s  # noqa: E402

LIMIT_S = 2.5
CONFIG = f"""
extends: aloha
drop_nodes: [ingest, chunker, planner, viz]
nodes:
  aloha_sim:
    parameters:
      camera_rate_hz: 0.0
      task_time_limit_s: {LIMIT_S}
      on_task_end: reset
      reset_pause_s: 0.5
"""
#: config/aloha.yaml's stitcher: joint_states (grippers in metres) -> stack units
OFFSET = np.array([0.0] * 6 + [0.01844] + [0.0] * 6 + [0.01844])
SCALE = np.array([1.0] * 6 + [25.278] + [1.0] * 6 + [25.278])
WAIST = (JOINT_NAMES.index("left_waist"), JOINT_NAMES.index("right_waist"))
H, DT = 50, 0.02


class ChunkStandIn:
    """Chunks as the chunker sends them (stamped with the state they start from, every 0.2 s of sim time): the
    scene's start pose with both waists swinging 0.15 rad. Tracks the scenes by the joint_states' stamps."""

    def __init__(self, node: Node) -> None:
        self.pub = node.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        node.create_subscription(JointState, "joint_states", self.on_state, SENSOR_QOS)
        self.scene = 0
        self.t = -1.0
        self.start: np.ndarray | None = None
        self.next_chunk_s = 0.0
        self.travel: list[float] = []  # per scene: the farthest a waist got from the start pose (rad)

    def on_state(self, msg: JointState) -> None:
        t = stamp_to_s(msg.header.stamp)
        q = np.array(msg.position)
        if t < self.t - 1e-3 or self.start is None:  # a new scene (the clock went back)
            self.scene += self.start is not None
            self.start, self.next_chunk_s = q.copy(), 0.0
            self.travel.append(0.0)
        self.t = t
        self.travel[-1] = max(self.travel[-1], float(np.abs(q[list(WAIST)] - self.start[list(WAIST)]).max()))
        if t < self.next_chunk_s:
            return
        self.next_chunk_s = t + 0.2
        base = (self.start - OFFSET) * SCALE
        rows = np.repeat(base[None, :], H, axis=0)
        swing = 0.15 * np.sin(2 * math.pi * 0.4 * (t + DT * np.arange(H)))
        rows[:, WAIST[0]] += swing
        rows[:, WAIST[1]] -= swing
        chunk = ActionChunk(joint_names=list(JOINT_NAMES), dt=DT, horizon=H, positions=rows.ravel().tolist())
        chunk.header.stamp = msg.header.stamp
        self.pub.publish(chunk)


def test_the_robot_does_task_after_task_and_a_reset_is_no_fault(tmp_path):
    path = tmp_path / "aloha_tasks.yaml"
    path.write_text(CONFIG)
    up = subprocess.Popen([sys.executable, "-m", "plan_stack.cli", "up", str(path), "--processes"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outcomes: list = []
    statuses: list = []
    try:
        with ros_context() as ctx:
            probe = Node("task_reset_probe", context=ctx)
            chunks = ChunkStandIn(probe)
            probe.create_subscription(TaskOutcome, "ground_truth/task_outcome", outcomes.append, LATCHED_QOS)
            probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: statuses.extend(m.status),
                                      DIAGNOSTICS_QOS)
            with executor_with(ctx, probe) as ex:
                done = spin_until(ex, lambda: len(outcomes) >= 3 or up.poll() is not None, 180.0, step_s=0.02)
                assert done and up.poll() is None, up.stdout.read() if up.poll() is not None else "no 3 outcomes"
                clock_now = {}  # the latest `clock` status of each node, just before the third reset
                for s in statuses:
                    if s.name.endswith(": clock"):
                        clock_now[s.name] = s
    finally:
        up.send_signal(signal.SIGINT)
        out, _ = up.communicate(timeout=60)
    assert [(o.episode, o.seed, o.reason, o.next) for o in outcomes[:3]] == [
        (1, 0, "time_limit", "reset"), (2, 1, "time_limit", "reset"), (3, 2, "time_limit", "reset")], outcomes
    errors = [f"{s.name}: {s.message}" for s in statuses if s.level == DiagnosticStatus.ERROR]
    assert not errors, errors[:5]
    assert not any(s.name.endswith("protective_stop") for s in statuses)
    # both nodes saw the resets and recovered from them
    for node in ("aloha_bridge", "stitcher"):
        assert any(s.name == f"{node}: clock" and s.level == DiagnosticStatus.WARN for s in statuses), node
        assert clock_now[f"{node}: clock"].level == DiagnosticStatus.OK, clock_now[f"{node}: clock"].message
    # the robot moved again after each reset (the first scene may pass while the nodes still start)
    assert chunks.scene >= 2 and all(travel > 0.05 for travel in chunks.travel[1:3]), chunks.travel
    assert out.count("aloha_sim]: task ") >= 3, out[-3000:]
    assert "Traceback" not in out
