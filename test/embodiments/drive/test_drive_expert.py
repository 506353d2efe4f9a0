"""Scripted driver: 60 s without leaving the road or hitting an obstacle on seeded episodes."""
from __future__ import annotations

import numpy as np

from plan_stack.embodiments.drive.expert import DriverConfig, ScriptedDriver, run_episode
from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim
from plan_stack.embodiments.drive.vehicle import VehicleParams

SCENE = DriveSceneConfig(timestep_s=0.02)  # 50 Hz physics keeps 10 x 60 s episodes short


def test_expert_drives_60_s_safely_on_seeded_episodes():
    wins, lane_changes = 0, 0
    for seed in range(10):
        lanes = []
        ep = run_episode(seed, 60.0, scene=SCENE, on_plan=lambda sim, pts: lanes.append(np.sign(sim.state.y)))
        wins += ep.success
        lane_changes += int(np.count_nonzero(np.diff(lanes)))
        assert ep.rejected_plans == 0 and ep.distance_m > 400.0
    assert wins >= 9, wins
    assert lane_changes >= 10  # the obstacles forced it out of its lane repeatedly


def test_without_looking_ahead_it_crashes():
    seed = next(s for s in range(50) if DriveSim(SCENE, VehicleParams(), seed=s).obstacles[0].lane == SCENE.start_lane)
    ep = run_episode(seed, 15.0, scene=SCENE, driver=DriverConfig(lookahead_m=5.0))
    assert not ep.success and ep.collided_with == 0


def test_plans_are_ego_frame_and_pick_a_free_lane():
    scene = DriveSceneConfig(obstacles=1, first_obstacle_m=30.0)
    sim = DriveSim(scene, VehicleParams(), seed=0)
    driver = ScriptedDriver(scene, DriverConfig())
    blocked = sim.obstacles[0].lane
    driver.lane = blocked
    y = scene.lane_center_y(blocked)
    pts = driver.plan(0.0, y, 0.0, sim.obstacles)
    assert driver.lane != blocked
    assert pts[0, 0] == 2.0 and np.all(np.diff(pts[:, 0]) > 0)
    assert pts[-1, 1] == np.float64(scene.lane_center_y(driver.lane) - y)  # ends on the free lane's centre
    rotated = driver.plan(0.0, y, np.pi / 2, sim.obstacles)  # heading +y: the road's +x is to the right
    assert rotated[0, 1] < -1.9
