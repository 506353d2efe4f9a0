"""How deep the two ALOHA arms' commanded poses interpenetrate, per closed-loop episode (from its bag).

    plan-stack run-episodes --robot aloha --seeds 200000-200019 --bag-dir BAGS --json EPISODES.json
    python scripts/aloha_arm_clearance.py BAGS --json OUT.json

Why: a guard against arm collisions would refuse trajectories whose commanded poses bring the grippers into
each other, and its threshold must come from validation seeds, not the held-out ones
(docs/decisions/0007-aloha-protective-stop.md).
The controller commands of each bag are replayed through the same followers as the simulated controllers
(`eval.episodes.command_replay`), every `--dt` s the arms are set to the commanded reference
(`AlohaSim.set_joint_positions`), and the smallest signed distance between a left and a right gripper or
finger geom is kept (MuJoCo `mj_geomDistance`; negative = interpenetration).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def min_clearance(bag: Path, seed: int, dt: float = 0.01) -> tuple[float, float, str]:
    """(smallest signed distance m, its sim time s, the two geoms) over the episode's commanded reference."""
    import mujoco

    from plan_stack.embodiments.aloha.model import JOINT_NAMES
    from plan_stack.embodiments.aloha.sim import AlohaSim, RigControllers
    from plan_stack.eval.episodes.command_replay import _read_run

    commands, _, last = _read_run(bag, set(JOINT_NAMES))
    sim = AlohaSim("transfer_cube")
    m, d = sim.model, sim.data
    sim.reset(seed=seed)
    names = [m.geom(i).name for i in range(m.ngeom)]

    def gripper_geoms(side: str) -> list[int]:
        return [i for i, n in enumerate(names) if n.startswith(f"vx300s_{side}/")
                and ("gripper" in n or "finger" in n) and (m.geom_contype[i] or m.geom_conaffinity[i])]

    left, right = gripper_geoms("left"), gripper_geoms("right")
    controllers = RigControllers()
    end = last if last is not None else commands[-1][0] + 1.0
    best, best_t, best_pair = np.inf, 0.0, ""
    fromto = np.zeros(6)
    k, t = 0, 0.0
    while t < end:
        while k < len(commands) and commands[k][0] <= t + 1e-9:
            controllers.followers[commands[k][1]].set_trajectory(commands[k][2], t)
            k += 1
        sim.set_joint_positions(controllers.command(t))
        mujoco.mj_kinematics(m, d)
        for i in left:
            for j in right:
                dist = mujoco.mj_geomDistance(m, d, i, j, 0.05, fromto)
                if dist < best:
                    best, best_t, best_pair = dist, t, f"{names[i]} - {names[j]}"
        t += dt
    return float(best), best_t, best_pair


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bags", type=Path, help="run-episodes --bag-dir folder (aloha_<seed> bags)")
    ap.add_argument("--dt", type=float, default=0.01, help="sampling step of the commanded reference, s")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    rows = []
    for bag in sorted(p for p in args.bags.glob("aloha_*") if p.is_dir()):
        seed = int(bag.name.rsplit("_", 1)[1])
        dist, t, pair = min_clearance(bag, seed, args.dt)
        rows.append({"seed": seed, "min_clearance_mm": round(dist * 1000, 1), "at_s": round(t, 2), "geoms": pair})
        print(f"{seed}  {rows[-1]['min_clearance_mm']:7.1f} mm  at {t:6.2f} s  {pair}", flush=True)
    if not rows:
        print(f"no aloha_<seed> bags in {args.bags}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
