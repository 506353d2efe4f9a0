"""Record scripted Franka pick-and-place demonstrations as rosbag2 (MCAP) + annotation JSON, without ROS.

Same layout and annotation schema as the ALOHA recorder (docs/aloha.md), for
one arm: the bag is written with the shared `data.bags.BagWriter`
(rosbags, Kilted type store), options are the shared `RecordOptions`, and
the annotation uses the shared `data.annotation` pieces (arc-length
resampling of the future tool-centre path until the end of the current
sub-task, projection into the external camera, object boxes from
segmentation); its `arms` map has the single key `single` (a single-arm
primitive has an empty `arm`).

| topic | type | rate |
|---|---|---|
| /joint_states | sensor_msgs/msg/JointState (7 arm joints rad + 2 fingers m) | control rate (50 Hz) |
| /action | sensor_msgs/msg/JointState (8 stack channels: 7 joints + gripper width) | control rate |
| /cameras/<external,wrist>/image_raw, camera_info | sensor_msgs Image rgb8 / CameraInfo | camera rate |
| /instruction, /subtask | std_msgs/msg/String | once / at each sub-task start |
| /ground_truth/cube/pose, /ground_truth/tcp/pose | geometry_msgs/msg/PoseStamped (world) | control rate |
| /ground_truth/success | std_msgs/msg/Bool | control rate |

Bag time is sim time (episode start = 0 s).

With `FrankaRecordOptions.miss_m` (`record-demos --miss M`) the episode is a
recovery demonstration: the first grasp closes beside the cube, the expert
reopens, rises and picks the cube; keyframes are annotated from the missed
grasp on (the annotation's `missed_grasp` says where), so every label is the
path from a state the learned stack reaches when it misses.
"""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from plan_stack.data.annotation import (
    KeyframeInput,
    Subtask,
    box_from_mask,
    camera_annotation,
    path_annotation,
    round_or_none,
    subtask_at,
    subtasks_annotation,
    write_annotation,
)
from plan_stack.data.bags import BagWriter
from plan_stack.data.recording import RecordOptions, every_steps, new_bag_path
from plan_stack.embodiments.franka.expert import ExpertConfig, missed_grasp_offset, plan_pick_place
from plan_stack.embodiments.franka.model import CAMERAS, DEFAULT_JOINT_NAMES, MAX_WIDTH_M, READY_POSE
from plan_stack.trajectory.core import TrajectoryFollower

__all__ = ["FORMAT", "INSTRUCTION", "FrankaRecordOptions", "RecordOptions", "Subtask", "record_episode", "TOPICS"]

FORMAT = "plan_stack.franka_annotation/1"
INSTRUCTION = "pick up the red cube and place it on the green square"
STACK_NAMES = (*DEFAULT_JOINT_NAMES, "fr3_gripper")
FINGERS = ("fr3_finger_joint1", "fr3_finger_joint2")
TOPICS = {"/joint_states": "sensor_msgs/msg/JointState", "/action": "sensor_msgs/msg/JointState",
          "/instruction": "std_msgs/msg/String", "/subtask": "std_msgs/msg/String",
          "/ground_truth/cube/pose": "geometry_msgs/msg/PoseStamped",
          "/ground_truth/tcp/pose": "geometry_msgs/msg/PoseStamped", "/ground_truth/success": "std_msgs/msg/Bool",
          **{f"/cameras/{c}/image_raw": "sensor_msgs/msg/Image" for c in CAMERAS},
          **{f"/cameras/{c}/camera_info": "sensor_msgs/msg/CameraInfo" for c in CAMERAS}}


@dataclasses.dataclass(frozen=True)
class FrankaRecordOptions(RecordOptions):
    """The arm recorders' options plus `miss_m`: recovery demonstrations whose first grasp closes the fingers
    this far (m, up to 1.5 x) beside the cube (`expert.missed_grasp_offset`; 0 = the plain demonstration)."""

    miss_m: float = 0.0
    #: record only the pick sub-task (until the fingers have closed): the approach images, where only the
    #: image says where the cube is; success = the cube is held between the fingers
    pick_only: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not math.isfinite(self.miss_m) or self.miss_m < 0:
            raise ValueError(f"miss_m: a finite distance >= 0 in m, got {self.miss_m}")


def _subtasks(times_s: np.ndarray, labels: tuple[str, ...], end_s: float) -> list[Subtask]:
    """Sub-tasks from the expert's phases: pick (until grasped), transfer (until released), retreat."""
    t_grasp = float(times_s[labels.index("grasp")])
    t_release = float(times_s[labels.index("release")])
    return [Subtask("pick up the red cube", 0.0, t_grasp), Subtask("place the cube on the green square", t_grasp,
                                                                    t_release),
            Subtask("release the cube and move away", t_release, end_s)]


def build_annotation(*, seed: int, subtasks: list[Subtask], camera, times_s: np.ndarray, tcp_world: np.ndarray,
                     keyframes: list[KeyframeInput], waypoints: int, success: bool, bag: str) -> dict:
    """The ALOHA annotation schema for one arm (`arms: {"single": ...}`); `tcp_world` is [T, 3]."""
    frames = []
    for kf in keyframes:
        st = subtask_at(subtasks, kf.t_s)
        frames.append({
            "t_s": round_or_none(kf.t_s, 4), "subtask": st.text,
            "arms": {"single": path_annotation(times_s, tcp_world, kf, st.end_s, waypoints, camera)},
            "boxes": [{"object": n, "bbox": b} for n, b in kf.boxes.items() if b is not None],
        })
    return {
        "format": FORMAT, "task": "pick_place", "seed": int(seed), "bag": bag, "instruction": INSTRUCTION,
        "success": bool(success), "reward": int(success),
        "camera": camera_annotation(camera, f"{camera.name}_camera_optical_frame", keyframes[0].camera_pose),
        "waypoints": int(waypoints), "subtasks": subtasks_annotation(subtasks), "keyframes": frames,
    }


