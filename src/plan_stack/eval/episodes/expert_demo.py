"""ALOHA demo: sim + bridge + scripted expert driving the robot through the bridge.

    python -m plan_stack.eval.episodes.expert_demo --out DIR [--seed 0] [--task transfer_cube]

Brings up `aloha_sim` and `aloha_bridge` in this process (real rclpy nodes
over DDS, on sim time), plans the scripted expert, retimes its joint path to
the bridge's limits, sends it as one `ExecuteTrajectory` goal, records the
graph's topics into `DIR/demo_<task>_<seed>/` (rosbag2 MCAP) and writes a
contact sheet of camera frames `DIR/demo_<task>_<seed>.png` and a plan
picture `DIR/demo_<task>_<seed>_plan.png` (each sub-task's future gripper
paths drawn on cam_high, `demo_plan_picture`). Prints whether
the task was solved (ground-truth reward 4); exit status 0 on success.

The plan picture: a demo run has no planner, so its picture shows the plan the
stack is trained to produce: at the start of each sub-task, each arm's future
tool-centre path until the sub-task ends, resampled to P waypoints and
projected into `cam_high` (the annotation recipe of `plan-stack
record-demos`), drawn on the `cam_high` frame of that moment. The paths
come from the run's own bag (`/ground_truth/<arm>_gripper/pose`, world
frame), so the picture shows what the robot did, not what was scripted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plan_stack.trajectory.checks import check_trajectory
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import Limits
from plan_stack.viz.config import VizStyle

__all__ = ["retime", "expert_trajectory", "demo_plan_picture", "main"]

LEAD_IN_S = 0.25  # the first expert sample is due this long after the goal starts (no jump from the present state)


def _monotone_slopes(times: np.ndarray, q: np.ndarray) -> np.ndarray:
    """PCHIP slopes: the cubic through them never overshoots the samples (grippers stay in 0..1)."""
    from scipy.interpolate import PchipInterpolator

    vel = PchipInterpolator(times, q, axis=0).derivative()(times)
    vel[0] = vel[-1] = 0.0
    return vel


def retime(positions: np.ndarray, dt_s: float, limits: Limits, margin: float = 0.8,
           max_rounds: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Times and velocities for a sampled joint path so its cubic curve respects `limits`.

    Each step is stretched so that the finite-difference velocity stays below
    `margin` x the limit, stretches are smoothed over neighbouring steps, and
    the whole profile is slowed down further until `check_trajectory`
    accepts it. Velocities are PCHIP slopes (no overshoot). Returns (times [N] from 0, velocities [N, D]).
    """
    q = np.asarray(positions, dtype=float)
    step = np.abs(np.diff(q, axis=0)) / (margin * limits.v_max * dt_s)
    stretch = np.maximum(1.0, step.max(axis=1))
    k = 5  # smooth the time warp over +-k steps (keeps accelerations low where it changes)
    padded = np.pad(stretch, k, mode="edge")
    stretch = np.max(np.lib.stride_tricks.sliding_window_view(padded, 2 * k + 1), axis=1)
    scale = 1.0
    for _ in range(max_rounds):
        times = np.concatenate([[0.0], np.cumsum(dt_s * stretch * scale)])
        vel = _monotone_slopes(times, q)
        traj = Trajectory(limits.joint_names, 1.0, times + LEAD_IN_S, q, vel)
        verdict = check_trajectory(traj, limits.joint_names, limits, now_s=1.0)
        if verdict.ok:
            return times, vel
        scale *= 1.15
    raise ValueError(f"retime: no feasible timing after {max_rounds} rounds: {verdict.message}")


SMOOTH_SIGMA_STEPS = 3.0  # Gaussian smoothing of the 50 Hz expert path (60 ms): rounds its waypoint corners


