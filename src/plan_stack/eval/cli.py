"""`plan-stack eval`: replay bags through the real nodes and report (report.json + report.html).

    plan-stack eval BAG [BAG ...] --out DIR [--robot R] [--decoder ar|dflash|vflash] [--device cpu|cuda|auto]
                    [--set node.param=value ...] [--mode deterministic|realtime] [--jobs N]
                    [--conditions conditions.yaml]
    plan-stack eval --compare DIR_A DIR_B

Each bag gets `DIR/<bag>/`: `outputs/` (every output topic, rosbag2 MCAP),
`graph.yaml` (the evaluated nodes and parameters), `graph.log`, `pictures/`.
With `--jobs N` bags run in parallel, each in a subprocess with its own ROS
domain; past one machine, run one bag per worker of an existing job system
(e.g. a batch job array or Ray tasks calling `plan-stack eval BAG --out
DIR/<bag>`) and merge with `--merge DIR/*`.
Exit status: 0 all bags evaluated and every condition passed; 1 otherwise;
2 bad arguments, among them a BAG that does not exist or is not a rosbag2 bag
folder (checked before anything starts).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from plan_stack.planning.decoders import DECODINGS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bags", nargs="*", metavar="BAG", help="rosbag2 bag folders to replay")
    parser.add_argument("--out", help="output directory")
    parser.add_argument("--robot", default=None, help="robot config (default: from the bag's annotation)")
    parser.add_argument("--decoder", choices=DECODINGS, default=None,
                        help="planner decoder (default: the robot config's)")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default=None,
                        help="where the planner and chunker run their models (default: the robot config's)")
    parser.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                        help="override a node parameter (YAML value), repeatable")
    parser.add_argument("--mode", choices=("deterministic", "realtime"), default="deterministic")
    parser.add_argument("--rate", type=float, default=1.0, help="realtime mode: playback rate")
    parser.add_argument("--jobs", type=int, default=1, help="bags evaluated in parallel (own ROS domain each)")
    parser.add_argument("--conditions", default=None, help="YAML of pass/fail conditions: metric.path: {max:, min:}")
    parser.add_argument("--compare", nargs=2, metavar="DIR", help="print and write the differences of two reports")
    parser.add_argument("--merge", nargs="+", metavar="DIR", help="merge per-bag report.json files into --out")
    parser.add_argument("--no-pictures", action="store_true", help="skip the pictures (faster)")
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)  # a --jobs worker: one bag into --out


def parse_sets(items: list[str]) -> dict[str, dict[str, Any]]:
    """`node.param=value` -> {node: {param: value}} (value parsed as YAML); ValueError naming a bad item."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        node, dot, param = key.partition(".")
        if not sep or not dot or not node or not param:
            raise ValueError(f"--set {item!r}: expected NODE.PARAM=VALUE")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ValueError(f"--set {item!r}: value is not YAML ({exc})") from None
        out.setdefault(node, {})[param] = value
    return out


def robot_of(bag: str) -> str | None:
    from plan_stack.viz.bag import annotation_for

    try:
        ann = annotation_for(bag)
    except Exception:
        return None
    from plan_stack.data.episodes import spec_of_format

    spec = spec_of_format((ann or {}).get("format", ""))
    return spec.robot if spec is not None else None


def _domain_ids(n: int) -> list[int]:
    """Distinct free ROS domain ids (101..200) for parallel jobs, held until this process exits."""
    from plan_stack.ros.domains import reserve_domain

    ids: list[int] = []
    for _ in range(n):
        domain, handle = reserve_domain(101, 200, start=101)
        _HELD.append(handle)
        ids.append(domain)
    return ids


_HELD: list = []


