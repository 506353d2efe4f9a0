"""Scripted lane-keeping, obstacle-avoiding driver for the road scene (no ROS).

It plays the planner: every `replan_s` it looks `lookahead_m` ahead with
ground-truth obstacles, keeps its lane while it is free and otherwise picks
the nearest lane that is free from `clearance_m` behind the ego to the
lookahead, and emits ego-frame waypoints spaced by arc length along a
smooth (smoothstep) lateral transition to that lane's centre — the same
`drive_3d` waypoints a planner would output. `run_episode` drives them
through the bridge's conversion (`trajectory.convert_waypoints`) and the
simulator's pure-pursuit follower, and reports whether the car stayed on
the road without hitting anything.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.drive.follower import FollowerConfig, PurePursuit
from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, Obstacle
from plan_stack.embodiments.drive.trajectory import DriveTrajectoryConfig, Status, convert_waypoints
from plan_stack.embodiments.drive.vehicle import VehicleParams

__all__ = ["DriverConfig", "ScriptedDriver", "DriveEpisode", "follow_waypoints", "run_episode", "demonstrate"]


@dataclasses.dataclass(frozen=True)
class DriverConfig:
    """Behaviour of the scripted driver."""

    cruise_speed_mps: float = param("target speed (m/s)", 8.0, min=0.5, max=30.0)
    lookahead_m: float = param("how far ahead obstacles are considered (m)", 45.0, min=5.0)
    clearance_m: float = param("a lane is free only if no obstacle is within this distance behind the ego (m)",
                               8.0, min=0.0)
    lane_change_m: float = param("longitudinal length of a lane change (m)", 25.0, min=5.0)
    waypoints: int = param("waypoints per plan", 20, min=2, max=200)
    spacing_m: float = param("arc-length spacing of the waypoints (m)", 2.0, min=0.1)
    replan_s: float = param("time between plans (s)", 0.5, min=0.01)

    def __post_init__(self) -> None:
        validate(self)


class ScriptedDriver:
    def __init__(self, scene: DriveSceneConfig, cfg: DriverConfig) -> None:
        self.scene, self.cfg = scene, cfg
        self.lane = scene.start_lane

    def _blocked(self, lane: int, x0: float, x1: float, obstacles: list[Obstacle]) -> bool:
        return any(o.lane == lane and o.x + o.half_length > x0 and o.x - o.half_length < x1 for o in obstacles)

    def choose_lane(self, x: float, obstacles: list[Obstacle]) -> int:
        cfg = self.cfg
        if not self._blocked(self.lane, x, x + cfg.lookahead_m, obstacles):
            return self.lane
        free = [lane for lane in range(self.scene.lanes)
                if not self._blocked(lane, x - cfg.clearance_m, x + cfg.lookahead_m, obstacles)]
        if free:
            self.lane = min(free, key=lambda lane: abs(lane - self.lane))
        return self.lane

    def plan(self, x: float, y: float, yaw: float, obstacles: list[Obstacle]) -> np.ndarray:
        """[P, 3] ego-frame waypoints (x forward, y left, z = 0), spaced by arc length (horizon 0)."""
        cfg = self.cfg
        lane_y = self.scene.lane_center_y(self.choose_lane(x, obstacles))
        xs = x + cfg.spacing_m * np.arange(1, cfg.waypoints + 1)
        u = np.clip((xs - x) / cfg.lane_change_m, 0.0, 1.0)
        ys = y + (lane_y - y) * u * u * (3 - 2 * u)
        c, s = math.cos(yaw), math.sin(yaw)
        dx, dy = xs - x, ys - y
        return np.stack([c * dx + s * dy, -s * dx + c * dy, np.zeros_like(xs)], axis=1)


def follow_waypoints(follower: PurePursuit, waypoints: np.ndarray, state, vehicle: VehicleParams,
                     limits: DriveTrajectoryConfig, now_s: float) -> bool:
    """Hand ego-frame `waypoints` planned at `state` to the follower through the bridge's conversion; False
    when the conversion rejects them (the follower keeps the trajectory it had)."""
    conv = convert_waypoints(waypoints, 0.0, vehicle, limits, v0=state.v)
    if conv.status is Status.REJECTED or conv.trajectory is None:  # a trajectory unless rejected
        return False
    follower.set_trajectory(conv.trajectory.transformed(state.x, state.y, state.yaw, "odom"), now_s)
    return True


@dataclasses.dataclass(frozen=True)
class DriveEpisode:
    success: bool
    collided_with: int | None
    left_road: bool
    distance_m: float
    rejected_plans: int


def run_episode(seed: int, duration_s: float = 60.0, scene: DriveSceneConfig | None = None,
                vehicle: VehicleParams | None = None, driver: DriverConfig | None = None,
                limits: DriveTrajectoryConfig | None = None, on_plan=None) -> DriveEpisode:
    """Drive `duration_s` of sim time; `on_plan(sim, waypoints)` is called with every plan (recording hook)."""
    scene, vehicle = scene or DriveSceneConfig(), vehicle or VehicleParams()
    driver = driver or DriverConfig()
    limits = limits or DriveTrajectoryConfig(cruise_speed_mps=driver.cruise_speed_mps)
    sim = DriveSim(scene, vehicle, seed=seed, offscreen_size=(16, 16))
    expert = ScriptedDriver(scene, driver)
    follower = PurePursuit(vehicle, FollowerConfig())
    next_plan, rejected = 0.0, 0
    while sim.time_s < duration_s and sim.collided_with is None:
        if sim.time_s >= next_plan - 1e-9:
            st = sim.state
            pts = expert.plan(st.x, st.y, st.yaw, sim.obstacles)
            if on_plan is not None:
                on_plan(sim, pts)
            if not follow_waypoints(follower, pts, st, vehicle, limits, sim.time_s):
                rejected += 1
            next_plan += driver.replan_s
        cmd = follower.command(sim.state, sim.time_s)
        sim.step(cmd.accel_mps2, cmd.steer_rad)
    ok = sim.collided_with is None and not sim.left_road and sim.time_s >= duration_s - 1e-6
    return DriveEpisode(ok, sim.collided_with, sim.left_road, sim.state.x, rejected)


def demonstrate(task: str, seed: int, sim: DriveSim | None = None):
    """The registry's uniform expert entry point: one episode of driving for `seed` (default duration).

    The episode builds its own simulator from the scene config; a `sim` cannot be reused here.
    """
    from plan_stack.embodiments.registry import Demonstration, check_task

    check_task("drive", task)
    if sim is not None:
        raise ValueError("sim: the driving expert builds its simulator from its scene config; pass None")
    episode = run_episode(seed)
    return Demonstration("drive", task, seed, episode.success, episode)
