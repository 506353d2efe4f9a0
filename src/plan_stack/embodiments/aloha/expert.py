"""Scripted ACT-style experts: end-effector waypoints -> joint trajectories.

The expert plans in the mocap-driven end-effector model (each gripper welded
to a mocap target that moves linearly between waypoints), records the arm
joint positions that result, and returns them as a 14-DoF joint command
trajectory in stack units (grippers normalised 0 closed .. 1 open). Replayed
on the joint-controlled rig, or sent through the bridge, it solves the task:
that is the demonstration. Waypoint times are fractions of the episode
(as ACT's 400-step scripts) so any control period works.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from plan_stack.data.annotation import Subtask
from plan_stack.embodiments.aloha.model import (
    ARM_JOINTS,
    ARMS,
    START_ARM_POSE,
    START_GRIPPER_M,
    gripper_to_joint,
    load_model,
    stack_to_joint,
    task_spec,
)

__all__ = ["Waypoint", "Subtask", "ExpertEpisode", "Pulse", "waypoints_for", "plan_episode", "recovery_pulses",
           "pushed", "replay", "demonstrate"]


@dataclasses.dataclass(frozen=True)
class Waypoint:
    """Mocap target of one gripper at time `t` (fraction of the episode)."""

    t: float
    xyz: tuple[float, float, float]
    quat: tuple[float, float, float, float]  # w, x, y, z, relative to the start orientation
    gripper: float  # normalised 0 closed .. 1 open


@dataclasses.dataclass(frozen=True)
class ExpertEpisode:
    """A planned demonstration: commands[k] is due at times_s[k] (stack units)."""

    task: str
    seed: int
    instruction: str
    dt_s: float
    times_s: np.ndarray  # [T]
    commands: np.ndarray  # [T, 14], grippers normalised
    object_poses: np.ndarray  # [n_objects, 7] initial object poses
    subtasks: tuple[Subtask, ...]
    planned_reward: int  # staged reward the plan reached in the end-effector model


def _quat_mul(a, b) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ])


def _rotate(q, v) -> np.ndarray:
    """Rotate vector v by unit quaternion q (w, x, y, z)."""
    qv = _quat_mul(_quat_mul(q, [0.0, *v]), [q[0], -q[1], -q[2], -q[3]])
    return qv[1:]


def _axis_quat(axis, degrees: float) -> np.ndarray:
    half = np.radians(degrees) / 2.0
    return np.concatenate([[np.cos(half)], np.sin(half) * np.asarray(axis, dtype=float)])


_IDENTITY = (1.0, 0.0, 0.0, 0.0)


def _transfer_cube(objects: np.ndarray, init: np.ndarray):
    """ACT's pick-and-transfer script: right arm picks, meets the left arm mid-air, hands over.

    The left arm meets 1.5 cm higher than in ACT (z offset -0.005 instead of
    -0.02): replayed on the joint-servoed rig, ACT's height lets the left
    finger push the cube out of the right gripper in 4 of 10 seeds; raised,
    10/10 (seeds 0-9).
    """
    box = objects[0, :3]
    low = -0.005
    meet = np.array([0.0, 0.5, 0.25])
    pick_q = tuple(_quat_mul(_IDENTITY, _axis_quat([0, 1, 0], -60)))
    meet_left_q = tuple(_axis_quat([1, 0, 0], 90))
    f = 1.0 / 400.0
    left = [
        Waypoint(0, tuple(init[0]), _IDENTITY, 0),
        Waypoint(100 * f, tuple(meet + [-0.1, 0, low]), meet_left_q, 1),
        Waypoint(260 * f, tuple(meet + [0.02, 0, low]), meet_left_q, 1),
        Waypoint(310 * f, tuple(meet + [0.02, 0, low]), meet_left_q, 0),
        Waypoint(360 * f, tuple(meet + [-0.1, 0, low]), _IDENTITY, 0),
        Waypoint(1.0, tuple(meet + [-0.1, 0, low]), _IDENTITY, 0),
    ]
    right = [
        Waypoint(0, tuple(init[1]), _IDENTITY, 0),
        Waypoint(90 * f, tuple(box + [0, 0, 0.08]), pick_q, 1),
        Waypoint(130 * f, tuple(box + [0, 0, -0.015]), pick_q, 1),
        Waypoint(170 * f, tuple(box + [0, 0, -0.015]), pick_q, 0),
        Waypoint(200 * f, tuple(meet + [0.05, 0, 0]), pick_q, 0),
        Waypoint(220 * f, tuple(meet), pick_q, 0),
        Waypoint(310 * f, tuple(meet), pick_q, 1),
        Waypoint(360 * f, tuple(meet + [0.1, 0, 0]), pick_q, 1),
        Waypoint(1.0, tuple(meet + [0.1, 0, 0]), pick_q, 1),
    ]
    subtasks = [
        ("reach for the red cube with the right arm", 0, 130 * f),
        ("grasp the red cube", 130 * f, 170 * f),
        ("bring the cube to the middle and grasp it with the left arm", 170 * f, 310 * f),
        ("release the cube from the right arm and pull both arms apart", 310 * f, 1.0),
    ]
    return left, right, subtasks


def _insertion(objects: np.ndarray, init: np.ndarray):
    """ACT's insertion script: right arm picks the peg, left the socket; they meet and insert.

    The final meeting offsets are +-0.045 m instead of ACT's +-0.05: on the
    joint-servoed rig ACT's stops the peg ~1 mm short of the pin (reward 2
    in 8/8 seeds); 5 mm deeper it reaches the pin in 8/8 (seeds 0-7).
    """
    final = 0.045
    peg, socket = objects[0, :3], objects[1, :3]
    meet = np.array([0.0, 0.5, 0.15])
    lift_right = 0.00715
    right_q = tuple(_axis_quat([0, 1, 0], -60))
    left_q = tuple(_axis_quat([0, 1, 0], 60))
    f = 1.0 / 400.0
    left = [
        Waypoint(0, tuple(init[0]), _IDENTITY, 0),
        Waypoint(120 * f, tuple(socket + [0, 0, 0.08]), left_q, 1),
        Waypoint(170 * f, tuple(socket + [0, 0, -0.03]), left_q, 1),
        Waypoint(220 * f, tuple(socket + [0, 0, -0.03]), left_q, 0),
        Waypoint(285 * f, tuple(meet + [-0.1, 0, 0]), left_q, 0),
        Waypoint(340 * f, tuple(meet + [-final, 0, 0]), left_q, 0),
        Waypoint(1.0, tuple(meet + [-final, 0, 0]), left_q, 0),
    ]
    right = [
        Waypoint(0, tuple(init[1]), _IDENTITY, 0),
        Waypoint(120 * f, tuple(peg + [0, 0, 0.08]), right_q, 1),
        Waypoint(170 * f, tuple(peg + [0, 0, -0.03]), right_q, 1),
        Waypoint(220 * f, tuple(peg + [0, 0, -0.03]), right_q, 0),
        Waypoint(285 * f, tuple(meet + [0.1, 0, lift_right]), right_q, 0),
        Waypoint(340 * f, tuple(meet + [final, 0, lift_right]), right_q, 0),
        Waypoint(1.0, tuple(meet + [final, 0, lift_right]), right_q, 0),
    ]
    subtasks = [
        ("reach for the peg with the right arm and the socket with the left arm", 0, 170 * f),
        ("grasp the peg and the socket", 170 * f, 220 * f),
        ("lift both and bring them together in the middle", 220 * f, 285 * f),
        ("insert the peg into the socket", 285 * f, 1.0),
    ]
    return left, right, subtasks


_SCRIPTS = {"transfer_cube": _transfer_cube, "insertion": _insertion}


def waypoints_for(task: str, objects: np.ndarray, init_xyz: np.ndarray):
    """(left waypoints, right waypoints, [(subtask text, start, end) as episode fractions])."""
    task_spec(task)
    return _SCRIPTS[task](np.asarray(objects, dtype=float), np.asarray(init_xyz, dtype=float))


def _interpolate(waypoints: list[Waypoint], t: float) -> tuple[np.ndarray, np.ndarray, float]:
    for a, b in zip(waypoints[:-1], waypoints[1:]):
        if a.t <= t <= b.t:
            s = 0.0 if b.t == a.t else (t - a.t) / (b.t - a.t)
            xyz = (1 - s) * np.asarray(a.xyz) + s * np.asarray(b.xyz)
            qa, qb = np.asarray(a.quat), np.asarray(b.quat)
            if np.dot(qa, qb) < 0:
                qb = -qb
            quat = (1 - s) * qa + s * qb
            return xyz, quat / np.linalg.norm(quat), (1 - s) * a.gripper + s * b.gripper
    last = waypoints[-1]
    return np.asarray(last.xyz), np.asarray(last.quat), last.gripper


@functools.cache
def _end_effector_model(task: str):
    """Compiled once per task (compiling takes ~0.3 s); read-only here, each plan has its own MjData."""
    return load_model(task, end_effector=True)


def plan_episode(task: str = "transfer_cube", seed: int = 0, dt_s: float = 0.02,
                 episode_s: float | None = None) -> ExpertEpisode:
    """Roll the scripted expert out in the end-effector model; returns the joint commands.

    Deterministic in `seed` (object placement). `dt_s` must be a multiple of
    the 2 ms physics step.
    """
    import mujoco

    from plan_stack.embodiments.aloha.sim import AlohaSim  # reward definitions and object sampling

    spec = task_spec(task)
    episode_s = spec.episode_s if episode_s is None else float(episode_s)
    model = _end_effector_model(task)
    data = mujoco.MjData(model)
    substeps = int(round(dt_s / model.opt.timestep))
    if substeps < 1 or abs(substeps * model.opt.timestep - dt_s) > 1e-9:
        raise ValueError(f"dt_s: {dt_s} is not a multiple of the physics step {model.opt.timestep}")
    objects = spec.sample_objects(np.random.default_rng(seed))

    qadr = np.array([model.joint(f"vx300s_{a}/{j}").qposadr[0] for a in ARMS for j in ARM_JOINTS])
    fadr = [model.joint(f"vx300s_{a}/left_finger").qposadr[0] for a in ARMS]
    mujoco.mj_resetData(model, data)
    mujoco.mj_forward(model, data)
    # Weld reference (body2 in body1's frame) as MuJoCo takes it: the pose at qpos0.
    rel = []
    for a, arm in enumerate(ARMS):
        g = data.body(f"vx300s_{arm}/gripper_link")
        m_inv = np.array([data.mocap_quat[a][0], *(-data.mocap_quat[a][1:])])
        rel_quat = _quat_mul(m_inv, g.xquat)
        rel_pos = _rotate(m_inv, g.xpos - data.mocap_pos[a])
        rel.append((rel_pos, rel_quat))
    for a in range(2):
        data.qpos[qadr[6 * a:6 * a + 6]] = START_ARM_POSE
        data.qpos[fadr[a]] = START_GRIPPER_M
        data.qpos[fadr[a] + 1] = -START_GRIPPER_M
    for name, pose in zip(spec.objects, objects):
        adr = model.joint(model.body(name).jntadr[0]).qposadr[0]
        data.qpos[adr:adr + 7] = pose
    mujoco.mj_forward(model, data)
    # Start the mocap targets where the weld is already satisfied: no lurch at t=0.
    init_xyz, init_quat = np.zeros((2, 3)), np.zeros((2, 4))
    for a, arm in enumerate(ARMS):
        g = data.body(f"vx300s_{arm}/gripper_link")
        rel_pos, rel_quat = rel[a]
        init_quat[a] = _quat_mul(g.xquat, [rel_quat[0], *(-rel_quat[1:])])
        init_xyz[a] = g.xpos - _rotate(init_quat[a], rel_pos)
    left, right, fractions = waypoints_for(task, objects, init_xyz)
    left[0] = dataclasses.replace(left[0], quat=tuple(init_quat[0]))
    right[0] = dataclasses.replace(right[0], quat=tuple(init_quat[1]))
    for a, wps in enumerate((left, right)):
        data.mocap_pos[a], data.mocap_quat[a] = wps[0].xyz, wps[0].quat

    reward_probe = AlohaSim.__new__(AlohaSim)  # reuse the reward rules on this model's contacts
    reward_probe.task = spec
    reward_probe._geom_names = [model.geom(i).name for i in range(model.ngeom)]
    reward_probe.data = data

    n = int(round(episode_s / dt_s))
    commands = np.zeros((n, 14))
    best = 0
    for k in range(n):
        # Command k is due at time k*dt: the joint state the welded arm reached there.
        commands[k, 0:6] = data.qpos[qadr[0:6]]
        commands[k, 7:13] = data.qpos[qadr[6:12]]
        t = (k + 1) * dt_s / episode_s
        grip = []
        for a, wps in enumerate((left, right)):
            xyz, quat, g = _interpolate(wps, t)
            data.mocap_pos[a], data.mocap_quat[a] = xyz, quat
            grip.append(g)
        commands[k, 6], commands[k, 13] = grip
        finger = gripper_to_joint(np.array(grip))
        data.ctrl[:] = [finger[0], -finger[0], finger[1], -finger[1]]
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        best = reward_probe.reward() if k >= n - 1 else best
    subtasks = tuple(Subtask(text, s * episode_s, e * episode_s) for text, s, e in fractions)
    return ExpertEpisode(task, seed, spec.instruction, dt_s, np.arange(n) * dt_s, commands, objects,
                         subtasks, best)


@dataclasses.dataclass(frozen=True)
class Pulse:
    """One push of an arm off the expert's path: `offsets[k]` is added to command k (stack units)."""

    arm: str
    onset_s: float
    offsets: np.ndarray  # [T, 14]


