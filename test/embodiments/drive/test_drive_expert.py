"""Scripted driver: 60 s without leaving the road or hitting an obstacle on seeded episodes; lane choice and
lane-change length from the car's state alone."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.drive.errors import DriveConfigError
from plan_stack.embodiments.drive.expert import DriverConfig, ScriptedDriver, run_episode
from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, Obstacle
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


def test_the_expert_reproduces_its_fixed_length_lane_changes_on_its_own_driving():
    """Shortened changes fire only in states the expert does not drive into itself: with them disabled
    (min = lane_change_m) its plans over a whole episode are the same arrays."""
    fixed = ScriptedDriver(SCENE, DriverConfig(min_lane_change_m=25.0))
    differ = []

    def compare(sim, pts):
        st = sim.state
        if not np.array_equal(fixed.plan(st.x, st.y, st.yaw, sim.obstacles), pts):
            differ.append(sim.time_s)

    assert run_episode(3, 60.0, scene=SCENE, on_plan=compare).success
    assert differ == []


def test_seen_late_an_obstacle_is_passed_by_a_shorter_lane_change():
    """At cruise speed, seeing obstacles only 15 m ahead: the shortened change passes them, a
    25 m one runs into them (the states a planner's late reaction leaves the expert to label)."""
    late = [run_episode(s, 30.0, scene=SCENE, driver=DriverConfig(lookahead_m=15.0)).success for s in range(6)]
    fixed = [run_episode(s, 30.0, scene=SCENE, driver=DriverConfig(lookahead_m=15.0, min_lane_change_m=25.0)).success
             for s in range(6)]
    assert sum(late) >= 5 and sum(fixed) <= 1, (late, fixed)


def test_the_lane_follows_the_car_not_the_drivers_last_choice():
    scene = DriveSceneConfig(obstacles=1, first_obstacle_m=200.0)
    sim = DriveSim(scene, VehicleParams(), seed=0)
    driver = ScriptedDriver(scene, DriverConfig())
    driver.lane = 1  # chosen before, while the car was elsewhere
    pts = driver.plan(0.0, scene.lane_center_y(0), 0.0, sim.obstacles)
    assert driver.lane == 0 and np.allclose(pts[:, 1], 0.0)  # its own lane is free: keep it


def test_with_every_lane_blocked_it_takes_the_one_with_most_room():
    scene = DriveSceneConfig(obstacles=0)
    near, far = Obstacle(20.0, scene.lane_center_y(0), 2.1, 0.9, 0), Obstacle(40.0, scene.lane_center_y(1), 2.1, 0.9, 1)
    driver = ScriptedDriver(scene, DriverConfig())
    pts = driver.plan(0.0, scene.lane_center_y(0), 0.0, [near, far])
    assert driver.lane == 1
    rear_axle_at_contact = near.x - near.half_length - (VehicleParams().length_m - VehicleParams().rear_overhang_m)
    y_then = np.interp(rear_axle_at_contact, pts[:, 0], pts[:, 1]) + scene.lane_center_y(0)
    assert y_then - near.y >= near.half_width + 0.5 * VehicleParams().width_m - 1e-9  # clear by the time it is there
    assert pts[-1, 1] == np.float64(scene.lane_center_y(1) - scene.lane_center_y(0))


def test_a_minimum_lane_change_longer_than_the_change_is_refused():
    with pytest.raises(DriveConfigError, match="min_lane_change_m"):
        DriverConfig(lane_change_m=10.0, min_lane_change_m=12.0)
