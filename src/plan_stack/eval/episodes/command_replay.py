"""Replay an ALOHA closed-loop bag's controller commands on the joint-controlled rig, without ROS.

    python -m plan_stack.eval.episodes.command_replay BAG --seed S [--damping JOINT=N·m·s/rad ...] [--json PATH]

Why: a measured-state limit violation of a closed-loop episode (`run-episodes`, `make demo`) depends on
the timing of that run and seldom repeats when the seed is run again. The bag of the run
(`make demo`, `eval.episodes.demo`) holds every trajectory the bridge sent to the simulated controllers; fed
to the same followers (`TrajectoryFollower`, JTC semantics) at the sim time the recorder received them, on
the same seed's scene, the physics repeats the run's joint motion deterministically (measured: seed
100015's right `wrist_rotate` at 3.54 rad/s at 5.50 s in the run, 3.54 rad/s at 5.504 s in the replay). Model
changes (`--damping`) can then be tried against that very motion. The rig is today's model, servo
damping (`aloha.model.SERVO_DAMPING`) included; `--damping JOINT=0` gives a joint gym-aloha's undamped
servo back (the rig of runs recorded before 2026-12-04 for the wrists, before 2026-12-05 for the waist,
shoulder and elbow; the figures above were measured on it).

Reports, per arm joint, the peak speed at the physics rate (2 ms) and on the joint-state grid, the time of
the peak and how many physics steps were over `STATE_VELOCITY_FACTOR` x the URDF velocity limit (the
check of `eval.episodes.tally`), the peak tracking error |reference - measured| (what `aloha_bridge`'s
protective stop compares with `collision_tracking_error`), the arms' contact (geoms) when the peak came
within `CONTACT_WINDOW_S` of the two arms touching (a collision's impulse, not control:
docs/decisions/0007-aloha-protective-stop.md), and the same peaks from the bag's `/joint_states` for comparison.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from plan_stack.trajectory.core import Trajectory

__all__ = ["CONTACT_WINDOW_S", "ReplayError", "replay", "main"]

#: A joint's peak speed this soon (sim s) after the two arms touched is attributed to that contact.
CONTACT_WINDOW_S = 0.1


class ReplayError(ValueError):
    """The bag cannot be replayed (no controller commands, unknown joints, bad damping option)."""


def _read_run(bag: str | Path, joints) -> tuple[list[tuple[float, str, Trajectory]], dict[str, tuple[float, float]],
                                                float | None]:
    """One pass over the bag: (bag time s, controller key, Trajectory) of every
    `/<key>_controller/joint_trajectory` message in time order (the bag time is the recorder's receipt on sim
    time); joint -> (peak speed, its stamp) over `/joint_states`; the last joint-state stamp (None without)."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    from plan_stack.embodiments.aloha.bridge import ARM_CONTROLLER_JOINTS
    from plan_stack.ros.trajectory import trajectory_from_cdr
    from plan_stack.stamps import sec_nanosec_to_s

    commands: list[tuple[float, str, Trajectory]] = []
    peaks: dict[str, tuple[float, float]] = {}
    last = None
    with AnyReader([Path(bag)], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
        keys = {}
        for c in reader.connections:
            key = c.topic.strip("/").removesuffix("_controller/joint_trajectory")
            if c.topic.endswith("_controller/joint_trajectory") and key in ARM_CONTROLLER_JOINTS:
                keys[c.id] = key
        if not keys:
            raise ReplayError(f"{bag}: no /<arm|gripper>_controller/joint_trajectory topics to replay")
        wanted = [c for c in reader.connections if c.id in keys or c.topic == "/joint_states"]
        for c, t_ns, raw in reader.messages(connections=wanted):
            if c.id in keys:
                commands.append((t_ns * 1e-9, keys[c.id], trajectory_from_cdr(bytes(raw))))
                continue
            msg: Any = reader.deserialize(raw, c.msgtype)  # a rosbags sensor_msgs/JointState
            t = sec_nanosec_to_s(msg.header.stamp.sec, msg.header.stamp.nanosec)
            last = t if last is None else max(last, t)
            if len(msg.velocity) != len(msg.name):
                continue
            for name, v in zip(msg.name, msg.velocity):
                if name in joints and abs(v) > peaks.get(name, (0.0, 0.0))[0]:
                    peaks[name] = (abs(float(v)), t)
    commands.sort(key=lambda x: x[0])
    return commands, peaks, last


def replay(bag: str | Path, seed: int, damping: dict[str, float] | None = None, task: str = "transfer_cube",
           joint_state_rate_hz: float = 50.0, tail_s: float = 1.0) -> list[dict]:
    """One row per arm joint (see module doc), over the time the run measured (to the bag's last joint state;
    without joint states, `tail_s` past the last command). `damping`: MuJoCo joint damping (N·m·s/rad) by stack
    joint name (e.g. `right_wrist_rotate`), set on the rig before the replay."""
    from plan_stack.embodiments.aloha.bridge import AlohaBridgeConfig, load_limits
    from plan_stack.embodiments.aloha.model import JOINT_NAMES
    from plan_stack.embodiments.aloha.sim import AlohaSim, RigControllers
    from plan_stack.eval.episodes.tally import STATE_VELOCITY_FACTOR

    arms = [i for i, n in enumerate(JOINT_NAMES) if not n.endswith("_gripper")]
    commands, recorded, last_state_s = _read_run(bag, {JOINT_NAMES[i] for i in arms})
    sim = AlohaSim(task)
    model = sim.model
    for name, value in (damping or {}).items():
        arm, _, joint = name.partition("_")
        if name not in JOINT_NAMES or joint == "gripper" or not (np.isfinite(value) and value >= 0):
            raise ReplayError(f"damping: {name}={value}: expected an arm joint of {JOINT_NAMES} and a value >= 0")
        model.dof_damping[model.joint(f"vx300s_{arm}/{joint}").dofadr[0]] = value
    sim.reset(seed=seed)
    controllers = RigControllers()
    limits = load_limits(AlohaBridgeConfig())  # the URDF's velocity limits (what the episode checks)
    v_lim = np.array([limits.v_max[list(limits.joint_names).index(JOINT_NAMES[i])] for i in arms])
    every = max(int(round(1.0 / (joint_state_rate_hz * sim.timestep_s))), 1)
    # as long as the run measured (its last joint state), else `tail_s` past the last command
    end_s = last_state_s if last_state_s is not None else commands[-1][0] + tail_s
    peak = np.zeros(len(arms))
    peak_t = np.zeros(len(arms))
    peak_grid = np.zeros(len(arms))
    over = np.zeros(len(arms), dtype=int)
    track = np.zeros(len(arms))
    contact_at_peak = [""] * len(arms)
    last_contact: tuple[float, str] = (-np.inf, "")  # the newest arm-arm contact (sim s, geoms)
    k = step = 0
    while sim.time_s < end_s:
        t = sim.time_s
        while k < len(commands) and commands[k][0] <= t + 1e-9:
            controllers.followers[commands[k][1]].set_trajectory(commands[k][2], t)
            k += 1
        command = controllers.command(t)
        sim.set_command(command)
        sim.step()
        step += 1
        np.maximum(track, np.abs(command[arms] - sim.joint_positions()[arms]), out=track)
        v = np.abs(sim.joint_velocities()[arms])
        touching = sim.arm_contacts()
        if touching:
            left, right, force = max(touching, key=lambda c: c[2])
            last_contact = (sim.time_s, f"{left} - {right} ({force:.0f} N)")
        higher = v > peak
        peak[higher], peak_t[higher] = v[higher], sim.time_s
        for j in np.flatnonzero(higher):  # a peak within CONTACT_WINDOW_S of the arms touching is their impulse
            contact_at_peak[j] = last_contact[1] if sim.time_s - last_contact[0] <= CONTACT_WINDOW_S else ""
        over += v > v_lim * STATE_VELOCITY_FACTOR
        if step % every == 0:
            np.maximum(peak_grid, v, out=peak_grid)
    rows = []
    for n, i in enumerate(arms):
        name = JOINT_NAMES[i]
        bag_peak, bag_t = recorded.get(name, (float("nan"), float("nan")))
        rows.append(dict(joint=name, limit_rad_s=round(float(v_lim[n]), 4), peak_rad_s=round(float(peak[n]), 3),
                         peak_t_s=round(float(peak_t[n]), 3), peak_on_grid_rad_s=round(float(peak_grid[n]), 3),
                         steps_over=int(over[n]), peak_tracking_error_rad=round(float(track[n]), 3),
                         arm_contact=contact_at_peak[n],
                         bag_peak_rad_s=round(bag_peak, 3), bag_peak_t_s=round(bag_t, 3)))
    return rows


def _damping(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name] = float(value) if sep else float("nan")
        except ValueError:
            out[name] = float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bag", help="a closed-loop ALOHA bag folder (make demo: out/demo/closed_loop_aloha_<seed>)")
    ap.add_argument("--seed", type=int, required=True, help="the episode's seed (object placement)")
    ap.add_argument("--damping", action="append", default=[], metavar="JOINT=VALUE",
                    help="MuJoCo joint damping (N·m·s/rad) of a stack arm joint, e.g. right_wrist_rotate=0.3")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    try:
        rows = replay(args.bag, args.seed, _damping(args.damping))
    except ReplayError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    print(f"{'joint':22s} {'limit':>6s} {'peak':>6s} {'at s':>7s} {'grid':>6s} {'over':>5s} {'track':>6s} "
          f"{'bag peak':>8s} {'at s':>7s}  arm contact at the peak")
    for r in rows:
        print(f"{r['joint']:22s} {r['limit_rad_s']:6.2f} {r['peak_rad_s']:6.2f} {r['peak_t_s']:7.3f} "
              f"{r['peak_on_grid_rad_s']:6.2f} {r['steps_over']:5d} {r['peak_tracking_error_rad']:6.3f} "
              f"{r['bag_peak_rad_s']:8.2f} "
              f"{r['bag_peak_t_s']:7.3f}  {r['arm_contact'] or '-'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