def expert_trajectory(task: str, seed: int, limits: Limits):
    """(episode, Trajectory in stack units with stamp 0) the bridge accepts.

    The expert's 50 Hz joint path has velocity kinks at every waypoint
    (linear end-effector interpolation) which a real arm's acceleration
    limits do not allow at full speed: it is smoothed, clipped to the joint
    range (the end-effector planner may graze a limit by a few micro-radians)
    and retimed (`retime`).
    """
    from scipy.ndimage import gaussian_filter1d

    from plan_stack.embodiments.aloha.expert import plan_episode

    episode = plan_episode(task, seed)
    q = gaussian_filter1d(episode.commands, SMOOTH_SIGMA_STEPS, axis=0, mode="nearest")
    q = np.clip(q, limits.q_min, limits.q_max)
    times, vel = retime(q, episode.dt_s, limits)
    return episode, Trajectory(limits.joint_names, 0.0, times + LEAD_IN_S, q, vel)


def contact_sheet(frames: list[tuple[float, dict[str, np.ndarray]]], path: str) -> None:
    """Rows = moments, columns = cameras; written as PNG."""
    import cv2

    rows = []
    for t, images in frames:
        row = np.concatenate([images[c] for c in sorted(images)], axis=1)
        row = row.copy()
        cv2.putText(row, f"t={t:.1f}s", (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1)
        rows.append(row)
    sheet = np.concatenate(rows, axis=0)
    if not cv2.imwrite(path, cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR)):
        raise OSError(f"out: cannot write {path}")


