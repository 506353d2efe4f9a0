"""Record scripted driving demonstrations as rosbag2 (MCAP) + annotation JSON, without ROS.

Written with the shared `data.bags.BagWriter` (rosbags, Kilted type store);
bag time is sim time (episode start = 0 s).

| topic | type | rate |
|---|---|---|
| /odom | nav_msgs/msg/Odometry (rear axle in `odom`, body-frame twist) | control rate (20 Hz) |
| /cameras/front/image_raw, camera_info | sensor_msgs Image rgb8 / CameraInfo | camera rate |
| /instruction | std_msgs/msg/String | once |
| /ground_truth/obstacles | geometry_msgs/msg/PoseArray (odom) | once |

Annotation (format `plan_stack.drive_annotation/1`), per keyframe: the
future ego waypoints the expert actually drove, `waypoints` points uniform in
time over `horizon_s` (t_i = i·horizon/P, the `drive_3d` convention), in the
ego frame at the keyframe (x forward, y left, z = 0 on the road), their
projection into the front camera (`uv`, None when outside the image or
behind the camera), and the boxes of the obstacles in view.

Recovery demonstrations (`perturbation` > 0): steering pushes
(`recovery_pushes`) are added to the follower's command, so the car leaves
its lane centre and its heading turns; the expert replans from wherever the
car is and brings it back. A keyframe's waypoints are then the path the
expert drives on from that state *without* pushes (`expert_path`, a rollout
of the same expert, follower and vehicle model): the driven path would hold
the pushes still to come, which no image shows. Without pushes both are the
same path (a test checks it).

Displacement demonstrations (`displacement` > 0): every few seconds the
car's pose jumps sideways and turns (`pose_jumps`, `DriveSim.displace`),
at a replanning instant, and the expert drives back from there; keyframes
are labelled by `expert_path` as above. The jumps reach the off-centre,
heading-for-the-edge states where the learned planner's drives fail, which
pushes the follower fights rarely do.

On-policy demonstrations (`policy` given, DAgger): the learned planner drives
(`drive.policy`: image -> plan -> drive_bridge -> follower, with the
planner's latency), the expert only labels: every keyframe's waypoints are the
expert's path from the state the planner's driving reached (`expert_path`).
The episode ends where the car leaves the road or collides; its keyframes stay
valid labels whatever happened to the car (`expert_labels` in the annotation).
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import math
import os
from typing import Any

import numpy as np

from plan_stack.camera import project_points, world_to_camera
from plan_stack.data.annotation import box_from_mask, write_annotation
from plan_stack.data.bags import BagWriter
from plan_stack.data.recording import check_image_size, every_steps, new_bag_path
from plan_stack.embodiments.drive.bridge import DriveBridge, DriveBridgeConfig, EgoState
from plan_stack.embodiments.drive.expert import DriverConfig, ScriptedDriver, follow_waypoints
from plan_stack.embodiments.drive.follower import FollowerConfig, PurePursuit
from plan_stack.embodiments.drive.policy import PlanDelay, PlannerDriver
from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, FrontCamera
from plan_stack.embodiments.drive.trajectory import DriveTrajectoryConfig
from plan_stack.embodiments.drive.vehicle import VehicleParams, step

__all__ = ["FORMAT", "INSTRUCTION", "DriveRecordOptions", "record_episode", "TOPICS", "ego_waypoints",
           "SteeringPush", "recovery_pushes", "push_offset", "expert_path", "PoseJump", "pose_jumps"]

FORMAT = "plan_stack.drive_annotation/1"
INSTRUCTION = "drive along the road, keep in lane and avoid the obstacles"
TOPICS = {"/odom": "nav_msgs/msg/Odometry", "/cameras/front/image_raw": "sensor_msgs/msg/Image",
          "/cameras/front/camera_info": "sensor_msgs/msg/CameraInfo", "/instruction": "std_msgs/msg/String",
          "/ground_truth/obstacles": "geometry_msgs/msg/PoseArray"}


@dataclasses.dataclass(frozen=True)
class DriveRecordOptions:
    width: int = 320
    height: int = 240
    duration_s: float = 30.0
    control_rate_hz: float = 20.0
    camera_rate_hz: float = 5.0
    keyframe_period_s: float = 1.0
    waypoints: int = 8
    horizon_s: float = 4.0
    #: std (rad) of the steering pushes of a recovery demonstration (0: none)
    perturbation: float = 0.0
    #: on-policy demonstrations: the planner model directory that drives (empty: the expert drives)
    policy_model: str = ""
    #: its decoder, and the delay from an image to its plan reaching the bridge (the graph's planner latency);
    #: with policy_latency_max_s above it, each plan's delay is drawn from [policy_latency_s, policy_latency_max_s]
    policy_decoder: str = "vflash"
    policy_latency_s: float = 0.3
    policy_latency_max_s: float = 0.0
    #: displacement demonstrations: the largest sideways jump (m) and turn (rad) of the car's pose, drawn
    #: uniformly every few seconds (`pose_jumps`; (0, 0): none)
    displacement: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        check_image_size(self.width, self.height)
        if min(self.duration_s, self.control_rate_hz, self.camera_rate_hz, self.keyframe_period_s,
               self.horizon_s) <= 0:
            raise ValueError("duration_s/rates/keyframe_period_s/horizon_s: must be positive")
        if self.waypoints < 1:
            raise ValueError(f"waypoints: at least 1, got {self.waypoints}")
        if not math.isfinite(self.perturbation) or self.perturbation < 0:
            raise ValueError(f"perturbation: a finite std >= 0 in rad, got {self.perturbation}")
        if not math.isfinite(self.policy_latency_s) or self.policy_latency_s < 0:
            raise ValueError(f"policy_latency_s: a finite delay >= 0 s, got {self.policy_latency_s}")
        if not math.isfinite(self.policy_latency_max_s) or (
                self.policy_latency_max_s and self.policy_latency_max_s < self.policy_latency_s):
            raise ValueError(f"policy_latency_max_s: 0 (a fixed delay) or a finite delay >= policy_latency_s "
                             f"({self.policy_latency_s} s), got {self.policy_latency_max_s}")
        if len(self.displacement) != 2 or not all(math.isfinite(v) and v >= 0 for v in self.displacement):
            raise ValueError(f"displacement: (metres, radians), finite and >= 0, got {self.displacement}")
        if self.policy_model and any(self.displacement):
            raise ValueError("displacement and policy_model: jumps are for the expert's driving; with a policy "
                             "driving, its own errors move the car")
        if self.policy_model and self.perturbation:
            raise ValueError("perturbation and policy_model: pushes are for the expert's driving; with a policy "
                             "driving, its own errors move the car")


#: recovery pushes: the first starts after PUSH_FIRST_S (the car is up to speed), then one every PUSH_GAP_S
#: (uniform [min, max], onset to onset), each a half-sine steering offset lasting PUSH_HOLD_S (uniform).
#: Why: through the graph the car drifted 0.3-1 m off its lane centre before it failed
#: (docs/decisions/0001-driving-on-policy-rounds.md). The follower fights each push, so it takes a std near
#: 0.1 rad to reach that: measured against the same seeds driven unpushed (3-6 seeds each), std 0.04 moved the
#: car at most 0.1-0.4 m, 0.08 at most 0.2-0.75 m and 0.12 at most 0.4-1.2 m (heading up to 0.05-0.2 rad).
PUSH_FIRST_S = 3.0
PUSH_GAP_S = (4.0, 7.0)
PUSH_HOLD_S = (0.6, 1.4)


@dataclasses.dataclass(frozen=True)
class SteeringPush:
    onset_s: float
    hold_s: float
    offset_rad: float  # the half-sine's peak, added to the front-wheel angle command


def recovery_pushes(seed: int, duration_s: float, std_rad: float) -> list[SteeringPush]:
    """The seeded steering pushes of a recovery demonstration of `duration_s` (DART-style noise injected
    into the expert's driving; the expert is not told and recovers by replanning)."""
    if not math.isfinite(std_rad) or std_rad <= 0:
        raise ValueError(f"std_rad: a positive finite std in rad, got {std_rad}")
    rng = np.random.default_rng([seed, 0xD21E])
    pushes, onset = [], PUSH_FIRST_S
    while onset < duration_s:
        pushes.append(SteeringPush(onset, float(rng.uniform(*PUSH_HOLD_S)), float(rng.normal(0.0, std_rad))))
        onset += float(rng.uniform(*PUSH_GAP_S))
    return pushes


#: pose jumps of a displacement demonstration: the first after PUSH_FIRST_S, then one every JUMP_GAP_S
#: (uniform [min, max]), each at a replanning instant (the expert plans from the moved pose at once).
#: Why: the planner's closed-loop failures start off the lane centre with the car heading for the road's edge
#: (3-12 deg; docs/decisions/0001-driving-on-policy-rounds.md), and at such keyframes its plans went straight on
#: or the wrong way (the lateral offset it planned 8 m ahead was 0.02-0.21 of the expert's in the last 5 s before
#: 12 failures of round 4's on-policy drives); steering pushes rarely reach these states because the follower
#: fights them.
JUMP_GAP_S = (2.0, 4.0)
#: no jump with an obstacle nearer ahead than this: the expert needs about a lane change's length (25 m) to
#: pass one from an unexpected pose (with no such rule 4 of 20 displaced drives collided)
JUMP_CLEAR_AHEAD_M = 25.0


@dataclasses.dataclass(frozen=True)
class PoseJump:
    t_s: float
    dy_m: float
    dyaw_rad: float


def pose_jumps(seed: int, duration_s: float, max_dy_m: float, max_dyaw_rad: float,
               period_s: float) -> list[PoseJump]:
    """The seeded pose jumps of a displacement demonstration: instants on the `period_s` grid, offsets
    uniform in [-max, max] (the simulator refuses a jump off the road or into an obstacle: `DriveSim.displace`)."""
    if not (math.isfinite(max_dy_m) and math.isfinite(max_dyaw_rad)) or min(max_dy_m, max_dyaw_rad) < 0 or not (
            max_dy_m or max_dyaw_rad):
        raise ValueError(f"pose jumps: finite maxima >= 0, not both 0; got {max_dy_m} m, {max_dyaw_rad} rad")
    rng = np.random.default_rng([seed, 0x1E4F])
    out, t = [], PUSH_FIRST_S
    while t < duration_s:
        t = period_s * math.ceil(t / period_s - 1e-9)
        if t >= duration_s:
            break
        out.append(PoseJump(t, float(rng.uniform(-max_dy_m, max_dy_m)),
                            float(rng.uniform(-max_dyaw_rad, max_dyaw_rad))))
        t += float(rng.uniform(*JUMP_GAP_S))
    return out


def push_offset(pushes: list[SteeringPush], t_s: float) -> float:
    """The steering offset (rad) the pushes add at `t_s`."""
    return sum(p.offset_rad * math.sin(math.pi * (t_s - p.onset_s) / p.hold_s)
               for p in pushes if p.onset_s <= t_s < p.onset_s + p.hold_s)


def expert_path(sim: DriveSim, expert: ScriptedDriver, follower: PurePursuit, limits: DriveTrajectoryConfig,
                step_index: int, plan_every: int, horizon_s: float,
                replan_now: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Times [T] and poses [T, 3] (x, y, yaw) of the expert driving on from the simulator's present state for
    `horizon_s` (and one step more) with no push: copies of the expert, follower and vehicle state, stepped
    by the vehicle model exactly as the recording loop steps them (replanning every `plan_every` steps,
    counted from `step_index`, the loop's present step, already planned; `replan_now`: the expert plans
    first, as the follower holds someone else's trajectory). Obstacles are ignored: a label is a path, and
    the recording ends at a collision anyway."""
    state, expert, follower = copy.deepcopy(sim.state), copy.deepcopy(expert), copy.deepcopy(follower)
    t, dt, k = sim.time_s, sim.timestep_s, step_index
    if replan_now:
        follow_waypoints(follower, expert.plan(state.x, state.y, state.yaw, sim.obstacles), state, sim.vehicle,
                         limits, t)
    times, poses = [t], [(state.x, state.y, state.yaw)]
    while t < sim.time_s + horizon_s + dt:
        cmd = follower.command(state, t)
        step(state, sim.vehicle, cmd.accel_mps2, cmd.steer_rad, dt)
        t += dt
        k += 1
        if k % plan_every == 0:
            follow_waypoints(follower, expert.plan(state.x, state.y, state.yaw, sim.obstacles), state, sim.vehicle,
                             limits, t)
        times.append(t)
        poses.append((state.x, state.y, state.yaw))
    out = np.array(poses)
    out[:, 2] = np.unwrap(out[:, 2])
    return np.array(times), out


def ego_waypoints(times_s: np.ndarray, poses: np.ndarray, t_s: float, count: int, horizon_s: float) -> np.ndarray:
    """[count, 3] future ego positions at t_s + i·horizon/count (i = 1..count) in the ego frame at `t_s`.

    `poses` is [T, 3] (x, y, yaw) at `times_s`; positions are interpolated.
    """
    tq = t_s + np.arange(1, count + 1) * horizon_s / count
    x, y = np.interp(tq, times_s, poses[:, 0]), np.interp(tq, times_s, poses[:, 1])
    x0, y0, yaw0 = (np.interp(t_s, times_s, poses[:, k]) for k in range(3))
    c, s = math.cos(yaw0), math.sin(yaw0)
    dx, dy = x - x0, y - y0
    return np.stack([c * dx + s * dy, -s * dx + c * dy, np.zeros(count)], axis=1)


def _r(x, nd=4):
    return None if x is None or not math.isfinite(float(x)) else round(float(x), nd)


def record_episode(seed: int, out_dir: str | os.PathLike, options: DriveRecordOptions = DriveRecordOptions(),
                   scene: DriveSceneConfig | None = None, vehicle: VehicleParams | None = None,
                   driver: DriverConfig | None = None, policy: PlannerDriver | None = None) -> dict:
    """Drive the scripted expert for `options.duration_s` (+ the annotation horizon), write `drive_<seed>/`
    (rosbag2 folder) and `drive_<seed>.json`. Returns the annotation dict. With `options.perturbation`,
    a recovery demonstration: pushes added to the steering, keyframes labelled by `expert_path`. With
    `policy`, an on-policy one: the policy drives (through `DriveBridge`, its plans `policy_latency_s` late)
    until `duration_s`, the road's edge or a collision; keyframes labelled by `expert_path`."""
    if options.policy_model and policy is None:
        raise ValueError(f"policy_model {options.policy_model!r}: pass its PlannerDriver as `policy` (the "
                         "recorder() entry point loads it)")
    scene, vehicle, driver = scene or DriveSceneConfig(), vehicle or VehicleParams(), driver or DriverConfig()
    stem = f"drive_{seed:04d}"
    bag_path = new_bag_path(out_dir, stem)
    sim = DriveSim(scene, vehicle, seed=seed, offscreen_size=(options.width, options.height))
    camera = FrontCamera(sim, options.width, options.height)
    expert, follower = ScriptedDriver(scene, driver, vehicle), PurePursuit(vehicle, FollowerConfig())
    limits = DriveTrajectoryConfig(cruise_speed_mps=driver.cruise_speed_mps)
    writer = BagWriter(bag_path, TOPICS)
    T = writer.ts.types
    control_every = every_steps(sim.timestep_s, rate_hz=options.control_rate_hz)
    cam_every = every_steps(sim.timestep_s, rate_hz=options.camera_rate_hz)
    key_every = every_steps(sim.timestep_s, period_s=options.keyframe_period_s)
    plan_every = every_steps(sim.timestep_s, period_s=driver.replan_s)
    obstacle_geoms = {f"obstacle_{i}": sim.model.geom(f"obstacle_{i}").id for i in range(len(sim.obstacles))}
    on_policy = policy is not None
    # drive on so the last keyframe has a full future (on policy the labels are rollouts of their own)
    end_s = options.duration_s + (0.0 if on_policy else options.horizon_s)
    pushes = recovery_pushes(seed, options.duration_s, options.perturbation) if options.perturbation else []
    displaced = any(options.displacement)
    jumps = collections.deque(pose_jumps(seed, options.duration_s, *options.displacement, driver.replan_s)
                              if displaced else [])
    jumped: list[dict[str, Any]] = []
    # on policy or displaced, every keyframe is the expert's label from where the car is: stop at the road's edge
    stop_off_road = on_policy or displaced
    if policy is not None:
        policy.reset()
        bridge = DriveBridge(vehicle, DriveTrajectoryConfig(), DriveBridgeConfig())
        in_flight = PlanDelay(options.policy_latency_s, options.policy_latency_max_s or None, seed=seed)
        outcomes: collections.Counter = collections.Counter()
    times, poses, keys = [], [], []
    labels: list[tuple[np.ndarray, np.ndarray]] = []  # per keyframe, pushed or on policy: the expert's own path
    try:
        writer.write("/instruction", 0.0, writer.string(INSTRUCTION))
        pose_array = T["geometry_msgs/msg/PoseArray"](header=writer.header(0.0, "odom"), poses=[
            T["geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](x=o.x, y=o.y, z=0.0),
                                        orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
            for o in sim.obstacles])
        writer.write("/ground_truth/obstacles", 0.0, pose_array)
        k = 0
        while sim.time_s < end_s - 1e-9 and sim.collided_with is None and not (stop_off_road and sim.left_road):
            t, st = sim.time_s, sim.state
            if jumps and k % plan_every == 0 and t >= jumps[0].t_s - 1e-9:
                j = jumps.popleft()
                jumped.append({"t_s": _r(t), "dy_m": _r(j.dy_m), "dyaw_rad": _r(j.dyaw_rad),
                               "applied": sim.displace(j.dy_m, j.dyaw_rad, clear_ahead_m=JUMP_CLEAR_AHEAD_M)})
            times.append(t)
            poses.append((st.x, st.y, st.yaw))
            if k % plan_every == 0:  # on policy too: the expert's lane choice follows the car
                waypoints = expert.plan(st.x, st.y, st.yaw, sim.obstacles)
                if not on_policy:
                    follow_waypoints(follower, waypoints, st, vehicle, limits, t)
            if on_policy and k % control_every == 0:
                bridge.add_odometry(EgoState(t, st.x, st.y, st.yaw, st.v, st.yaw_rate), t)
                for stamp, primitives in in_flight.due(t):
                    decision = bridge.on_plan(primitives, stamp, t)
                    outcomes[decision.outcome.value] += 1
                    if decision.trajectory is not None:
                        follower.set_trajectory(decision.trajectory, decision.stamp_s)
                stop = bridge.watchdog(t)
                if stop is not None and stop.trajectory is not None:
                    outcomes["watchdog_stop"] += 1
                    follower.set_trajectory(stop.trajectory, stop.stamp_s)
            if t <= options.duration_s + 1e-9:
                if k % control_every == 0:
                    writer.write("/odom", t, _odometry(T, writer, t, st))
                if k % cam_every == 0 or k % key_every == 0:
                    img = camera.render()
                    if k % cam_every == 0:
                        writer.write_camera("front", t, "front_camera_optical_frame", img, camera.model)
                if k % key_every == 0:
                    seg = camera.segmentation()
                    boxes = {n: box_from_mask(seg == g) for n, g in obstacle_geoms.items()}
                    keys.append((t, sim.camera_pose(), {n: b for n, b in boxes.items() if b is not None}))
                    if policy is not None:
                        in_flight.put(t, policy(img, t))
                    if pushes or on_policy or displaced:
                        labels.append(expert_path(sim, expert, follower, limits, k, plan_every, options.horizon_s,
                                                  replan_now=on_policy))
            cmd = follower.command(sim.state, sim.time_s)
            sim.step(cmd.accel_mps2, cmd.steer_rad + push_offset(pushes, t))
            k += 1
        success = sim.collided_with is None and not sim.left_road and sim.time_s >= end_s - 1e-6
    finally:
        writer.close()
        camera.close()
    times_a, poses_a = np.array(times), np.array(poses)
    poses_a[:, 2] = np.unwrap(poses_a[:, 2])
    frames: list[dict[str, Any]] = []
    for i, (t, cam_pose, key_boxes) in enumerate(keys):
        label_t, label_poses = labels[i] if labels else (times_a, poses_a)
        ego = ego_waypoints(label_t, label_poses, t, options.waypoints, options.horizon_s)
        x0, y0, yaw0 = (float(np.interp(t, times_a, poses_a[:, j])) for j in range(3))
        world = sim.ego_to_world(ego, (x0, y0, yaw0))
        uv, inside = project_points(world_to_camera(world, cam_pose), camera.model)
        frames.append({"t_s": _r(t), "xy": [[_r(p[0]), _r(p[1])] for p in ego],
                       "uv": [[_r(u, 2), _r(v, 2)] if ok else None for (u, v), ok in zip(uv, inside)],
                       "in_image": [bool(x) for x in inside],
                       "boxes": [{"object": n, "bbox": b} for n, b in key_boxes.items()]})
    cam = camera.model
    annotation = {
        "format": FORMAT, "task": "drive", "seed": int(seed), "bag": bag_path.name, "instruction": INSTRUCTION,
        "success": bool(success), "duration_s": options.duration_s,
        "camera": {"name": "front", "frame_id": "front_camera_optical_frame", "width": cam.width,
                   "height": cam.height, "K": cam.K.tolist(),
                   "ego_position": list(scene.camera_position_m), "pitch_rad": scene.camera_pitch_rad},
        "waypoints": int(options.waypoints), "horizon_s": options.horizon_s, "keyframes": frames,
    }
    if pushes:
        annotation["perturbation"] = {"std_rad": options.perturbation, "labels": "expert path without pushes",
                                      "pushes": [{"onset_s": _r(p.onset_s), "hold_s": _r(p.hold_s),
                                                  "offset_rad": _r(p.offset_rad)} for p in pushes]}
    if displaced:
        annotation["expert_labels"] = True  # each keyframe is the expert's path from where the car is
        annotation["displacement"] = {"max_dy_m": options.displacement[0], "max_dyaw_rad": options.displacement[1],
                                      "labels": "expert path from each keyframe's state, without later jumps",
                                      "jumps": jumped}
    if policy is not None:
        annotation["expert_labels"] = True  # keyframes are training labels whatever happened to the car
        annotation["driven_by"] = {
            "policy": str(policy.model_dir), "decoder": policy.decoder, "latency_s": options.policy_latency_s,
            **({"latency_max_s": options.policy_latency_max_s,
                "latency_median_s": _r(float(np.median(in_flight.latencies_s)), 3) if in_flight.latencies_s else None}
               if options.policy_latency_max_s else {}),
            "labels": "expert path from each keyframe's state", "plans": policy.plans,
            "invalid_plans": policy.invalid, "bridge": dict(sorted(outcomes.items())),
            "plan_ms_p50": _r(float(np.median(policy.plan_ms)), 1) if policy.plan_ms else None,
            "end": ("collision" if sim.collided_with is not None else "left_road" if sim.left_road else "time"),
            "end_s": _r(sim.time_s, 2), "distance_m": _r(sim.state.x, 1)}
    write_annotation(str(bag_path.parent / f"{stem}.json"), annotation)
    return annotation


def _odometry(T, writer: BagWriter, t: float, st):
    pose = T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=float(st.x), y=float(st.y), z=0.0),
        orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=math.sin(st.yaw / 2), w=math.cos(st.yaw / 2)))
    twist = T["geometry_msgs/msg/Twist"](linear=T["geometry_msgs/msg/Vector3"](x=float(st.v), y=0.0, z=0.0),
                                         angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=float(st.yaw_rate)))
    return T["nav_msgs/msg/Odometry"](
        header=writer.header(t, "odom"), child_frame_id="base_link",
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))


def recorder(task: str, out_dir: str | os.PathLike, width: int, height: int):
    """`(seed, options) -> annotation` for `plan-stack record-demos` (`embodiments.base.RecorderFactory`);
    a policy model is loaded once, for the first episode that names it."""
    policies: dict[tuple[str, str], PlannerDriver] = {}

    def record(seed: int, options: DriveRecordOptions) -> dict:
        policy = None
        if options.policy_model:
            key = (options.policy_model, options.policy_decoder)
            if key not in policies:
                policies[key] = PlannerDriver(options.policy_model, options.policy_decoder)
            policy = policies[key]
        return record_episode(seed, out_dir, options, policy=policy)  # one task; sizes come with the options
    return record