def evaluate_one(bag: str, out_dir: Path, robot: str, overrides: dict, mode: str, rate: float, pictures: bool,
                 progress: bool) -> dict[str, Any]:
    """Replay and report one bag; a bag that cannot be evaluated gives {"bag", "error"}."""
    from plan_stack.eval.bag_replay import EvalError, ReplayConfig, replay_bag
    from plan_stack.eval.report import bag_report

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=Path(bag).name, unit="set")

    def tick(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        cfg = ReplayConfig(robot=robot, mode=mode, overrides=overrides, rate=rate)
        counters = replay_bag(bag, out_dir, cfg, progress=tick)
        report = bag_report(bag, out_dir / "outputs", robot, counters, out_dir / "pictures" if pictures else None)
    except EvalError as exc:
        report = {"bag": str(bag), "robot": robot, "error": str(exc)}
    finally:
        if bar is not None:
            bar.close()
    from plan_stack.eval.report import write_json

    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "report.json", report)
    return report


def _worker_cmd(bag: str, out: Path, args: argparse.Namespace, robot: str) -> list[str]:
    cmd = [sys.executable, "-m", "plan_stack.cli", "eval", bag, "--out", str(out), "--robot", robot,
           "--mode", args.mode, "--rate", str(args.rate), "--single"]
    for item in args.set:
        cmd += ["--set", item]
    if args.decoder:
        cmd += ["--decoder", args.decoder]
    if args.device:
        cmd += ["--device", args.device]
    if args.no_pictures:
        cmd.append("--no-pictures")
    return cmd


def with_device(overrides: dict[str, dict[str, Any]], robot: str, device: str | None) -> dict[str, dict[str, Any]]:
    """`overrides` plus `device` for the robot's model-running nodes (planner, chunker) that the replay starts."""
    if device is None:
        return overrides
    from plan_stack.eval.bag_replay import is_evaluated
    from plan_stack.robot_config import load_robot_config

    out = {k: dict(v) for k, v in overrides.items()}
    for spec in load_robot_config(robot).nodes:
        if spec.executable in ("planner", "chunker") and is_evaluated(spec.executable):
            out.setdefault(spec.name, {})["device"] = device
    return out


