"""Every plan_stack message and action crosses a real DDS process boundary."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point
from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from plan_stack.action import ExecuteTrajectory, PlanRequest
from plan_stack.msg import ActionChunk, Observation, PlanFeatures, Primitive, TaskOutcome, VisualPlan
from plan_stack.ros.action_client import ActionCall, GoalRejected, ServerUnavailable
from plan_stack.ros.image import image_to_numpy, numpy_to_image
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.testing import executor_with, ros_context, spin_until

pytestmark = pytest.mark.ros


def _primitive(kind="robot_2d3d"):
    return Primitive(kind=kind, arm="left", frame_id="cam_high_optical",
                     points=[Point(x=0.1, y=-0.2, z=0.7), Point(x=0.15, y=-0.1, z=0.65)],
                     uv=[10.0, 20.0, math.nan, math.nan], horizon_s=0.0, block_size=14,
                     accepted_direct=True, fallback_from=-1)


def _samples():
    rng = np.random.default_rng(0)
    img = numpy_to_image(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8), "rgb8")
    obs = Observation(camera_names=["cam_high"], images=[img], source_stamps=[Time(sec=3, nanosec=5)],
                      joint_state=JointState(name=["j1"], position=[0.5], velocity=[0.1], effort=[]),
                      max_skew=0.004, instruction="pick the cube")
    obs.header.stamp = Time(sec=3, nanosec=7)
    plan = VisualPlan(instruction="pick", subtask="reach the cube", primitives=[_primitive(), _primitive("box")],
                      vision_ms=1.5, prefill_ms=2.5, decode_ms=3.5, total_ms=7.5, target_forwards=4,
                      drafter_forwards=2, tokens_out=40, decoder="vflash")
    feats = PlanFeatures(shape=[2, 3], data=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], plan_stamp=Time(sec=3, nanosec=7))
    chunk = ActionChunk(joint_names=["j1", "j2"], dt=0.02, horizon=3, positions=[0.0, 1.0, 0.1, 1.1, 0.2, 1.2],
                        prefix_len=1, inference_ms=12.5, delay_steps=1.5)
    outcome = TaskOutcome(task="transfer_cube", episode=3, seed=100002, success=True, reason="success",
                          max_reward=4, duration_s=7.42, next="reset", next_seed=100003)
    outcome.header.stamp = Time(sec=7, nanosec=420_000_000)
    return {"Observation": obs, "Primitive": _primitive(), "VisualPlan": plan, "PlanFeatures": feats,
            "ActionChunk": chunk, "TaskOutcome": outcome}


def _same(a, b) -> bool:
    """Field-wise equality treating NaN == NaN (the <oof> marker)."""
    if hasattr(a, "get_fields_and_field_types"):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.get_fields_and_field_types())
    if isinstance(a, (list, tuple)) or hasattr(a, "tolist"):
        a, b = list(a), list(b)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


@pytest.fixture(scope="module")
def peer():
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "interface_peer.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield proc
    proc.terminate()
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out


def test_every_message_type_round_trips_between_processes(peer):
    samples = _samples()
    with ros_context() as ctx:
        node = Node("interface_client", context=ctx)
        got = {}
        pubs = {}
        for name, msg in samples.items():
            pubs[name] = node.create_publisher(type(msg), f"echo/in/{name}", RELIABLE_QOS)
            node.create_subscription(type(msg), f"echo/out/{name}", lambda m, n=name: got.setdefault(n, m),
                                     RELIABLE_QOS)
        with executor_with(ctx, node) as ex:
            def send_missing():
                for name, msg in samples.items():
                    if name not in got:
                        pubs[name].publish(msg)
                return len(got) == len(samples)
            assert spin_until(ex, send_missing, 30.0, step_s=0.1), f"echoed: {sorted(got)}"
    for name, msg in samples.items():
        assert _same(msg, got[name]), name
    np.testing.assert_array_equal(image_to_numpy(got["Observation"].images[0]),
                                  image_to_numpy(samples["Observation"].images[0]))


def _trajectory(duration_s: float) -> JointTrajectory:
    traj = JointTrajectory(joint_names=["j1"])
    for i in range(1, 6):
        t = duration_s * i / 5
        traj.points.append(JointTrajectoryPoint(positions=[0.1 * i],
                                                time_from_start=Duration(sec=int(t), nanosec=int(t % 1 * 1e9))))
    return traj


def test_execute_trajectory_feedback_result_and_cancel(peer):
    with ros_context() as ctx:
        node = Node("action_client", context=ctx)
        call = ActionCall(node, ExecuteTrajectory, "execute_trajectory")
        feedback = []
        with executor_with(ctx, node) as ex:
            spinner = threading.Thread(target=ex.spin, daemon=True)
            spinner.start()
            # complete run: feedback then a successful result
            status, result = call.call(ExecuteTrajectory.Goal(trajectory=_trajectory(0.5)), timeout_s=20.0,
                                       server_timeout_s=20.0, feedback=feedback.append)
            assert status == GoalStatus.STATUS_SUCCEEDED and result.error_code == 0
            assert feedback and all(f.time_from_start >= 0 for f in feedback)
            assert feedback[-1].time_from_start <= 0.5 + 0.1
            # cancel mid-way
            handle = call.send(ExecuteTrajectory.Goal(trajectory=_trajectory(10.0)))
            time.sleep(0.3)
            assert call.cancel(handle)
            status, result = call.result(handle, timeout_s=10.0)
            assert status == GoalStatus.STATUS_CANCELED and result.error_string.startswith("canceled at")
            # an empty trajectory is rejected by the server
            with pytest.raises(GoalRejected, match="execute_trajectory: goal rejected"):
                call.send(ExecuteTrajectory.Goal(trajectory=JointTrajectory(joint_names=["j1"])))
            # PlanRequest: result carries a VisualPlan, feedback partial text
            plan_call = ActionCall(node, PlanRequest, "plan_request")
            partial = []
            status, result = plan_call.call(PlanRequest.Goal(instruction="stack the cups"), timeout_s=10.0,
                                            feedback=partial.append)
            assert status == GoalStatus.STATUS_SUCCEEDED and result.plan.instruction == "stack the cups"
            # no server: a typed error naming the action, within the timeout
            missing = ActionCall(node, ExecuteTrajectory, "no_such_bridge/execute_trajectory")
            t0 = time.monotonic()
            with pytest.raises(ServerUnavailable, match="no_such_bridge/execute_trajectory: no action server"):
                missing.send(ExecuteTrajectory.Goal(trajectory=_trajectory(1.0)), server_timeout_s=0.5)
            assert time.monotonic() - t0 < 3.0
            ex.shutdown(timeout_sec=1.0)
