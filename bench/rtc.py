"""RTC benchmark: seam continuity and tracking of chunked execution under injected delays.

On held-out demonstrations (recorded ALOHA episodes with `--demos DIR`, or
synthetic reaches with `--synthetic N`), each method executes the episode
chunk by chunk (`plan_stack.actions.offline.rollout`: a query every s steps,
the new chunk takes over d steps later, commands in between come from the
previous chunk) for injected delays d. Every method sees the same
observations and the same sampling noise per chunk.

Conditioning: what the heads were trained on. Heads conditioned on planner
plan features (the shipped `models/<robot>/action_head/*`, `meta.data.source`
in their config.json) get the features of the target that trained them, one
teacher-forced pass per annotated keyframe (`actions.train_features`): the
target of `--model` (default: the model directory the head lies in, else the
shipped model of the demos' robot), refused when its weights are not the ones
the head names. Other heads, and heads trained here without `--model`, get
ground-truth plan tokens (`actions.demos`); `--synthetic` episodes carry
synthetic tokens, so a plan-feature head is refused there.

Methods: `naive` (independent chunks), `hard_prefix` (prefix conditioning on
the plain head), `training_time` (prefix conditioning on the head trained with
simulated delays), `test_time_vjp` / `test_time_direct` (guidance on the plain
head). Two heads are needed: `--head` (plain) and `--rtc-head` (trained with
`--rtc-max-delay` > 0); when a path does not hold a checkpoint yet, the
head is trained there first with `--train-steps` (resumable).

Columns
* method, delay_steps
* seam_jump_pos   mean ||new - previous|| of the raw chunks at the seam (both at the seam
                  time), robot units; the same in both stages
* seam_jump_vel   mean change of executed velocity across the seam (units/s)
* jerk_rms        RMS third difference / dt^3 of the executed commands
* tracking_rmse   RMS error of the executed commands to the expert's
* inference_ms    mean wall time per chunk (warm-up excluded), this CPU
* vel_ratio       naive seam_jump_vel / this method's (same delay)
* tracking_change relative change of tracking_rmse vs naive (same delay)
* success_rate    with --closed-loop (recorded ALOHA demos only): fraction of the
                  held-out episodes solved (staged reward 4) when the method drives the
                  MuJoCo simulator from the same initial scene, observing its joint state;
                  conditioning = the episode's annotated plan at the same time. NaN otherwise.

* stage           `chunks`: the chunks' commands executed as they are; `stitched`
                  (with --stitcher): the same chunks through the stitcher library
                  (plan_stack.trajectory.Stitcher, MPC backend, tracking mode,
                  limits of --stitcher-limits), executing its trajectory instead.

    python bench/rtc.py --demos DIR --head H --rtc-head R [--delays 0,1,2,4,8] [--stitcher] [--json out.json]
    python bench/rtc.py --demos DIR --head models/aloha/action_head/plain --rtc-head models/aloha/action_head/rtc

The seam/tracking columns are open loop (observations from the demonstration).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from report import add_json_option, report  # noqa: E402  bench/report.py: shared table + JSON output

from plan_stack.actions.data import split_episodes, synthetic_episodes  # noqa: E402
from plan_stack.actions.head import HeadConfig, load_checkpoint  # noqa: E402
from plan_stack.actions.offline import rollout, seam_metrics  # noqa: E402
from plan_stack.actions.policy import ChunkPolicy  # noqa: E402
from plan_stack.actions.train import HeadTrainConfig, train  # noqa: E402
from plan_stack.trajectory.alignment import Chunk, ChunkError  # noqa: E402
from plan_stack.trajectory.config import StitcherConfig  # noqa: E402
from plan_stack.trajectory.stitching import Stitcher  # noqa: E402

METHODS = ("naive", "hard_prefix", "training_time", "test_time_vjp", "test_time_direct")
COLUMNS = ("method", "stage", "delay_steps", "seam_jump_pos", "seam_jump_vel", "jerk_rms", "tracking_rmse",
           "inference_ms", "vel_ratio", "tracking_change", "success_rate")


def _episodes(args, model):
    """(train, held-out) episodes conditioned as the heads need: on `model`'s plan features, or (None) on
    ground-truth plan tokens / the synthetic episodes' tokens."""
    if args.demos and model is not None:
        from plan_stack.actions.train_features import planner_feature_episodes

        eps = planner_feature_episodes(model, args.demos, _demos_spec(args.demos), progress=True)
    elif args.demos:
        from plan_stack.actions.demos import load_demo_dir

        eps = load_demo_dir(args.demos)
    else:
        eps = synthetic_episodes(args.synthetic, length=args.synthetic_length, seed=args.seed)
    return split_episodes(eps, args.eval_fraction, seed=args.seed)


