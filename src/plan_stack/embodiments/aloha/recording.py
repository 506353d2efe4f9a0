"""Record scripted demonstrations as rosbag2 (MCAP) + annotation JSON, without ROS.

Written with the shared `data.bags.BagWriter` (rosbags, Kilted
type store). Topics (absolute names, as a recorder on the simulator's graph
would see them):

| topic | type | rate |
|---|---|---|
| /joint_states | sensor_msgs/msg/JointState (14 joints, joint units) | control rate (50 Hz) |
| /action | sensor_msgs/msg/JointState (14 commanded positions, stack units: grippers 0..1) | control rate |
| /expert_action | same: the expert's own command (without the push), recovery recordings only | control rate |
| /cameras/<cam>/image_raw | sensor_msgs/msg/Image rgb8 | camera rate |
| /cameras/<cam>/camera_info | sensor_msgs/msg/CameraInfo | camera rate |
| /instruction | std_msgs/msg/String | once, at t=0 |
| /subtask | std_msgs/msg/String | at each sub-task start |
| /ground_truth/<object>/pose | geometry_msgs/msg/PoseStamped (world) | control rate |
| /ground_truth/<arm>_gripper/pose | geometry_msgs/msg/PoseStamped (world, tool centre) | control rate |
| /ground_truth/reward | std_msgs/msg/Int32 | control rate |

Bag time is sim time (episode start = 0 s).
"""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from plan_stack.data.annotation import KeyframeInput, box_from_mask, write_annotation
from plan_stack.data.bags import BagWriter
from plan_stack.data.recording import RecordOptions, every_steps, new_bag_path
from plan_stack.embodiments.aloha.annotation import build_annotation
from plan_stack.embodiments.aloha.model import ARMS, CAMERAS, JOINT_NAMES, stack_to_joint

__all__ = ["RecordOptions", "AlohaRecordOptions", "BagWriter", "record_episode", "TOPICS"]


@dataclasses.dataclass(frozen=True)
class AlohaRecordOptions(RecordOptions):
    """The arm recorders' options plus `perturbation`: std (rad) of the recovery pushes injected into the
    expert's commands (`expert.recovery_pulses`; 0 = the plain demonstration)."""

    perturbation: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not math.isfinite(self.perturbation) or self.perturbation < 0:
            raise ValueError(f"perturbation: a finite std >= 0 in rad, got {self.perturbation}")


def topics_for(objects, cameras=tuple(CAMERAS), perturbed: bool = False) -> dict[str, str]:
    """Every topic a recorded episode contains -> its message type."""
    t = {"/joint_states": "sensor_msgs/msg/JointState", "/action": "sensor_msgs/msg/JointState",
         "/instruction": "std_msgs/msg/String", "/subtask": "std_msgs/msg/String",
         "/ground_truth/reward": "std_msgs/msg/Int32"}
    if perturbed:
        t["/expert_action"] = "sensor_msgs/msg/JointState"
    for cam in cameras:
        t[f"/cameras/{cam}/image_raw"] = "sensor_msgs/msg/Image"
        t[f"/cameras/{cam}/camera_info"] = "sensor_msgs/msg/CameraInfo"
    for name in (*objects, *(f"{a}_gripper" for a in ARMS)):
        t[f"/ground_truth/{name}/pose"] = "geometry_msgs/msg/PoseStamped"
    return t


TOPICS = topics_for(("box",))  # transfer_cube; insertion has peg and socket instead of box