def run_demo(out: str, task: str = "transfer_cube", seed: int = 0, real_time_factor: float = 1.0,
             width: int = 320, height: int = 240, timeout_s: float = 120.0) -> bool:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("MUJOCO_GL", "egl")
    from geometry_msgs.msg import PoseStamped
    from rclpy.action import ActionClient
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.serialization import serialize_message
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore
    from sensor_msgs.msg import CameraInfo, Image, JointState
    from std_msgs.msg import Int32, String
    from trajectory_msgs.msg import JointTrajectory

    from plan_stack.action import ExecuteTrajectory
    from plan_stack.data.recording import new_bag_path
    from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits
    from plan_stack.embodiments.aloha.bridge_node import AlohaBridgeNode
    from plan_stack.embodiments.aloha.model import CAMERAS, task_spec
    from plan_stack.embodiments.aloha.sim_node import AlohaSimNode
    from plan_stack.ros.image import image_to_numpy
    from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
    from plan_stack.ros.testing import executor_with, ros_context, spin_until
    from plan_stack.ros.trajectory import trajectory_to_msg

    stem = f"demo_{task}_{seed:04d}"
    previous = os.path.join(out, stem)
    if os.path.isdir(previous):  # this demo's own earlier run: replaced, as `make demo` replaces its own
        shutil.rmtree(previous)
    bag_path = new_bag_path(out, stem)
    out_dir = bag_path.parent
    limits = load_limits(AlohaBridgeConfig())
    episode, traj = expert_trajectory(task, seed, limits)
    print(f"{task} seed {seed}: expert planned ({len(traj.times_s)} points over {traj.times_s[-1]:.1f} s "
          "after retiming)")

    spec = task_spec(task)
    topics = {"/joint_states": JointState, "/ground_truth/reward": Int32}
    for cam in CAMERAS:
        topics[f"/cameras/{cam}/image_raw"] = Image
        topics[f"/cameras/{cam}/camera_info"] = CameraInfo
    for name in (*spec.objects, "left_gripper", "right_gripper"):
        topics[f"/ground_truth/{name}/pose"] = PoseStamped
    for ctrl in ("left_arm_controller", "right_arm_controller", "left_gripper_controller", "right_gripper_controller"):
        topics[f"/{ctrl}/joint_trajectory"] = JointTrajectory
    extra = {"/instruction": String, "/execute_trajectory/goal": JointTrajectory}
    typestore = get_typestore(Stores.ROS2_KILTED)
    writer = Writer(bag_path, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    conns = {t: writer.add_connection(t, cls.__module__.split(".")[0] + "/msg/" + cls.__name__, typestore=typestore)
             for t, cls in {**topics, **extra}.items()}
    frames: list[tuple[float, dict[str, np.ndarray]]] = []
    latest: dict[str, np.ndarray] = {}
    state = {"reward": 0, "sheet_next": 0.0}
    duration = float(traj.times_s[-1])
    sheet_period = duration / 5.0
    try:
        with ros_context() as ctx:
            sim = AlohaSimNode(context=ctx, parameter_overrides=[
                Parameter("task", value=task), Parameter("seed", value=seed),
                Parameter("real_time_factor", value=real_time_factor),
                Parameter("camera_width", value=width), Parameter("camera_height", value=height)])
            sim.sim.reset(object_poses=episode.object_poses)  # the scene the expert planned for
            bridge = AlohaBridgeNode(context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True)])
            rec = Node("demo_recorder", context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True)])

            def now_ns() -> int:
                return rec.get_clock().now().nanoseconds

            def record(topic):
                def cb(msg):
                    writer.write(conns[topic], now_ns(), serialize_message(msg))
                    if topic == "/ground_truth/reward":
                        state["reward"] = msg.data
                    elif topic.endswith("image_raw"):
                        latest[topic.split("/")[2]] = image_to_numpy(msg).copy()
                return cb

            for topic, cls in topics.items():
                qos = RELIABLE_QOS if cls in (Int32, JointTrajectory) else SENSOR_QOS
                rec.create_subscription(cls, topic, record(topic), qos)
            client: ActionClient[Any, Any, Any] = ActionClient(rec, ExecuteTrajectory, "/execute_trajectory")
            with executor_with(ctx, sim, bridge, rec) as ex:
                if not spin_until(ex, lambda: bridge.ready and client.server_is_ready(), 30.0):
                    raise RuntimeError("demo: the bridge did not come up (no joint_states or action server)")
                goal = ExecuteTrajectory.Goal(trajectory=trajectory_to_msg(traj))
                writer.write(conns["/instruction"], now_ns(), serialize_message(String(data=episode.instruction)))
                writer.write(conns["/execute_trajectory/goal"], now_ns(), serialize_message(goal.trajectory))
                t_goal_s = now_ns() * 1e-9  # plan picture: expert time -> this run's sim time
                sent = client.send_goal_async(goal)
                handle = sent.result() if spin_until(ex, sent.done, 10.0) else None
                if handle is None or not handle.accepted:
                    raise RuntimeError("demo: goal not accepted")
                result_future = handle.get_result_async()
                t_wall = time.monotonic()

                def progress() -> bool:
                    t = now_ns() * 1e-9
                    if t >= state["sheet_next"] and len(latest) == len(CAMERAS):
                        frames.append((t, dict(latest)))
                        state["sheet_next"] = t + sheet_period
                    return result_future.done()

                if not spin_until(ex, progress, timeout_s):
                    raise RuntimeError(f"demo: the goal did not finish within {timeout_s} s")
                response = result_future.result()
                if response is None:
                    raise RuntimeError("demo: the goal finished without a result")
                result = response.result
                settle = now_ns() * 1e-9 + 0.5
                spin_until(ex, lambda: now_ns() * 1e-9 >= settle, 10.0)
                if latest:
                    frames.append((now_ns() * 1e-9, dict(latest)))
                print(f"bridge result: error_code {result.error_code} {result.error_string!r} "
                      f"({time.monotonic() - t_wall:.1f} s wall)")
    finally:
        writer.close()
    sheet = str(out_dir / f"{stem}.png")
    if frames:
        contact_sheet(frames, sheet)
    plan_png = _plan_picture(bag_path, out_dir / f"{stem}_plan.png", task, seed, episode, traj, t_goal_s, width, height)
    success = state["reward"] >= 4
    print(f"{'SUCCESS' if success else 'FAILURE'}: {task} seed {seed}, final reward {state['reward']}/4")
    print(f"bag: {bag_path}  contact sheet: {sheet}  plan picture: {plan_png}")
    return success


def _positions(msgs: list[tuple[float, Any]]) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([x[0] for x in msgs])
    p = np.array([(m.pose.position.x, m.pose.position.y, m.pose.position.z) for _, m in msgs])
    return t, p


