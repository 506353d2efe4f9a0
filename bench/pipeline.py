#!/usr/bin/env python3
"""Latency budget of the running closed-loop graph, per stage, with the planner's decoder ar vs vflash.

    python bench/pipeline.py [--robot aloha] [--decoders vflash,ar] [--seed 100000] [--sim-seconds 6]
                             [--rtf 0.25] [--no-pace] [--json PATH]

For each decoder: one closed-loop episode of the whole ROS graph (simulator, bridge, ingest, planner,
chunker, stitcher, each node in its own process: `plan_stack.eval.episodes.episode`), observed from a
separate process. Per stage, wall milliseconds from the input's arrival to the output stamped with it
(`plan_stack.eval.episodes.latency`): ingest (camera -> Observation), planner (Observation -> plan),
chunker (Observation -> chunk), stitcher (chunk -> trajectory), end to end (camera -> trajectory),
p50 and p95; `plan_age_p50_s` is how old (sim s) the newest plan was when a chunk was computed. The
`x_vs_<first decoder>` column is the p50 ratio to the first decoder's row for the same stage.

Rows run one after the other on a shared machine: read `load1` (the 1-minute load average when
the episode started) next to each row, and compare ratios within one run.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_json_option, print_table, write_json  # noqa: E402

STAGES = ("ingest", "planner", "chunker", "stitcher", "e2e")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="aloha", choices=["aloha", "franka"])
    ap.add_argument("--decoders", default="vflash,ar", help="comma list; the first is the reference")
    ap.add_argument("--seed", type=int, default=100000, help="episode seed (held-out ALOHA seeds start at 100000)")
    ap.add_argument("--sim-seconds", type=float, default=6.0, help="sim time per episode")
    ap.add_argument("--rtf", type=float, default=0.25, help="simulator real-time factor (upper bound)")
    ap.add_argument("--no-pace", dest="pace", action="store_false", help="do not pace the simulator to the stack")
    add_json_option(ap)
    args = ap.parse_args(argv)

    from plan_stack.eval.episodes.episode import EpisodeOptions, run_episode

    rows = []
    for decoder in [d.strip() for d in args.decoders.split(",") if d.strip()]:
        load1 = os.getloadavg()[0]
        ep = run_episode(EpisodeOptions(
            robot=args.robot, seed=args.seed, real_time_factor=args.rtf, decoder=decoder,
            time_limit_s=args.sim_seconds, pace_chunk_lead_s=0.6 if args.pace else 0.0,
            pace_plan_lead_s=1.0 if args.pace else 0.0))
        if ep["error"]:
            print(f"{decoder}: episode failed: {ep['error']}", file=sys.stderr)
        for stage in STAGES:
            key = "e2e_latency" if stage == "e2e" else f"{stage}_latency"
            rows.append(dict(decoder=decoder, stage=stage, p50_ms=ep.get(f"{key}_p50_ms"),
                             p95_ms=ep.get(f"{key}_p95_ms"), plans=ep.get("plans"), chunks=ep.get("chunks"),
                             trajectories=ep.get("trajectories"), plan_age_p50_s=ep.get("plan_age_p50_s"),
                             sim_s=ep.get("sim_time_s"), load1=round(load1, 2), error=ep["error"]))
    ref = {r["stage"]: r["p50_ms"] for r in rows if r["decoder"] == rows[0]["decoder"]} if rows else {}
    for r in rows:
        base = ref.get(r["stage"])
        r[f"x_vs_{rows[0]['decoder']}"] = (round(r["p50_ms"] / base, 2)
                                           if base and r["p50_ms"] is not None else None)
    cols = ["decoder", "stage", "p50_ms", "p95_ms", f"x_vs_{rows[0]['decoder']}" if rows else "x",
            "plans", "chunks", "trajectories", "plan_age_p50_s", "sim_s", "load1"]
    print_table(rows, cols, {"p50_ms": ".1f", "p95_ms": ".1f"})
    if args.json:
        write_json(rows, args.json)
    return 0 if rows and not any(r["error"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