def run(args: argparse.Namespace) -> int:
    from plan_stack.eval.replay_metrics import ConditionError, check_conditions
    from plan_stack.eval.report import aggregate, compare_reports, write_html, write_json

    if args.compare:
        try:
            a, b = (json.loads((Path(d) / "report.json").read_text()) for d in args.compare)
        except (OSError, json.JSONDecodeError) as exc:
            print(f"plan-stack eval: --compare: {exc}", file=sys.stderr)
            return 2
        rows = compare_reports(a, b)
        for r in rows:
            if r["diff"] is not None and r["diff"] != 0:
                print(f"{r['metric']:60s} {r['a']:12.4g} {r['b']:12.4g} {r['diff']:+12.4g}")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            write_json(Path(args.out) / "compare.json", {"a": args.compare[0], "b": args.compare[1], "rows": rows})
        return 0
    if not args.out or not (args.bags or args.merge):
        print("plan-stack eval: give BAG(s) and --out (or --compare DIR_A DIR_B)", file=sys.stderr)
        return 2
    from plan_stack.data.bags import BagError, check_bag_folder

    for bag in args.bags:  # before anything is started or written: a mistyped path is named as such
        try:
            check_bag_folder(bag)
        except BagError as exc:
            print(f"plan-stack eval: {exc}", file=sys.stderr)
            return 2
    try:
        overrides = parse_sets(args.set)
        conditions = yaml.safe_load(Path(args.conditions).read_text()) if args.conditions else None
        if conditions is not None and not isinstance(conditions, dict):
            raise ValueError(f"{args.conditions}: expected a mapping of metric -> {{min:, max:}}")
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"plan-stack eval: {exc}", file=sys.stderr)
        return 2
    if args.decoder:
        overrides.setdefault("planner", {})["decoder"] = args.decoder
    from plan_stack.config import ConfigError
    from plan_stack.eval.bag_replay import evaluated_nodes

    named: set[str | None] = {args.robot or robot_of(b) for b in args.bags}
    for robot in sorted(r for r in named if r is not None):
        try:
            unknown = set(overrides) - evaluated_nodes(robot)
        except ConfigError as exc:
            print(f"plan-stack eval: {exc}", file=sys.stderr)
            return 2
        if unknown:
            print(f"plan-stack eval: --set names nodes that are not evaluated for {robot}: {sorted(unknown)} "
                  f"(evaluated: {sorted(evaluated_nodes(robot))})", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reports: list[dict[str, Any]] = []
    if args.merge:
        for d in args.merge:
            try:
                r = json.loads((Path(d) / "report.json").read_text())
            except (OSError, json.JSONDecodeError) as exc:
                print(f"plan-stack eval: --merge {d}: {exc}", file=sys.stderr)
                return 2
            reports += r.get("bags", [r])
    names = [Path(b).name for b in args.bags]
    if len(set(names)) != len(names):
        print("plan-stack eval: two bags have the same folder name (outputs would collide)", file=sys.stderr)
        return 2
    robots: dict[str, str] = {}
    for bag in args.bags:
        bag_robot = args.robot or robot_of(bag)
        if not bag_robot:
            print(f"plan-stack eval: {bag}: no annotation to tell the robot; give --robot", file=sys.stderr)
            return 2
        robots[bag] = bag_robot
    if args.single:
        if len(args.bags) != 1:
            print("plan-stack eval: --single takes exactly one bag", file=sys.stderr)
            return 2
        bag = args.bags[0]
        report = evaluate_one(bag, out, robots[bag], with_device(overrides, robots[bag], args.device), args.mode,
                              args.rate, not args.no_pictures, False)
        return 0 if "error" not in report else 1
    if args.jobs <= 1:
        for bag in args.bags:
            reports.append(evaluate_one(bag, out / Path(bag).name, robots[bag],
                                        with_device(overrides, robots[bag], args.device), args.mode, args.rate,
                                        not args.no_pictures, True))
    else:
        domains = _domain_ids(min(args.jobs, len(args.bags)))

        def work(item: tuple[int, str]) -> dict[str, Any]:
            k, bag = item
            env = {**os.environ, "ROS_DOMAIN_ID": str(domains[k % len(domains)])}
            bag_out = out / Path(bag).name
            res = subprocess.run(_worker_cmd(bag, bag_out, args, robots[bag]), env=env, capture_output=True,
                                 text=True)
            path = bag_out / "report.json"
            if path.is_file():
                return json.loads(path.read_text())
            return {"bag": bag, "error": f"worker exited {res.returncode}: {res.stderr[-500:]}"}

        from tqdm import tqdm

        with ThreadPoolExecutor(max_workers=len(domains)) as pool:
            reports += list(tqdm(pool.map(work, enumerate(args.bags)), total=len(args.bags), desc="bags"))
    doc: dict[str, Any] = {"bags": reports, "aggregate": aggregate([r for r in reports if "error" not in r])}
    ok = all("error" not in r for r in reports)
    if conditions:
        try:
            doc["conditions"] = [{**c, "bag": Path(r["bag"]).name} for r in reports if "error" not in r
                                 for c in check_conditions(r, conditions)]
        except ConditionError as exc:
            print(f"plan-stack eval: {exc}", file=sys.stderr)
            return 2
        ok = ok and all(c["passed"] for c in doc["conditions"])
    write_json(out / "report.json", doc)
    write_html(out / "report.html", doc)
    for r in reports:
        status = r.get("error") or f"{r['counts']['plans']} plans, {r['counts']['trajectories']} trajectories"
        print(f"{Path(r['bag']).name}: {status}")
        for why in r.get("not_computed", []):
            print(f"  not computed: {why}")
    for c in doc.get("conditions", []):
        print(f"  {c['bag']}: {'PASS' if c['passed'] else 'FAIL'} {c['metric']} = {c['value']} {c.get('reason', '')}")
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0 if ok else 1
