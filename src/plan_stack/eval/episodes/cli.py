"""`plan-stack run-episodes`: closed-loop episodes of the learned stack through the full ROS graph.

    plan-stack run-episodes --robot aloha --seeds 100000-100019 --json out/episodes.json
    plan-stack run-episodes --robot aloha --seeds 100000-100004 --gt-plans --json out/gt.json

One episode per seed, one after the other (each its own process set and ROS
domain: `eval.episodes.episode`); a tqdm bar shows the episodes, the sim time
of the running one and the successes so far. The JSON file holds
`{"episodes": [row, ...], "summary": {...}}` and is rewritten after every
episode, so an interrupted run keeps what it measured. Exit status 0 when
every episode ran without error and without a limit violation (success or
not), else 1.

Time: by default the simulator is paced to the stack (`--chunk-lead`,
`--plan-lead`: sim time waits for action chunks and plans; see
`plan_stack.embodiments.pacing`) and never runs faster than `--rtf` x wall
time, so on a slow machine the stack sees the same sim-time latencies as on
a fast one. `--no-pace` runs the simulator at `--rtf` x wall time
regardless, which is what a real robot would impose at `--rtf 1`.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

import yaml

from plan_stack.planning.decoders import DECODINGS

__all__ = ["parse_seeds", "summarize", "add_arguments", "run"]


def parse_seeds(text: str) -> list[int]:
    """`A-B` (inclusive), `A`, or a comma list of those."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part[1:]:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if hi < lo:
                raise argparse.ArgumentTypeError(f"--seeds: {part!r} is empty (B < A)")
            seeds += range(lo, hi + 1)
        else:
            seeds.append(int(part))
    if not seeds or any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"--seeds: expected A-B or a list of non-negative seeds, got {text!r}")
    return seeds


def _median(values) -> float | None:
    import numpy as np

    v = [x for x in values if x is not None]
    return round(float(np.median(v)), 1) if v else None


def summarize(rows: list[dict]) -> dict:
    """Success rate, violations and the median of the per-episode latency percentiles."""
    ran = [r for r in rows if not r.get("error")]
    out = dict(episodes=len(rows), errors=len(rows) - len(ran), successes=sum(bool(r["success"]) for r in rows),
               success_rate=round(sum(bool(r["success"]) for r in rows) / len(rows), 3) if rows else None,
               limit_violations=sum(int(r.get("limit_violations") or 0) for r in rows),
               bridge_rejections=sum(int(r.get("bridge_rejections") or 0) for r in rows),
               bridge_stale=sum(int(r.get("bridge_stale") or 0) for r in rows),
               safety_faults=sum(int(r.get("safety_faults") or 0) for r in rows),
               protective_stops=sum(bool(r.get("protective_stop")) for r in rows))
    for key in ("e2e_latency_p50_ms", "e2e_latency_p95_ms", "planner_latency_p50_ms", "chunker_latency_p50_ms",
                "stitcher_latency_p50_ms", "bridge_latency_p50_ms", "ingest_latency_p50_ms", "plan_age_p50_s",
                "sim_time_s", "wall_s"):
        out[f"median_{key}"] = _median(r.get(key) for r in ran)
    return out


def _value(text: str):
    return yaml.safe_load(text)


