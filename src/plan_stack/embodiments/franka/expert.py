"""Scripted pick-and-place expert for the Franka tabletop (no ROS).

The expert plans tool-centre-point keyframes (above the cube, at the cube,
lifted, above the target, placed, retreated) with the hand pointing down and
the fingers across the cube's faces, solves each with damped-least-squares
IK on the MuJoCo model (warm-started from the previous keyframe), and joins
them into one 8-channel stack trajectory (7 joints in rad + gripper width in
m) of rest-to-rest quintic segments whose durations respect the bridge's
limits. `run_episode` executes it on `FrankaSim` exactly as the bridge +
simulator do (joint_trajectory_controller reference for the arm, width/speed
moves for the gripper) and reports success.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.franka.model import (
    DEFAULT_JOINT_NAMES,
    FINGER_JOINTS,
    MAX_WIDTH_M,
    READY_POSE,
    model_to_real,
    real_to_model,
)
from plan_stack.embodiments.franka.sim import FrankaSim
from plan_stack.trajectory.core import Trajectory, TrajectoryFollower

__all__ = ["ExpertConfig", "IKError", "solve_ik", "plan_pick_place", "missed_grasp_offset", "run_episode", "Episode",
           "demonstrate", "MISS_LABELS"]

#: phase labels of a deliberately missed first grasp (`plan_pick_place(miss_offset_xy=...)`), in order
MISS_LABELS = ("miss_approach", "miss_descend", "miss_close", "miss_reopen", "miss_rise")


class IKError(RuntimeError):
    """IK did not converge to the keyframe (unreachable pose)."""


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Keyframe geometry and timing of the scripted pick-and-place."""

    approach_height_m: float = param("TCP height above the table for approach and transfer (m)", 0.15, min=0.05)
    grasp_height_m: float = param("TCP site height when grasping (m); the asset's fingertips reach ~5 cm below it",
                                  0.055, min=0.0)
    place_height_m: float = param("TCP site height when releasing (m)", 0.06, min=0.0)
    closed_width_m: float = param("gripper width command for grasping (below the cube: it squeezes)", 0.03,
                                  min=0.0, max=MAX_WIDTH_M)
    move_s: float = param("duration of a transfer segment (s)", 1.5, min=0.2)
    vertical_s: float = param("duration of an approach / lift segment (s)", 1.0, min=0.2)
    gripper_s: float = param("duration of a gripper segment (s)", 1.0, min=0.2)
    settle_s: float = param("time simulated after the last keyframe before judging success (s)", 0.5, min=0.0)

    def __post_init__(self) -> None:
        validate(self)