def _checkpoint_doc(path):
    """config.json of the head checkpoint in `path` ({"head": ..., "meta": ...}), None when there is none yet."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg):
        return None
    with open(cfg, encoding="utf-8") as fh:
        return json.load(fh)


def _demos_spec(demos):
    """The learning facts of the robot that recorded `demos` (from the annotation's format tag)."""
    from plan_stack.data.episodes import annotation_files, spec_of_format

    with open(annotation_files(demos)[0], encoding="utf-8") as fh:
        fmt = json.load(fh).get("format", "")
    spec = spec_of_format(fmt)
    if spec is None:
        sys.exit(f"{demos}: annotation format {fmt!r} is no robot's")
    return spec


def _default_model_dir(head_paths, demos):
    """The model directory a head lies in (`<dir>/action_head/<variant>` beside `<dir>/target`), else the
    shipped model of the demos' robot."""
    from plan_stack.paths import find_data

    for path in head_paths:
        model_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        if os.path.basename(os.path.dirname(os.path.abspath(path))) == "action_head" and os.path.isdir(
                os.path.join(model_dir, "target")):
            return model_dir
    return str(find_data("models", _demos_spec(demos).robot))


def _features_model(args, head_paths):
    """The planner model whose target makes the heads' conditioning, or None for plan tokens. Exits with a
    message naming what to pass when the episodes cannot carry what a head was trained on."""
    from plan_stack.actions.train_features import plan_features_target, target_fingerprint

    wanted = {p: plan_features_target(doc.get("meta", {})) for p in head_paths
              if (doc := _checkpoint_doc(p)) is not None}
    feature_heads = {p: t for p, t in wanted.items() if t is not None}
    if not feature_heads and args.model is None:
        return None
    if args.synthetic:
        what = (f"{next(iter(feature_heads))} is conditioned on planner plan features" if feature_heads
                else "--model conditions on planner plan features")
        sys.exit(f"{what}, which synthetic episodes do not carry: use --demos DIR (recordings of "
                 f"`plan-stack record-demos`)")
    model_dir = args.model or _default_model_dir(list(feature_heads), args.demos)
    got = target_fingerprint(model_dir)
    for path, target in feature_heads.items():
        if target != got:
            sys.exit(f"{path}: conditioned on the plan features of the target with weights sha256 {target[:12]}..., "
                     f"{model_dir}/target is {got[:12]}...: pass --model with the model directory the head was "
                     f"trained with")
    from plan_stack.planning.model_dir import load_planner_model

    print(f"conditioning: plan features of {model_dir}/target", file=sys.stderr, flush=True)
    return load_planner_model(model_dir)


def _check_conditioning(head_paths, episodes, model):
    """Exit naming the head and what to pass when its conditioning width is not the episodes'."""
    have = episodes[0].cond.shape[2]
    for path in head_paths:
        doc = _checkpoint_doc(path)
        if doc is not None and int(doc["head"]["cond_width"]) != have:
            source = "planner plan features" if model is not None else "ground-truth plan tokens"
            sys.exit(f"{path}: conditioned on {doc['head']['cond_width']}-wide tokens, the episodes carry "
                     f"{have}-wide {source}: pass --model with the model directory whose target the head was "
                     f"trained on, or train heads here (--train-steps, new paths)")


def _head(path, rtc_max_delay, train_eps, eval_eps, args):
    has_model = os.path.isfile(os.path.join(path, "model.safetensors"))
    if not has_model and not args.train_steps:
        sys.exit(f"{path}: no checkpoint; give --train-steps to train one there")
    if args.train_steps and (not has_model or os.path.isfile(os.path.join(path, "train_state.json"))):
        e = train_eps[0]
        hc = HeadConfig(action_dim=e.actions.shape[1], state_dim=e.states.shape[1], cond_width=e.cond.shape[2],
                        dt_s=e.dt_s, horizon=args.horizon)
        tc = HeadTrainConfig(steps=args.train_steps, rtc_max_delay=rtc_max_delay, seed=args.seed, lr=1e-3,
                             eval_every=max(args.train_steps // 4, 1),
                             checkpoint_every=max(args.train_steps // 10, 1), log_every=max(args.train_steps // 20, 1))
        train(hc, tc, train_eps, eval_eps, path,
              log=lambda s: print(f"[{os.path.basename(path)}] {s}", file=sys.stderr, flush=True))
    head, meta = load_checkpoint(path, num_steps=args.num_steps)
    if rtc_max_delay and meta.get("rtc_max_delay", 0) < 1:
        sys.exit(f"{path}: not trained with training-time RTC (rtc_max_delay > 0)")
    return head


class StitchedExecution:
    """The stitcher between chunker and robot (`offline.ChunkExecutor`): each chunk is
    stitched when it takes over, and the executed command is the active trajectory's."""

    def __init__(self, dim: int, dt_s: float, limits: tuple[float, float, float]) -> None:
        v, a, j = limits
        self.names = tuple(f"joint_{i}" for i in range(dim))
        self.stitcher = Stitcher(StitcherConfig(joint_names=self.names, dt=dt_s, v_max=v, a_max=a, j_max=j))
        self.dt = dt_s
        self.pending: list[tuple[int, int, np.ndarray]] = []
        self.rejected = 0

    def take(self, query_step: int, start_step: int, chunk: np.ndarray) -> None:
        self.pending.append((query_step, start_step, chunk))

    def command(self, step: int) -> np.ndarray:
        while self.pending and self.pending[0][1] <= step:
            query, start, chunk = self.pending.pop(0)
            state = (chunk[0], np.zeros(len(self.names)), np.zeros(len(self.names)))  # robot waits at rest
            try:
                self.stitcher.process(Chunk(query * self.dt, self.names, self.dt, chunk), start * self.dt,
                                      measured=state if self.stitcher.active is None else None)
            except ChunkError:
                self.rejected += 1  # the active trajectory continues
        return self.stitcher.active.sample(np.array([step * self.dt]))[0][0]


def _row(method, d, runs, dt, stage="chunks"):
    ms = [seam_metrics(ro, ep.actions, dt) for ro, ep in runs]
    n = np.array([len(ro.seams) for ro, _ in runs], dtype=float)
    out = {"method": method, "stage": stage, "delay_steps": d}
    for k in ("seam_jump_pos", "seam_jump_vel"):
        out[k] = float(np.nansum([m[k] * w for m, w in zip(ms, n)]) / max(n.sum(), 1))
    for k in ("jerk_rms", "tracking_rmse"):
        out[k] = float(np.mean([m[k] for m in ms]))
    out["inference_ms"] = float(np.mean(np.concatenate([ro.inference_ms[1:] or ro.inference_ms
                                                        for ro, _ in runs])))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--demos", help="recorded demonstrations (plan-stack record-demos)")
    src.add_argument("--synthetic", type=int, help="number of synthetic episodes")
    ap.add_argument("--model", default=None,
                    help="planner model directory whose target makes the plan features heads are conditioned on "
                         "(default, for heads trained on plan features: the model directory the head lies in, "
                         "else the shipped one of the demos' robot); with it, heads trained here are conditioned "
                         "on them too")
    ap.add_argument("--synthetic-length", type=int, default=300)
    ap.add_argument("--head", required=True, help="plain head checkpoint (trained here if absent)")
    ap.add_argument("--rtc-head", required=True, help="training-time RTC head checkpoint (trained here if absent)")
    ap.add_argument("--train-steps", type=int, default=0, help="train missing heads for this many steps")
    ap.add_argument("--rtc-max-delay", type=int, default=10, help="simulated delays [0, max) for --rtc-head")
    ap.add_argument("--horizon", type=int, default=50)
    ap.add_argument("--num-steps", type=int, default=10)
    ap.add_argument("--execution-steps", type=int, default=25, help="s: steps executed per chunk")
    ap.add_argument("--delays", default="0,1,2,4,8")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--schedule", default="exp")
    ap.add_argument("--beta", type=float, default=5.0, help="max guidance weight")
    ap.add_argument("--eval-fraction", type=float, default=0.2)
    ap.add_argument("--max-episodes", type=int, default=0, help="limit held-out episodes (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-fast", action="store_true", help="eager model instead of the traced fast path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--closed-loop", action="store_true", help="also measure task success in the ALOHA simulator")
    ap.add_argument("--timing-only", action="store_true", help="only measure the plain head's latency")
    ap.add_argument("--stitcher", action="store_true", help="also run every method through the stitcher")
    ap.add_argument("--stitcher-limits", default="3,15,150", help="v_max,a_max,j_max of the stitcher")
    add_json_option(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.timing_only:
        head, _ = load_checkpoint(args.head, num_steps=args.num_steps)
        _print_timing(head, args)
        return 0
    methods = args.methods.split(",")
    head_paths = [args.head, *([args.rtc_head] if "training_time" in methods else [])]
    model = _features_model(args, head_paths)
    train_eps, eval_eps = _episodes(args, model)
    _check_conditioning(head_paths, train_eps + eval_eps, model)
    if args.max_episodes:
        eval_eps = eval_eps[: args.max_episodes]
    heads = {"plain": _head(args.head, 0, train_eps, eval_eps, args)}
    if "training_time" in methods:
        heads["rtc"] = _head(args.rtc_head, args.rtc_max_delay, train_eps, eval_eps, args)
    delays = [int(x) for x in args.delays.split(",")]
    dt = eval_eps[0].dt_s
    print(f"{len(eval_eps)} held-out episodes, H={args.horizon}, s={args.execution_steps}, "
          f"N={args.num_steps}, dt={dt}", file=sys.stderr, flush=True)
    rows = []
    for d in delays:
        for method in methods:
            head = heads["rtc" if method == "training_time" else "plain"]
            pol = ChunkPolicy(head, method, args.schedule, args.beta, fast=not args.no_fast)
            ep0 = eval_eps[0]
            for _ in range(3):  # warm-up (trace, allocator) excluded from the timings
                pol.sample(ep0.states[0], ep0.cond_at(0))
            runs = [(rollout(pol, ep, args.horizon, d, args.execution_steps, noise_seed=args.seed + i), ep)
                    for i, ep in enumerate(eval_eps)]
            rows.append(_row(method, d, runs, dt))
            rows[-1]["success_rate"] = (float(np.mean([_closed_loop(pol, ep, args, d, args.seed + i)
                                                       for i, ep in enumerate(eval_eps)]))
                                        if args.closed_loop else math.nan)
            if args.stitcher:
                limits = tuple(float(x) for x in args.stitcher_limits.split(","))
                runs = [(rollout(pol, ep, args.horizon, d, args.execution_steps, noise_seed=args.seed + i,
                                 executor=StitchedExecution(ep.actions.shape[1], dt, limits)), ep)
                        for i, ep in enumerate(eval_eps)]
                rows.append({**_row(method, d, runs, dt, stage="stitched"), "success_rate": math.nan})
            print(f"  d={d} {method}: done", file=sys.stderr, flush=True)
    for r in rows:
        base = next(x for x in rows if x["method"] == "naive" and x["delay_steps"] == r["delay_steps"]
                    and x["stage"] == r["stage"]) if "naive" in methods else None
        r["vel_ratio"] = base["seam_jump_vel"] / r["seam_jump_vel"] if base and r["seam_jump_vel"] > 0 else math.nan
        r["tracking_change"] = r["tracking_rmse"] / base["tracking_rmse"] - 1.0 if base else math.nan
    report(rows, COLUMNS, args.json)
    expert_jerk = np.mean([np.sqrt(np.mean((np.linalg.norm(np.diff(ep.actions, n=3, axis=0), axis=1) / dt**3) ** 2))
                           for ep in eval_eps])
    expert_dv = np.mean([np.mean(np.linalg.norm(np.diff(ep.actions, n=2, axis=0), axis=1)) / dt for ep in eval_eps])
    print(f"reference: the expert's own jerk_rms {expert_jerk:.4g}, mean per-step velocity change {expert_dv:.4g}")
    _print_timing(heads["plain"], args)
    return 0


_SIMS: dict = {}
_POSES: dict = {}


def _closed_loop(pol, ep, args, d, noise_seed) -> bool:
    """Drive the simulator with the method from the episode's initial scene; True when solved."""
    from plan_stack.embodiments.aloha.expert import plan_episode
    from plan_stack.embodiments.aloha.model import stack_to_joint
    from plan_stack.embodiments.aloha.sim import AlohaSim

    task, seed = ep.name.rsplit("_", 1)
    if task not in _SIMS:
        _SIMS[task] = AlohaSim(task, offscreen_size=(64, 48))
    sim = _SIMS[task]
    if ep.name not in _POSES:
        _POSES[ep.name] = plan_episode(task, int(seed), dt_s=ep.dt_s).object_poses
    sim.reset(object_poses=_POSES[ep.name])
    substeps = int(round(ep.dt_s / sim.timestep_s))

    def execute(k, command):
        sim.set_command(stack_to_joint(command))
        sim.step(substeps)

    rollout(pol, ep, args.horizon, d, args.execution_steps, noise_seed=noise_seed,
            observe=lambda k: sim.joint_positions(), execute=execute)
    return sim.reward() >= 4


def _print_timing(head, args) -> None:
    timing = _timing(head, args)
    print(f"head latency (H={head.cfg.horizon}, D={head.cfg.action_dim}, {args.num_steps} steps, "
          f"{args.threads} thread(s), {'traced' if not args.no_fast else 'eager'}): "
          f"mean {timing['mean_ms']:.2f} ms, p95 {timing['p95_ms']:.2f} ms, worst {timing['worst_ms']:.2f} ms, "
          f"thread CPU {timing['cpu_ms']:.2f} ms (load average {os.getloadavg()[0]:.1f})")


def _timing(head, args, n=50):
    pol = ChunkPolicy(head, "naive", fast=not args.no_fast)
    state = np.zeros(head.cfg.state_dim)
    cond = np.zeros((8, head.cfg.cond_width))
    for _ in range(5):
        pol.sample(state, cond)
    ts, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.thread_time()
        pol.sample(state, cond)
        ts.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
    return {"mean_ms": float(np.mean(ts)), "p95_ms": float(np.percentile(ts, 95)), "worst_ms": float(np.max(ts)),
            "cpu_ms": float(np.mean(cpu))}


if __name__ == "__main__":
    sys.exit(main())