def _set(text: str) -> tuple[str, str, object]:
    key, sep, value = text.partition("=")
    node, dot, param = key.partition(".")
    if not sep or not dot or not node or not param:
        raise argparse.ArgumentTypeError(f"--set: expected NODE.PARAM=VALUE, got {text!r}")
    return node, param, _value(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from plan_stack.robots import robot_names

    parser.add_argument("--robot", required=True, choices=robot_names())
    parser.add_argument("--seeds", required=True, type=parse_seeds, help="A-B (inclusive) or a comma list")
    parser.add_argument("--json", metavar="PATH", help="write {episodes: [...], summary: {...}} here")
    parser.add_argument("--decoder", choices=DECODINGS, help="planner decoder (default: config's)")
    parser.add_argument("--gt-plans", action="store_true",
                        help="ablation: ground-truth plan features (expert annotation of the same seed) "
                             "instead of the planner")
    parser.add_argument("--rtf", type=float, default=1.0,
                        help="simulator real-time factor: sim s per wall s at most (default 1)")
    parser.add_argument("--no-pace", dest="pace", action="store_false",
                        help="do not pace the simulator to the stack (run at --rtf regardless)")
    parser.add_argument("--chunk-lead", type=float, default=0.6,
                        help="paced: sim time stays within this many s of the newest chunk's observation (more "
                             "than the chunker's execution horizon s*dt, 0.5 s for ALOHA, plus a camera period)")
    parser.add_argument("--plan-lead", type=float, default=1.0,
                        help="paced: sim time stays within this many s of the newest plan's observation")
    parser.add_argument("--time-limit", type=float, default=None, help="sim seconds per episode (default: robot's)")
    parser.add_argument("--set", dest="sets", action="append", type=_set, default=[], metavar="NODE.PARAM=VALUE",
                        help="override a node parameter of the episode graph (repeatable)")
    parser.add_argument("--config", help="robot config name or path (default: the robot's)")
    parser.add_argument("--log-dir", help="keep each episode's configs and node logs here")
    parser.add_argument("--bag-dir", help="keep each episode's bag of commands and states (no images) here, as "
                                          "DIR/<robot>_<seed>: a limit violation can then be replayed "
                                          "(python -m plan_stack.eval.episodes.command_replay)")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the node processes (default 10)")
    parser.add_argument("--wall-timeout", type=float, default=1800.0, help="wall seconds per episode at most")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from plan_stack.eval.episodes.episode import EpisodeOptions, run_episode
    from plan_stack.robots import profile

    if args.rtf <= 0 and not args.pace:
        print("run-episodes: --rtf 0 (as fast as possible) needs pacing; drop --no-pace", file=sys.stderr)
        return 2
    def terminate(signum, frame):  # SIGTERM stops like Ctrl-C: each episode's `finally` stops its processes
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    rows: list[dict] = []
    limit = args.time_limit or profile(args.robot).episode.time_limit_s
    bar = tqdm(total=len(args.seeds), desc=f"{args.robot}{' gt-plans' if args.gt_plans else ''}", unit="episode")
    try:
        for seed in args.seeds:
            opts = EpisodeOptions(
                robot=args.robot, seed=seed, real_time_factor=args.rtf, decoder=args.decoder, gt_plans=args.gt_plans,
                time_limit_s=args.time_limit, pace_chunk_lead_s=args.chunk_lead if args.pace else 0.0,
                pace_plan_lead_s=args.plan_lead if args.pace else 0.0,
                config=args.config, sets=tuple(args.sets), wall_timeout_s=args.wall_timeout, nice=args.nice,
                log_dir=str(Path(args.log_dir) / f"seed_{seed}") if args.log_dir else None,
                bag=str(Path(args.bag_dir) / f"{args.robot}_{seed}") if args.bag_dir else None, bag_images=False)
            ok = sum(bool(r["success"]) for r in rows)
            bar.set_postfix_str(f"seed {seed} sim 0.0/{limit:.0f} s, {ok}/{len(rows)} ok")
            row = run_episode(opts, progress=lambda t, s=seed, ok=ok: bar.set_postfix_str(
                f"seed {s} sim {t:.1f}/{limit:.0f} s, {ok}/{len(rows)} ok", refresh=False))
            rows.append(row)
            bar.update(1)
            tqdm.write(_row_line(row))
            if args.json:
                _write(args.json, rows)
    finally:
        bar.close()
    summary = summarize(rows)
    print("summary: " + json.dumps(summary))
    if args.json:
        _write(args.json, rows)
    bad = summary["errors"] or summary["limit_violations"]
    return 1 if bad else 0


def _row_line(r: dict) -> str:
    verdict = "SUCCESS" if r["success"] else "FAILURE"
    return (f"seed {r['seed']}: {verdict} ({r['reason']}); sim {r['sim_time_s']:.1f} s, wall {r['wall_s']:.0f} s, "
            f"plans {r.get('plans')}, chunks {r.get('chunks')}, trajectories {r.get('trajectories')}, "
            f"limit violations {r.get('limit_violations')}, safety faults {r.get('safety_faults')}, "
            f"{'protective stop, ' if r.get('protective_stop') else ''}e2e p50/p95 {r.get('e2e_latency_p50_ms')}/"
            f"{r.get('e2e_latency_p95_ms')} ms")


def _write(path: str, rows: list[dict]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps({"episodes": rows, "summary": summarize(rows)}, indent=1))
    tmp.replace(p)