def _rot_z(theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def solve_ik(sim: FrankaSim, data, pos: np.ndarray, rot: np.ndarray, q_init_real: np.ndarray,
             iterations: int = 200, damping: float = 1e-3, tol: float = 1e-4) -> np.ndarray:
    """7 joint angles (real convention) putting the TCP at `pos` with orientation `rot`; raises IKError."""
    mj = sim._mj
    m = sim.model
    q = real_to_model(np.asarray(q_init_real, dtype=float))
    jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    quat_cur, quat_goal, err_rot = np.zeros(4), np.zeros(4), np.zeros(3)
    mj.mju_mat2Quat(quat_goal, np.asarray(rot, dtype=float).reshape(-1))
    lo, hi = m.jnt_range[[m.joint(j).id for j in _arm_joint_names()]].T
    for _ in range(iterations):
        data.qpos[sim._qadr] = q
        mj.mj_kinematics(m, data)
        mj.mj_comPos(m, data)
        err_pos = pos - data.site_xpos[sim._tcp]
        mj.mju_mat2Quat(quat_cur, data.site_xmat[sim._tcp])
        mj.mju_subQuat(err_rot, quat_goal, quat_cur)  # in the TCP frame; the Jacobian is in the world frame
        err = np.concatenate([err_pos, data.site_xmat[sim._tcp].reshape(3, 3) @ err_rot])
        if np.linalg.norm(err) < tol:
            return model_to_real(q)
        mj.mj_jacSite(m, data, jacp, jacr, sim._tcp)
        jac = np.vstack([jacp, jacr])[:, sim._vadr]
        dq = jac.T @ np.linalg.solve(jac @ jac.T + damping * np.eye(6), err)
        q = np.clip(q + np.clip(dq, -0.2, 0.2), lo, hi)
    raise IKError(f"pose: IK did not converge (residual {np.linalg.norm(err):.3g}) for position {np.round(pos, 3)}")


def _arm_joint_names():
    from plan_stack.embodiments.franka.model import ARM_JOINTS

    return ARM_JOINTS


def _grasp_rotation(sim: FrankaSim):
    """(MjData at the ready pose, the hand's grasp orientation): fingers of the ready pose open along the
    world diagonal; the hand turns 45 degrees so they close across the cube's faces (the cube is
    axis-aligned)."""
    import mujoco

    data = mujoco.MjData(sim.model)
    data.qpos[sim._qadr] = real_to_model(np.array(READY_POSE))
    mujoco.mj_kinematics(sim.model, data)
    return data, _rot_z(math.pi / 4) @ np.asarray(data.site_xmat[sim._tcp]).reshape(3, 3)


def missed_grasp_offset(sim: FrankaSim, cfg: ExpertConfig, seed: int, distance_m: float) -> np.ndarray:
    """World xy offset of a first grasp that closes the fingers beside the cube, not on it.

    The offset is across the fingers' closing direction (a finger never lands on the cube), `distance_m`
    to 1.5 x `distance_m` long, turned by up to 20 degrees, either side; seeded by the episode's seed.
    This is the failure the learned stack showed in closed loop (docs/decisions/0012-franka-pick-split.md): a recovery
    demonstration starts from it.
    """
    import mujoco

    if not math.isfinite(distance_m) or distance_m <= 0:
        raise ValueError(f"distance_m: a positive finite distance in m, got {distance_m}")
    data, rot = _grasp_rotation(sim)
    cube = sim.cube_pose()[:3]
    q = solve_ik(sim, data, np.array([cube[0], cube[1], cfg.grasp_height_m]), rot, np.array(READY_POSE))
    data.qpos[sim._qadr] = real_to_model(q)
    mujoco.mj_kinematics(sim.model, data)
    axis = data.xaxis[sim.model.joint(FINGER_JOINTS[0]).id][:2]  # a finger's slide direction, world frame
    closing = axis / np.linalg.norm(axis)
    rng = np.random.default_rng([int(seed), 0x3155])
    angle = rng.uniform(-math.pi / 9, math.pi / 9) + (math.pi / 2 if rng.random() < 0.5 else -math.pi / 2)
    return rng.uniform(distance_m, 1.5 * distance_m) * (_rot_z(angle)[:2, :2] @ closing)


def plan_pick_place(sim: FrankaSim, cfg: ExpertConfig, joint_names: tuple[str, ...],
                    miss_offset_xy: np.ndarray | None = None) -> tuple[Trajectory, list[str]]:
    """The whole episode as one stack trajectory (stamp 0 = start) plus a phase label per point.

    With `miss_offset_xy` (`missed_grasp_offset`) the expert first descends that far beside the cube,
    closes the fingers on nothing, reopens, rises and then does the plain pick-and-place: a recovery
    demonstration (`MISS_LABELS` name its extra phases).
    """
    data, rot = _grasp_rotation(sim)
    ready = np.array(READY_POSE)
    cube, target = sim.cube_pose()[:3], sim.target_xy()
    miss = []
    if miss_offset_xy is not None:
        mx, my = cube[0] + float(miss_offset_xy[0]), cube[1] + float(miss_offset_xy[1])
        miss = list(zip(MISS_LABELS, [(mx, my, cfg.approach_height_m), (mx, my, cfg.grasp_height_m), None, None,
                                      (mx, my, cfg.approach_height_m)],
                        [MAX_WIDTH_M, MAX_WIDTH_M, cfg.closed_width_m, MAX_WIDTH_M, MAX_WIDTH_M],
                        [cfg.move_s, cfg.vertical_s, cfg.gripper_s, cfg.gripper_s, cfg.vertical_s]))
    keys = miss + [  # (label, tcp xyz or None = keep arm, width, duration)
        ("approach", (cube[0], cube[1], cfg.approach_height_m), MAX_WIDTH_M, cfg.move_s),
        ("descend", (cube[0], cube[1], cfg.grasp_height_m), MAX_WIDTH_M, cfg.vertical_s),
        ("grasp", None, cfg.closed_width_m, cfg.gripper_s),
        ("lift", (cube[0], cube[1], cfg.approach_height_m), cfg.closed_width_m, cfg.vertical_s),
        ("transfer", (target[0], target[1], cfg.approach_height_m), cfg.closed_width_m, cfg.move_s),
        ("place", (target[0], target[1], cfg.place_height_m), cfg.closed_width_m, cfg.vertical_s),
        ("release", None, MAX_WIDTH_M, cfg.gripper_s),
        ("retreat", (target[0], target[1], cfg.approach_height_m), MAX_WIDTH_M, cfg.vertical_s),
    ]
    q, t = ready, 0.0
    times, points, labels = [], [], []
    for label, xyz, width, duration in keys:
        if xyz is not None:
            q = solve_ik(sim, data, np.asarray(xyz, dtype=float), rot, q)
        t += duration
        times.append(t)
        points.append(np.concatenate([q, [width]]))
        labels.append(label)
    pos = np.array(points)
    zeros = np.zeros_like(pos)
    return Trajectory(tuple(joint_names), 0.0, np.array(times), pos, zeros, zeros.copy()), labels


@dataclasses.dataclass(frozen=True)
class Episode:
    success: bool
    trajectory: Trajectory
    labels: tuple[str, ...]
    tcp_path: np.ndarray  # [T, 3] TCP positions every 50 ms (sim time), for annotations


def run_episode(sim: FrankaSim, seed: int, cfg: ExpertConfig | None = None,
                joint_names: tuple[str, ...] = (*DEFAULT_JOINT_NAMES, "fr3_gripper"),
                deadband_m: float = 0.002, min_speed: float = 0.01, miss_m: float = 0.0) -> Episode:
    """Reset with `seed`, plan and execute the pick-and-place; success = cube released on the target.
    `miss_m` > 0: the recovery demonstration whose first grasp misses (`missed_grasp_offset`)."""
    cfg = cfg or ExpertConfig()
    sim.reset(seed=seed)
    offset = missed_grasp_offset(sim, cfg, seed, miss_m) if miss_m else None
    traj, labels = plan_pick_place(sim, cfg, joint_names, miss_offset_xy=offset)
    follower = TrajectoryFollower(joint_names, np.concatenate([np.array(READY_POSE), [MAX_WIDTH_M]]))
    follower.set_trajectory(traj, sim.time_s)
    goal, tcp = MAX_WIDTH_M, []
    end = traj.times_s[-1] + cfg.settle_s
    steps_per_sample = max(int(round(0.05 / sim.timestep_s)), 1)
    i = 0
    while sim.time_s < end:
        ref = follower.sample(sim.time_s)
        sim.set_command(ref.positions[:7])
        if abs(ref.positions[7] - goal) > deadband_m:
            goal = float(ref.positions[7])
            sim.move_gripper(goal, max(abs(float(ref.velocities[7])), min_speed))
        sim.step()
        if i % steps_per_sample == 0:
            tcp.append(sim.tcp_pose()[:3])
        i += 1
    return Episode(sim.success(), traj, tuple(labels), np.array(tcp))


def demonstrate(task: str, seed: int, sim: FrankaSim | None = None):
    """The `embodiments.base.Expert` entry point: the pick-and-place for `seed` on `sim` (or a new one)."""
    from plan_stack.embodiments.base import Demonstration
    from plan_stack.robots import profile

    profile("franka").check_task(task)
    episode = run_episode(sim if sim is not None else FrankaSim(), seed)
    return Demonstration("franka", task, seed, episode.success, episode)
