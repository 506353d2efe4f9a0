"""Simulator throughput of all three embodiments: physics steps/s and rendered camera sets/s.

    python bench/sim.py [--json PATH] [--seconds 2] [--seed 0] [--sim aloha franka drive]

Rows per simulator: physics driven by its followers exactly as the sim node
steps it (`*_controlled`; ALOHA also bare physics, `aloha_physics`), and
rendering of its camera set at 640x480 and 320x240 (`*_render`; ALOHA: the
three stack cameras, Franka: external + wrist, driving: the front camera),
advancing the state between sets as the node does. Seeded scenes, warm-up
excluded, shadows off, EGL. Columns: sim, cameras, width, height,
steps_per_s, sets_per_s, set_ms_mean, set_ms_p95, set_ms_worst.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from report import add_json_option, report  # bench/report.py: shared table + JSON output

os.environ.setdefault("MUJOCO_GL", "egl")

SIZES = ((640, 480), (320, 240))
COLUMNS = ["sim", "cameras", "width", "height", "steps_per_s", "sets_per_s", "set_ms_mean", "set_ms_p95",
           "set_ms_worst"]


def _rate(step, seconds: float, warmup: int = 200, batch: int = 100) -> float:
    """Calls of `step` per second, after `warmup` calls."""
    for _ in range(warmup):
        step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            step()
        n += batch
    return n / (time.perf_counter() - t0)


def _physics_row(name: str, step, seconds: float, steps_per_call: int = 1, warmup: int = 200,
                 batch: int = 100) -> dict:
    rate = _rate(step, seconds, warmup, batch) * steps_per_call
    return {"sim": name, "cameras": 0, "width": 0, "height": 0, "steps_per_s": round(rate, 1), "sets_per_s": None}


def _render_row(name: str, cameras: int, render_set, advance, w: int, h: int, seconds: float) -> dict:
    """Camera sets per second (and per-set latency), with `advance()` giving a new state before each set."""
    for _ in range(3):
        render_set()  # warm-up (context, textures)
    times = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or len(times) < 5:
        t = time.perf_counter()
        advance()  # a new state each set, as in the node
        render_set()
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1e3
    return {"sim": name, "cameras": cameras, "width": w, "height": h, "steps_per_s": None,
            "sets_per_s": round(len(times) / (time.perf_counter() - t0), 2), "set_ms_mean": round(float(ms.mean()), 2),
            "set_ms_p95": round(float(np.percentile(ms, 95)), 2), "set_ms_worst": round(float(ms.max()), 2)}


def _hold_target(follower, names, q0: np.ndarray, now_s: float) -> None:
    """A long trajectory to q0 + 0.05 rad, so the follower interpolates every step as in the node."""
    from plan_stack.trajectory.core import Trajectory

    target = q0[None, :] + 0.05
    follower.set_trajectory(Trajectory(names, 0.0, np.array([1e6]), target, np.zeros_like(target),
                                       np.zeros_like(target)), now_s)


def aloha_rows(seconds: float, seed: int) -> list[dict]:
    from plan_stack.embodiments.aloha.bridge import ARM_CONTROLLER_JOINTS
    from plan_stack.embodiments.aloha.model import JOINT_NAMES
    from plan_stack.embodiments.aloha.sim import AlohaSim, CameraRenderer
    from plan_stack.trajectory.core import TrajectoryFollower

    sim = AlohaSim("transfer_cube", offscreen_size=(640, 480))
    sim.reset(seed=seed)
    # bare physics in batches of 100 steps per call (200 steps warm-up)
    rows = [_physics_row("aloha_physics", lambda: sim.step(100), seconds, steps_per_call=100, warmup=2, batch=1)]
    sim.reset(seed=seed)
    q0 = sim.joint_positions()
    followers, cols = [], []
    for joints in ARM_CONTROLLER_JOINTS.values():
        c = [JOINT_NAMES.index(j) for j in joints]
        f = TrajectoryFollower(joints, q0[c])
        _hold_target(f, joints, q0[c], sim.time_s)
        followers.append(f)
        cols.append(c)
    cmd = np.zeros(14)

    def step() -> None:
        t = sim.time_s
        for f, c in zip(followers, cols):
            cmd[c] = f.sample(t).positions
        sim.set_command(cmd)
        sim.step()

    rows.append(_physics_row("aloha_controlled", step, seconds))
    for w, h in SIZES:
        sim.reset(seed=seed)
        r = CameraRenderer(sim, w, h)
        try:
            rows.append(_render_row("aloha_render", 3, r.render_all, lambda: sim.step(10), w, h, seconds))
        finally:
            r.close()
    return rows


def franka_rows(seconds: float, seed: int) -> list[dict]:
    from plan_stack.embodiments.franka.model import READY_POSE
    from plan_stack.embodiments.franka.sim import Cameras, FrankaSim
    from plan_stack.trajectory.core import TrajectoryFollower

    sim = FrankaSim(offscreen_size=(640, 480))
    sim.reset(seed=seed)
    names = tuple(f"j{i}" for i in range(7))
    follower = TrajectoryFollower(names, np.array(READY_POSE))
    _hold_target(follower, names, np.array(READY_POSE), sim.time_s)

    def step() -> None:
        sim.set_command(follower.sample(sim.time_s).positions)
        sim.step()

    rows = [_physics_row("franka_controlled", step, seconds)]
    for w, h in SIZES:
        sim.reset(seed=seed)
        cams = Cameras(sim, w, h)
        try:
            rows.append(_render_row("franka_render", 2, lambda: [cams.render(c) for c in cams.cameras],
                                    lambda: sim.step(10), w, h, seconds))
        finally:
            cams.close()
    return rows


def drive_rows(seconds: float, seed: int) -> list[dict]:
    from plan_stack.embodiments.drive.follower import FollowerConfig, PurePursuit
    from plan_stack.embodiments.drive.sim import DriveSceneConfig, DriveSim, FrontCamera
    from plan_stack.embodiments.drive.trajectory import DriveTrajectoryConfig, convert_waypoints
    from plan_stack.embodiments.drive.vehicle import VehicleParams

    vehicle = VehicleParams()
    sim = DriveSim(DriveSceneConfig(obstacles=0), vehicle, seed=seed, offscreen_size=(640, 480))
    follower = PurePursuit(vehicle, FollowerConfig())
    s = np.arange(1, 301) * 2.0
    conv = convert_waypoints(np.c_[s, 0 * s], 0.0, vehicle, DriveTrajectoryConfig(), v0=0.0)
    follower.set_trajectory(conv.trajectory.transformed(sim.state.x, sim.state.y, 0.0, "odom"), 0.0)

    def step() -> None:
        cmd = follower.command(sim.state, sim.time_s)
        sim.step(cmd.accel_mps2, cmd.steer_rad)

    rows = [_physics_row("drive_controlled", step, seconds)]
    for w, h in SIZES:
        cam = FrontCamera(sim, w, h)
        try:
            rows.append(_render_row("drive_render", 1, cam.render, lambda: [step() for _ in range(10)], w, h, seconds))
        finally:
            cam.close()
    return rows


SIMS = {"aloha": aloha_rows, "franka": franka_rows, "drive": drive_rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--seconds", type=float, default=2.0, help="measurement time per row (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sim", nargs="+", choices=list(SIMS), default=list(SIMS),
                        help="simulators to measure (default: all)")
    args = parser.parse_args()
    rows = [row for name in args.sim for row in SIMS[name](args.seconds, args.seed)]
    report(rows, COLUMNS, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