def record_episode(task: str, seed: int, out_dir: str | os.PathLike, options: RecordOptions = RecordOptions(),
                   sim=None) -> dict:
    """Plan the scripted expert for `seed`, replay it with rendering, write `<task>_<seed>.mcap` (a rosbag2
    folder) and `<task>_<seed>.json`. Returns the annotation dict.

    With `options.perturbation` (an `AlohaRecordOptions`), the replayed commands carry the expert's
    recovery pushes; each keyframe's annotated path is then the one the arm takes from there with the
    pushes that have begun by then and none of the later ones (a physics-only replay per push onset),
    so a label never predicts a push it could not see.
    """
    from plan_stack.embodiments.aloha.expert import plan_episode, pushed, recovery_pulses
    from plan_stack.embodiments.aloha.sim import AlohaSim, CameraRenderer

    stem = f"{task}_{seed:04d}"
    bag_path = new_bag_path(out_dir, stem)
    episode = plan_episode(task, seed, dt_s=options.dt_s)
    perturbation = getattr(options, "perturbation", 0.0)
    pulses = recovery_pulses(episode, perturbation) if perturbation else []
    stack_commands = pushed(episode, pulses).commands
    sim = AlohaSim(task, offscreen_size=(options.width, options.height)) if sim is None else sim
    renderer = CameraRenderer(sim, options.width, options.height)
    writer = BagWriter(bag_path, topics_for(sim.task.objects, perturbed=bool(pulses)))
    object_geoms = {name: np.flatnonzero(sim.model.geom_bodyid == sim.model.body(name).id) for name in sim.task.objects}
    cam_every = every_steps(options.dt_s, rate_hz=options.camera_rate_hz)
    key_every = every_steps(options.dt_s, period_s=options.keyframe_period_s)
    times, tcp, keyframes = [], [], []
    subtasks = list(episode.subtasks)
    try:
        sim.reset(object_poses=episode.object_poses)

        def capture(k: int, t: float) -> None:
            times.append(t)
            tcp.append(sim.tcp_positions())
            writer.write("/joint_states", t, writer.joint_state(t, JOINT_NAMES, sim.joint_positions(), sim.joint_velocities()))
            for name, pose in sim.object_poses().items():
                writer.write(f"/ground_truth/{name}/pose", t, writer.pose(t, "world", pose))
            for arm, pose in sim.tcp_poses().items():
                writer.write(f"/ground_truth/{arm}_gripper/pose", t, writer.pose(t, "world", pose))
            writer.write("/ground_truth/reward", t, writer.int32(sim.reward()))
            while subtasks and subtasks[0].start_s <= t + 1e-9:
                writer.write("/subtask", t, writer.string(subtasks.pop(0).text))
            if k % cam_every == 0:
                for cam in CAMERAS:
                    writer.write_camera(cam, t, f"{cam}_optical_frame", renderer.render(cam), renderer.models[cam])
            if k % key_every == 0:
                seg = renderer.segmentation("cam_high")
                boxes = {n: box_from_mask(np.isin(seg, g)) for n, g in object_geoms.items()}
                keyframes.append(KeyframeInput(t, renderer.pose("cam_high"), boxes))

        writer.write("/instruction", 0.0, writer.string(episode.instruction))
        capture(0, 0.0)
        substeps = int(round(options.dt_s / sim.timestep_s))
        commands = stack_to_joint(stack_commands)
        for k in range(len(commands)):
            t_cmd = sim.time_s
            writer.write("/action", t_cmd, writer.joint_state(t_cmd, JOINT_NAMES, stack_commands[k]))
            if pulses:  # what the expert asks for from here: the label a policy learns to recover with
                writer.write("/expert_action", t_cmd, writer.joint_state(t_cmd, JOINT_NAMES, episode.commands[k]))
            sim.set_command(commands[k])
            sim.step(substeps)
            capture(k + 1, sim.time_s)
        reward = sim.reward()
        label_tcp = _labels_without_later_pushes(sim, episode, pulses, [kf.t_s for kf in keyframes], np.array(tcp))
    finally:
        writer.close()
        renderer.close()
    annotation = build_annotation(
        task=task, seed=seed, instruction=episode.instruction, subtasks=episode.subtasks,
        camera=renderer.models["cam_high"], times_s=np.array(times), tcp_world=np.array(tcp), keyframes=keyframes,
        waypoints=options.waypoints, success=reward >= 4, reward=reward, bag=bag_path.name,
        label_tcp_world=label_tcp)
    if pulses:
        annotation["perturbation"] = {"std_rad": perturbation, "pushes": [
            {"arm": p.arm, "onset_s": round(p.onset_s, 4),
             "peak_rad": [round(float(v), 4) for v in p.offsets[np.argmax(np.abs(p.offsets).sum(axis=1))]]}
            for p in pulses]}
    write_annotation(str(bag_path.parent / f"{stem}.json"), annotation)
    return annotation


def _labels_without_later_pushes(sim, episode, pulses, keyframe_times, tcp: np.ndarray) -> list[np.ndarray] | None:
    """Per keyframe, the tool-centre track [T, 2, 3] under the pushes begun by its time (None: no pushes).

    Physics is deterministic, so a replay with fewer pushes follows the recorded run up to the first
    push it leaves out; no rendering is needed.
    """
    from plan_stack.embodiments.aloha.expert import pushed, replay

    if not pulses:
        return None
    tracks: dict[int, np.ndarray] = {len(pulses): tcp}
    labels = []
    for t_kf in keyframe_times:
        begun = sum(p.onset_s <= t_kf + 1e-9 for p in pulses)
        if begun not in tracks:
            track = [tcp[0]]  # the same reset start as the recording's
            replay(pushed(episode, pulses[:begun]), sim, on_step=lambda k, s, track=track: track.append(s.tcp_positions()))
            tracks[begun] = np.array(track)
        labels.append(tracks[begun])
    return labels


def recorder(task: str, out_dir: str | os.PathLike, width: int, height: int):
    """`(seed, options) -> annotation` for `plan-stack record-demos` (`embodiments.base.RecorderFactory`)."""
    from plan_stack.embodiments.aloha.sim import AlohaSim

    sim = AlohaSim(task, offscreen_size=(width, height))  # one simulator for every episode
    return lambda seed, options: record_episode(task, seed, out_dir, options, sim=sim)
