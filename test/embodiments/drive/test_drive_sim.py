"""Road world + pure pursuit: the follower tracks plans, collisions/road departure are detected,
pose lookups interpolate, and the camera model projects road points onto the rendered lane marks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plan_stack.config import ConfigError
from plan_stack.embodiments.drive.follower import FollowerConfig, PurePursuit
from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, FrontCamera, project_ego_points
from plan_stack.embodiments.drive.trajectory import DriveTrajectoryConfig, convert_waypoints
from plan_stack.embodiments.drive.vehicle import BicycleState, VehicleParams

VEH = VehicleParams()


def _lane_change(length_m=60.0, dy=3.5, count=60):
    x = np.linspace(1.0, length_m, count)
    y = dy * np.clip((x - 10.0) / 30.0, 0, 1) ** 2 * (3 - 2 * np.clip((x - 10.0) / 30.0, 0, 1))
    return np.c_[x, y]


def test_scene_config_rules():
    with pytest.raises(ConfigError, match="^start_lane"):
        DriveSceneConfig(lanes=1, start_lane=1)
    with pytest.raises(ConfigError, match="^obstacle_gap_m"):
        DriveSceneConfig(obstacle_gap_m=(50.0, 40.0))


def test_obstacles_are_seeded_and_in_lanes():
    scene = DriveSceneConfig(road_length_m=300.0, obstacles=4)
    a, b = DriveSim(scene, VEH, seed=3), DriveSim(scene, VEH, seed=3)
    assert a.obstacles == b.obstacles and len(a.obstacles) == 4
    assert {o.y for o in a.obstacles} <= {scene.lane_center_y(0), scene.lane_center_y(1)}
    gaps = np.diff([o.x for o in a.obstacles])
    assert np.all(gaps >= scene.obstacle_gap_m[0]) and np.all(gaps <= scene.obstacle_gap_m[1])


def test_pure_pursuit_follows_a_lane_change_then_stops_at_the_end():
    scene = DriveSceneConfig(road_length_m=200.0, obstacles=0)
    sim = DriveSim(scene, VEH)
    sim.state.v = 5.0
    conv = convert_waypoints(_lane_change(), 0.0, VEH, DriveTrajectoryConfig(cruise_speed_mps=6.0), v0=5.0)
    traj = conv.trajectory.transformed(sim.state.x, sim.state.y, sim.state.yaw, "odom")
    pp = PurePursuit(VEH, FollowerConfig())
    pp.set_trajectory(traj, 0.0)
    errors = []
    while sim.time_s < traj.duration_s:
        cmd = pp.command(sim.state, sim.time_s)
        assert cmd.following
        sim.step(cmd.accel_mps2, cmd.steer_rad)
        d = np.hypot(traj.x - sim.state.x, traj.y - sim.state.y)
        errors.append(d.min())
    assert max(errors) < 0.35, max(errors)
    assert sim.state.y == pytest.approx(scene.lane_center_y(1), abs=0.2)
    assert not sim.left_road and sim.collided_with is None
    for _ in range(int(5.0 / sim.timestep_s)):  # after the end: brake and hold, never extrapolate
        cmd = pp.command(sim.state, sim.time_s)
        assert not cmd.following
        sim.step(cmd.accel_mps2, cmd.steer_rad)
    assert sim.state.v == 0.0


def _steer_on_rows(traj, state, vehicle, cfg):
    """Pure pursuit on [N, 2] point rows with np.interp, as the follower computed it before its columns."""
    pts = np.stack([traj.x, traj.y], axis=1)
    d = pts[1:] - pts[:-1]
    seg_len = np.linalg.norm(d, axis=1)
    station = np.concatenate([[0.0], np.cumsum(seg_len)])
    pos = np.array([state.x, state.y])
    rel = pos - pts[:-1]
    w = np.clip((rel[:, 0] * d[:, 0] + rel[:, 1] * d[:, 1]) / np.maximum(seg_len**2, 1e-12), 0.0, 1.0)
    gap = rel - w[:, None] * d
    i = int(np.argmin(gap[:, 0] ** 2 + gap[:, 1] ** 2))
    s_goal = station[i] + w[i] * seg_len[i] + max(cfg.min_lookahead_m, cfg.lookahead_time_s * state.v)
    if s_goal <= station[-1]:
        goal = np.array([np.interp(s_goal, station, pts[:, 0]), np.interp(s_goal, station, pts[:, 1])])
    else:
        goal = pts[-1] + (s_goal - station[-1]) * np.array([math.cos(traj.yaw[-1]), math.sin(traj.yaw[-1])])
    dx, dy = goal - pos
    alpha = math.atan2(dy, dx) - state.yaw
    return math.atan2(2.0 * vehicle.wheelbase_m * math.sin(alpha), max(math.hypot(dx, dy), 1e-6))


def test_pure_pursuit_steers_to_the_bit_as_on_point_rows():
    """The follower computes on per-coordinate columns for speed; the labels it drives must not move by a bit."""
    rng = np.random.default_rng(7)
    cfg = FollowerConfig()
    for trial in range(20):
        wp = _lane_change(length_m=rng.uniform(10.0, 60.0), dy=rng.uniform(-3.5, 3.5), count=int(rng.integers(3, 20)))
        traj = convert_waypoints(wp, 0.0, VEH, DriveTrajectoryConfig(), v0=float(rng.uniform(0.0, 8.0))).trajectory
        traj = traj.transformed(rng.uniform(0, 100), rng.uniform(-3, 3), rng.uniform(-0.3, 0.3), "odom")
        pp = PurePursuit(VEH, cfg)
        pp.set_trajectory(traj, 0.0)
        for _ in range(25):
            state = BicycleState(x=float(rng.uniform(traj.x.min() - 5, traj.x.max() + 5)),
                                 y=float(rng.uniform(traj.y.min() - 3, traj.y.max() + 3)),
                                 yaw=float(rng.uniform(-0.5, 0.5)), v=float(rng.uniform(0, 12)))
            assert pp.command(state, 0.0).steer_rad == _steer_on_rows(traj, state, VEH, cfg), trial


def test_collision_and_road_departure_are_detected():
    scene = DriveSceneConfig(road_length_m=200.0, obstacles=1, first_obstacle_m=30.0)
    sim = DriveSim(scene, VEH, seed=0)
    sim.state.y = sim.obstacles[0].y
    sim.state.v = 10.0
    while sim.time_s < 4.0 and sim.collided_with is None:
        sim.step(0.0, 0.0)
    assert sim.collided_with == 0
    front = sim.state.x + VEH.length_m - VEH.rear_overhang_m
    assert front == pytest.approx(sim.obstacles[0].x - sim.obstacles[0].half_length, abs=0.15)
    sim = DriveSim(scene, VEH, seed=0)
    sim.state.v = 5.0
    while sim.time_s < 5.0 and not sim.left_road:
        sim.step(0.0, -0.3)
    assert sim.left_road and sim.collided_with is None


def test_pose_history_interpolates():
    sim = DriveSim(DriveSceneConfig(road_length_m=100.0, obstacles=0), VEH)
    sim.state.v = 4.0
    for _ in range(100):
        sim.step(0.0, 0.0)
    x, y, _ = sim.pose_at(0.505)
    assert x == pytest.approx(4.0 * 0.505, abs=1e-6) and y == pytest.approx(sim.state.y)
    assert sim.pose_at(-1.0) is None and sim.pose_at(sim.time_s + 1.0) is None


def test_camera_sees_the_road_where_the_model_projects_it():
    scene = DriveSceneConfig(road_length_m=200.0, obstacles=0)
    sim = DriveSim(scene, VEH, offscreen_size=(160, 120))
    cam = FrontCamera(sim, 160, 120)
    try:
        img = cam.render().astype(float)
        assert img.std() > 10.0
        # the right edge line (white) 6 m ahead; road (grey) on the lane centre; grass beyond the edge
        edge_y = -scene.road_half_width_m + 0.15 - sim.state.y
        uv, inside = project_ego_points(sim, np.array([[6.0, edge_y], [6.0, 0.0], [15.0, edge_y - 2.0]]), cam.model)
        assert inside.all()
        px = [img[int(round(v)), int(round(u))] for u, v in uv]
        assert px[0].mean() > px[1].mean() + 30 and abs(px[0][0] - px[0][2]) < 30  # white line
        assert 50 < px[1].mean() < 150 and abs(px[1][0] - px[1][2]) < 20  # grey asphalt
        assert px[2][1] > px[2][0] + 20  # green grass
        # behind the camera: not projected
        _, inside = project_ego_points(sim, np.array([[-5.0, 0.0]]), cam.model)
        assert not inside[0]
    finally:
        cam.close()


def test_displace_moves_the_pose_only_where_it_stays_on_the_road_clear_of_obstacles():
    scene = DriveSceneConfig(road_length_m=200.0, obstacles=1, first_obstacle_m=40.0)
    sim = DriveSim(scene, VEH, seed=0)
    sim.state.v = 5.0
    sim.step(0.0, 0.0)
    y0, yaw0, v0 = sim.state.y, sim.state.yaw, sim.state.v
    assert sim.displace(0.5, 0.1)
    assert (sim.state.y, sim.state.yaw, sim.state.v) == pytest.approx((y0 + 0.5, yaw0 + 0.1, v0))
    assert sim.pose_at(sim.time_s)[1:] == pytest.approx((y0 + 0.5, yaw0 + 0.1))  # no stale pose at this instant
    before = (sim.state.y, sim.state.yaw)
    assert not sim.displace(-1.5, 0.0)  # beyond the right edge of the road
    assert not sim.displace(0.0, 0.0, clear_ahead_m=60.0)  # the obstacle 40 m ahead is nearer than that
    sim.state.x = sim.obstacles[0].x - 1.0
    assert not sim.displace(sim.obstacles[0].y - sim.state.y, -sim.state.yaw)  # onto the obstacle
    assert (sim.state.y, sim.state.yaw) == before and not sim.left_road and sim.collided_with is None
    with pytest.raises(ValueError, match="finite"):
        sim.displace(float("nan"), 0.0)
