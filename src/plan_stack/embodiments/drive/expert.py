"""Scripted lane-keeping, obstacle-avoiding driver for the road scene (no ROS).

It plays the planner: every `replan_s` it looks `lookahead_m` ahead with
ground-truth obstacles, keeps the lane the car is in while it is free and
otherwise picks the nearest lane that is free from `clearance_m` behind the
ego to the lookahead (none free: the lane whose next obstacle is farthest
ahead), and emits ego-frame waypoints spaced by arc length along a smooth
(smoothstep) lateral transition to that lane's centre — the same `drive_3d`
waypoints a planner would output. The transition is `lane_change_m` long, or
shorter (down to `min_lane_change_m`) where that path would not pass the
next obstacle in the car's lane `pass_margin_m` clear.

The choice depends only on where the car is, not on what the driver chose
before, so the labels of states the expert did not drive into itself
(pushes, pose jumps, a planner's driving) are a function of the scene the
camera sees. In the expert's own driving these rules plan exactly what a
lane memory and fixed 25 m changes planned (every plan of the 200 recorded
train, validation and held-out seeds compared): it turns out 45 m before an
obstacle and its plans pass it. `run_episode` drives them through the
bridge's conversion (`trajectory.convert_waypoints`) and the simulator's pure-pursuit follower, and reports whether the car stayed on
the road without hitting anything.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from plan_stack.config import param, validate
from plan_stack.embodiments.drive.errors import DriveConfigError
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
    min_lane_change_m: float = param("shortest lane change, when a lane_change_m one would not pass the obstacle "
                                     "in the car's lane (m)", 8.0, min=1.0)
    pass_margin_m: float = param("lateral gap a lane change keeps between the car's side and the obstacle it "
                                 "leaves behind (m)", 0.0, min=0.0)
    waypoints: int = param("waypoints per plan", 20, min=2, max=200)
    spacing_m: float = param("arc-length spacing of the waypoints (m)", 2.0, min=0.1)
    replan_s: float = param("time between plans (s)", 0.5, min=0.01)

    def __post_init__(self) -> None:
        validate(self)
        if self.min_lane_change_m > self.lane_change_m:
            raise DriveConfigError(f"min_lane_change_m: {self.min_lane_change_m} m exceeds lane_change_m "
                                   f"({self.lane_change_m} m)")


class ScriptedDriver:
    def __init__(self, scene: DriveSceneConfig, cfg: DriverConfig, vehicle: VehicleParams | None = None) -> None:
        self.scene, self.cfg, self.vehicle = scene, cfg, vehicle or VehicleParams()
        self.lane = scene.start_lane  # the lane chosen last (for callers; the choice does not read it)

    def _blocked(self, lane: int, x0: float, x1: float, obstacles: list[Obstacle]) -> bool:
        """An obstacle in `lane` overlaps [x0, x1]: the next one from x0 starts before x1."""
        o = self._next_obstacle(lane, x0, obstacles)
        return o is not None and o.x - o.half_length < x1

    def _next_obstacle(self, lane: int, x: float, obstacles: list[Obstacle], behind_m: float = 0.0) -> Obstacle | None:
        """The obstacle in `lane` with the nearest rear among those whose front is ahead of x - behind_m."""
        ahead = [o for o in obstacles if o.lane == lane and o.x + o.half_length > x - behind_m]
        return min(ahead, key=lambda o: o.x - o.half_length, default=None)

    def _gap_ahead(self, lane: int, x: float, obstacles: list[Obstacle], behind_m: float = 0.0) -> float:
        """Distance from the ego's x to the rear of `_next_obstacle` (negative: alongside or just passed; inf:
        none)."""
        o = self._next_obstacle(lane, x, obstacles, behind_m)
        return math.inf if o is None else o.x - o.half_length - x

    def lane_of(self, y: float) -> int:
        """The lane whose centre is nearest to `y`."""
        return min(range(self.scene.lanes), key=lambda lane: abs(y - self.scene.lane_center_y(lane)))

    def choose_lane(self, x: float, y: float, obstacles: list[Obstacle]) -> int:
        cfg, here = self.cfg, self.lane_of(y)
        if not self._blocked(here, x, x + cfg.lookahead_m, obstacles):
            self.lane = here
            return here
        free = [lane for lane in range(self.scene.lanes)
                if not self._blocked(lane, x - cfg.clearance_m, x + cfg.lookahead_m, obstacles)]
        if free:
            self.lane = min(free, key=lambda lane: abs(lane - here))
        else:  # every lane blocked: the most room ahead, counting obstacles within clearance behind as alongside
            self.lane = max(range(self.scene.lanes), key=lambda lane: (
                self._gap_ahead(lane, x, obstacles, cfg.clearance_m), lane == here, -abs(lane - here)))
        return self.lane

    def _lane_change_m(self, x: float, y: float, here: int, lane_y: float, obstacles: list[Obstacle]) -> float:
        """For a change out of the car's lane `here`: `lane_change_m`, or the longest shorter change (not below
        `min_lane_change_m`) whose path is `pass_margin_m` clear of the next obstacle in the car's lane when the
        car's front reaches it."""
        cfg, veh, move = self.cfg, self.vehicle, lane_y - y
        o = self._next_obstacle(here, x, obstacles)
        if o is None:
            return cfg.lane_change_m
        reach_m = o.x - o.half_length - (veh.length_m - veh.rear_overhang_m) - x  # rear axle when the front is there
        clear = o.half_width + 0.5 * veh.width_m + cfg.pass_margin_m
        need = (clear - (y - o.y) * math.copysign(1.0, move)) / abs(move)  # fraction of the move done by then
        if need <= 0.0:
            return cfg.lane_change_m
        if need >= 1.0 or reach_m <= 0.0:
            return cfg.min_lane_change_m
        u = 0.5 - math.sin(math.asin(1.0 - 2.0 * need) / 3.0)  # smoothstep(u) = need
        return min(cfg.lane_change_m, max(cfg.min_lane_change_m, reach_m / u))

    def plan(self, x: float, y: float, yaw: float, obstacles: list[Obstacle]) -> np.ndarray:
        """[P, 3] ego-frame waypoints (x forward, y left, z = 0), spaced by arc length (horizon 0)."""
        cfg = self.cfg
        here, lane = self.lane_of(y), self.choose_lane(x, y, obstacles)
        lane_y = self.scene.lane_center_y(lane)
        change_m = self._lane_change_m(x, y, here, lane_y, obstacles) if lane != here else cfg.lane_change_m
        xs = x + cfg.spacing_m * np.arange(1, cfg.waypoints + 1)
        u = np.clip((xs - x) / change_m, 0.0, 1.0)
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
    expert = ScriptedDriver(scene, driver, vehicle)
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
    """The `embodiments.base.Expert` entry point: one episode of driving for `seed` (default duration).

    The episode builds its own simulator from the scene config; a `sim` cannot be reused here.
    """
    from plan_stack.embodiments.base import Demonstration
    from plan_stack.robots import profile

    profile("drive").check_task(task)
    if sim is not None:
        raise ValueError("sim: the driving expert builds its simulator from its scene config; pass None")
    episode = run_episode(seed)
    return Demonstration("drive", task, seed, episode.success, episode)