#: task -> arm -> (earliest, latest onset s, pulses): where a push leaves the arm time to recover before it
#: must be precise (the right arm's descent onto the cube at 2.6 s; the left arm's grasp at 5.2 s)
RECOVERY_WINDOWS: dict[str, dict[str, tuple[float, float, int]]] = {
    "transfer_cube": {"right": (0.2, 1.1, 2), "left": (0.2, 3.6, 2)},
}
#: joints a push moves (waist, shoulder, elbow, wrist angle); the rolls and the gripper stay on the path
PUSHED_JOINTS = (0, 1, 2, 4)
PUSH_RISE_S = 0.25
PUSH_DECAY_S = (0.8, 1.2)


def recovery_pulses(episode: ExpertEpisode, scale: float) -> list[Pulse]:
    """Random pushes off the expert's path that the expert recovers from (noise injected into the
    demonstration, as in DART): each arm gets a few smooth joint offsets (std `scale` rad) that rise in
    `PUSH_RISE_S` and decay back to zero, so the arm comes back onto the scripted path before it must be
    precise. Seeded by the episode's seed. Recorded images then show the arm off its usual place while
    the object stays put: the planner must read the object, not the arm's pose, to place the plan.
    """
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: a positive finite std in rad, got {scale}")
    windows = RECOVERY_WINDOWS.get(episode.task)
    if windows is None:
        raise ValueError(f"perturbation: defined for {sorted(RECOVERY_WINDOWS)} only, not {episode.task!r}")
    rng = np.random.default_rng([episode.seed, 0x70B5])
    t = episode.times_s
    pulses = []
    for a, arm in enumerate(ARMS):
        lo, hi, count = windows[arm]
        for _ in range(count):
            onset = float(rng.uniform(lo, hi))
            decay = float(rng.uniform(*PUSH_DECAY_S))
            amplitude = rng.normal(0.0, scale, len(PUSHED_JOINTS))
            rise = np.clip((t - onset) / PUSH_RISE_S, 0.0, 1.0)
            fall = np.clip((t - onset - PUSH_RISE_S) / decay, 0.0, 1.0)
            shape = 0.5 * (1 - np.cos(np.pi * rise)) * 0.5 * (1 + np.cos(np.pi * fall))
            offsets = np.zeros_like(episode.commands)
            offsets[:, [7 * a + j for j in PUSHED_JOINTS]] = shape[:, None] * amplitude
            pulses.append(Pulse(arm, onset, offsets))
    return sorted(pulses, key=lambda p: p.onset_s)