def record_episode(seed: int, out_dir: str | os.PathLike, options: RecordOptions = RecordOptions(),
                   sim=None, expert: ExpertConfig = ExpertConfig()) -> dict:
    """Plan the scripted pick-and-place for `seed`, execute it with rendering, write `pick_place_<seed>/`
    (rosbag2 folder with one .mcap) and `pick_place_<seed>.json`. Returns the annotation dict."""
    from plan_stack.embodiments.franka.sim import Cameras, FrankaSim

    stem = f"pick_place_{seed:04d}"
    bag_path = new_bag_path(out_dir, stem)
    sim = FrankaSim(offscreen_size=(options.width, options.height)) if sim is None else sim
    sim.reset(seed=seed)
    miss_m = getattr(options, "miss_m", 0.0)
    offset = missed_grasp_offset(sim, expert, seed, miss_m) if miss_m else None
    traj, labels = plan_pick_place(sim, expert, STACK_NAMES, miss_offset_xy=offset)
    # a recovery demonstration is annotated from the moment the fingers sit beside the cube: before it the
    # expert heads for the wrong place on purpose, which no plan should learn
    annotate_from_s = float(traj.times_s[labels.index("miss_descend")]) if offset is not None else 0.0
    end_s = float(traj.times_s[-1]) + expert.settle_s
    subtasks = _subtasks(traj.times_s, tuple(labels), end_s)
    pick_only = getattr(options, "pick_only", False)
    if pick_only:  # stop when the fingers have closed; the keyframe at that instant would start the place
        subtasks, end_s = subtasks[:1], subtasks[0].end_s
    follower = TrajectoryFollower(STACK_NAMES, np.concatenate([READY_POSE, [MAX_WIDTH_M]]))
    follower.set_trajectory(traj, sim.time_s)
    cams = Cameras(sim, options.width, options.height)
    writer = BagWriter(bag_path, TOPICS)
    Bool = writer.ts.types["std_msgs/msg/Bool"]
    cube_geom = sim.model.geom("cube").id
    cam_every = every_steps(options.dt_s, rate_hz=options.camera_rate_hz)
    key_every = every_steps(options.dt_s, period_s=options.keyframe_period_s)
    substeps = max(1, int(round(options.dt_s / sim.timestep_s)))
    times, tcp, keyframes, pending = [], [], [], list(subtasks)
    goal = MAX_WIDTH_M
    try:
        writer.write("/instruction", 0.0, writer.string(INSTRUCTION))
        k = 0
        while True:
            t = sim.time_s
            times.append(t)
            tcp.append(sim.tcp_pose()[:3])
            half = sim.gripper_width() / 2
            writer.write("/joint_states", t, writer.joint_state(t, (*DEFAULT_JOINT_NAMES, *FINGERS),
                                                                [*sim.joint_positions(), half, half]))
            writer.write("/ground_truth/cube/pose", t, writer.pose(t, "world", sim.cube_pose()))
            writer.write("/ground_truth/tcp/pose", t, writer.pose(t, "world", sim.tcp_pose()))
            writer.write("/ground_truth/success", t, Bool(data=sim.success()))
            while pending and pending[0].start_s <= t + 1e-9:
                writer.write("/subtask", t, writer.string(pending.pop(0).text))
            if k % cam_every == 0:
                for cam in cams.cameras:
                    writer.write_camera(cam, t, f"{cam}_camera_optical_frame", cams.render(cam), cams.models[cam])
            if k % key_every == 0 and t >= annotate_from_s - 1e-9 and not (pick_only and t >= end_s - 1e-9):
                box = box_from_mask(cams.segmentation("external") == cube_geom)
                keyframes.append(KeyframeInput(t, cams.pose("external"), {"cube": box}))
            if t >= end_s - 1e-9:
                break
            ref = follower.sample(t)
            writer.write("/action", t, writer.joint_state(t, STACK_NAMES, ref.positions))
            sim.set_command(ref.positions[:7])
            if abs(ref.positions[7] - goal) > 0.002:
                goal = float(ref.positions[7])
                sim.move_gripper(goal, max(abs(float(ref.velocities[7])), 0.01))
            sim.step(substeps)
            k += 1
        # pick only: the cube held, i.e. the fingers stopped on it, wider than the squeeze command
        success = sim.gripper_width() > expert.closed_width_m + 0.005 if pick_only else sim.success()
    finally:
        writer.close()
        cams.close()
    annotation = build_annotation(seed=seed, subtasks=subtasks, camera=cams.models["external"],
                                  times_s=np.array(times), tcp_world=np.array(tcp), keyframes=keyframes,
                                  waypoints=options.waypoints, success=success, bag=bag_path.name)
    if pick_only:
        annotation["pick_only"] = True
    if offset is not None:
        annotation["missed_grasp"] = {"miss_m": miss_m, "offset_xy_m": [round(float(v), 4) for v in offset],
                                      "annotated_from_s": round(annotate_from_s, 4)}
    write_annotation(str(bag_path.parent / f"{stem}.json"), annotation)
    return annotation


def recorder(task: str, out_dir: str | os.PathLike, width: int, height: int):
    """`(seed, options) -> annotation` for `plan-stack record-demos` (`embodiments.base.RecorderFactory`)."""
    from plan_stack.embodiments.franka.sim import FrankaSim

    sim = FrankaSim(offscreen_size=(width, height))  # one simulator for every episode (one task: pick_place)
    return lambda seed, options: record_episode(seed, out_dir, options, sim=sim)