def demo_plan_picture(bag: str | os.PathLike, out_png: str | os.PathLike, *, task: str, seed: int, instruction: str,
                      subtasks: Sequence, camera, camera_pose: tuple[np.ndarray, np.ndarray], waypoints: int = 10,
                      style: VizStyle = VizStyle()) -> Path:
    """Tile one overlay per sub-task (`subtasks`: data.annotation.Subtask in bag time) into a PNG.

    `camera` is cam_high's CameraModel at the recorded size, `camera_pose` its optical frame in world.
    """
    from plan_stack.data.annotation import KeyframeInput
    from plan_stack.data.bags import read_bag
    from plan_stack.embodiments.aloha.annotation import build_annotation
    from plan_stack.embodiments.aloha.model import ARMS
    from plan_stack.viz.bag import image_array, nearest, truth_plans
    from plan_stack.viz.overlay import draw_overlay, draw_text
    from plan_stack.viz.plan import VizError, check_plan
    from plan_stack.viz.render import write_png

    image_topic = f"/cameras/{camera.name}/image_raw"
    topics = {image_topic, *(f"/ground_truth/{arm}_gripper/pose" for arm in ARMS)}
    msgs = read_bag(bag, topics=topics)
    if any(not msgs.get(t) for t in topics):
        raise VizError(f"bag: {bag} lacks {sorted(t for t in topics if not msgs.get(t))}")
    times, first = _positions(msgs[f"/ground_truth/{ARMS[0]}_gripper/pose"])
    tcp = [first]
    for arm in ARMS[1:]:
        t_arm, p_arm = _positions(msgs[f"/ground_truth/{arm}_gripper/pose"])
        tcp.append(np.stack([np.interp(times, t_arm, p_arm[:, k]) for k in range(3)], axis=1))
    keyframes = [KeyframeInput(st.start_s, camera_pose, {}) for st in subtasks]
    annotation = build_annotation(task=task, seed=seed, instruction=instruction, subtasks=subtasks, camera=camera,
                                  times_s=times, tcp_world=np.stack(tcp, axis=1), keyframes=keyframes,
                                  waypoints=waypoints, success=True, reward=0)
    frames = msgs[image_topic]
    tiles = []
    for truth in truth_plans(annotation):
        img = nearest(frames, truth.stamp_s, 0.5)
        if img is None:
            continue
        tile = draw_overlay(image_array(img), check_plan(truth), style, text=False)
        rows = draw_text(tile, truth.subtask, style)
        draw_text(tile, f"t={truth.stamp_s:.1f}s", style, row=rows)
        tiles.append(tile)
    if not tiles:
        raise VizError(f"bag: no {image_topic} frames near the sub-task starts")
    return write_png(Path(out_png), np.concatenate(tiles, axis=1))


def _plan_picture(bag_path, png, task, seed, episode, traj, t_goal_s, width, height):
    """The run's plan picture (`demo_plan_picture`): each sub-task's future gripper paths on cam_high."""
    from plan_stack.data.annotation import Subtask
    from plan_stack.embodiments.aloha.model import camera_model, camera_pose
    from plan_stack.embodiments.aloha.sim import AlohaSim

    sim = AlohaSim(task)
    sim.reset(object_poses=episode.object_poses)
    at = lambda t_s: t_goal_s + float(traj.times_s[min(int(round(t_s / episode.dt_s)), len(traj.times_s) - 1)])
    subtasks = [Subtask(st.text, at(st.start_s), at(st.end_s)) for st in episode.subtasks]
    return demo_plan_picture(bag_path, png, task=task, seed=seed, instruction=episode.instruction, subtasks=subtasks,
                             camera=camera_model(sim.model, "cam_high", width, height),
                             camera_pose=camera_pose(sim.model, sim.data, "cam_high"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan_stack.eval.episodes.expert_demo",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory (bag + PNG)")
    parser.add_argument("--task", default="transfer_cube", choices=["transfer_cube", "insertion"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real-time-factor", type=float, default=1.0, help="0 = as fast as possible")
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    args = parser.parse_args(argv)
    try:
        ok = run_demo(args.out, args.task, args.seed, args.real_time_factor, args.width, args.height)
    except (RuntimeError, FileExistsError, ValueError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