def pushed(episode: ExpertEpisode, pulses: Sequence[Pulse]) -> ExpertEpisode:
    """The episode with `pulses` added to its commands (stack units)."""
    return dataclasses.replace(episode, commands=episode.commands + sum(
        (p.offsets for p in pulses), np.zeros_like(episode.commands)))


def replay(episode: ExpertEpisode, sim=None, on_step=None) -> int:
    """Replay the commands on the joint-controlled rig (no ROS); returns the final staged reward.

    `on_step(k, sim)` is called after each control period (recorders use it).
    """
    from plan_stack.embodiments.aloha.sim import AlohaSim

    sim = AlohaSim(episode.task) if sim is None else sim
    sim.reset(object_poses=episode.object_poses)
    substeps = int(round(episode.dt_s / sim.timestep_s))
    joint_cmd = stack_to_joint(episode.commands)
    for k in range(len(joint_cmd)):
        sim.set_command(joint_cmd[k])
        sim.step(substeps)
        if on_step is not None:
            on_step(k, sim)
    return sim.reward()


def demonstrate(task: str, seed: int, sim=None):
    """The `embodiments.base.Expert` entry point: plan `task` for `seed`, replay it on `sim` (or a new rig).

    Success = the staged reward reaches its maximum (as in the annotations).
    """
    from plan_stack.embodiments.aloha.sim import MAX_REWARD
    from plan_stack.embodiments.base import Demonstration
    from plan_stack.robots import profile

    profile("aloha").check_task(task)
    episode = plan_episode(task, seed)
    reward = replay(episode, sim)
    return Demonstration("aloha", task, seed, reward >= MAX_REWARD, episode)
