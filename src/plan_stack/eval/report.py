"""Metrics of one replay (its outputs bag, the input bag's annotation) and the JSON / HTML reports.

Every metric is a `replay_metrics.summarize` object (count, mean, min, max, p50,
p95, p99). What could not be computed is listed under `not_computed` with the
reason (no annotation, no plans, no limits...), never reported as an empty
number.
"""
from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plan_stack.eval import replay_metrics as M
from plan_stack.stamps import sec_nanosec_to_s

__all__ = ["bag_report", "aggregate", "write_json", "write_html", "compare_reports", "SR_RADII_M",
           "PLAN_MATCH_S"]

SR_RADII_M = (0.05, 0.10)  #: a 3D primitive succeeds when its final waypoint is within the radius
PLAN_MATCH_S = 0.06  #: a plan and an annotated keyframe pair when their stamps are this close
BOX_IOU = 0.5
#: pipeline stages and the output whose stamp is the camera set it came from
STAGES = (("ingest", "/observation"), ("planner", "/plan"), ("chunker", "/action_chunk"))


def _stamp(msg) -> float:
    return sec_nanosec_to_s(msg.header.stamp.sec, msg.header.stamp.nanosec)


# --- plan accuracy --------------------------------------------------------------------------

def plan_accuracy(plans: Sequence[Any], truths: Sequence[Any]) -> tuple[dict[str, Any], list[str]]:
    """Plans (viz PlanView) against annotated keyframes (PlanView) paired by stamp."""
    ade: list[float] = []
    fde: list[float] = []
    hits: dict[float, list[float]] = {r: [] for r in SR_RADII_M}
    ade2, dfd, hd, iou_hits, subtask = [], [], [], {"tp": 0, "fp": 0, "fn": 0}, []
    paired = 0
    by_stamp = sorted(plans, key=lambda p: p.stamp_s)
    stamps = np.array([p.stamp_s for p in by_stamp])
    for truth in truths:
        if not len(stamps):
            break
        k = int(np.argmin(np.abs(stamps - truth.stamp_s)))
        if abs(stamps[k] - truth.stamp_s) > PLAN_MATCH_S:
            continue
        plan = by_stamp[k]
        paired += 1
        if truth.subtask:
            subtask.append(float(plan.subtask.strip() == truth.subtask.strip()))
        gt = {(p.arm, p.kind != "box"): p for p in truth.primitives}
        for p in plan.primitives:
            t = gt.get((p.arm, p.kind != "box"))
            if t is None or p.kind == "box":
                continue
            a, b = np.asarray(p.points, float), np.asarray(t.points, float)
            if len(a) and len(a) == len(b):
                d = np.linalg.norm(a - b, axis=1)
                ade.append(d.mean())
                fde.append(d[-1])
                for r in SR_RADII_M:
                    hits[r].append(float(d[-1] <= r))
            ua, ub = np.asarray(p.uv, float).reshape(-1, 2), np.asarray(t.uv, float).reshape(-1, 2)
            if len(ua) and len(ua) == len(ub):
                ok = np.isfinite(ua).all(1) & np.isfinite(ub).all(1)
                if ok.any():
                    ade2.append(float(np.linalg.norm(ua[ok] - ub[ok], axis=1).mean()))
                dfd.append(M.discrete_frechet(ua, ub))
                hd.append(M.hausdorff(ua, ub))
        pb = [np.asarray(p.uv, float) for p in plan.primitives if p.kind == "box"]
        tb = [np.asarray(p.uv, float) for p in truth.primitives if p.kind == "box"]
        matched = set()
        for box in pb:
            best = max(((_iou(box, g), j) for j, g in enumerate(tb) if j not in matched), default=(0.0, -1))
            if best[0] >= BOX_IOU:
                matched.add(best[1])
                iou_hits["tp"] += 1
            else:
                iou_hits["fp"] += 1
        iou_hits["fn"] += len(tb) - len(matched)
    out: dict[str, Any] = {"keyframes": len(truths), "paired_keyframes": paired}
    missing = []
    if ade:
        out.update({"ade_3d_m": M.summarize(ade), "fde_3d_m": M.summarize(fde)})
        out.update({f"sr_{int(r * 100)}cm": float(np.mean(hits[r])) for r in SR_RADII_M})
    else:
        missing.append("plan 3D accuracy: no plan paired with an annotated 3D primitive")
    if ade2:
        out.update({"ade_2d_px": M.summarize(ade2), "dfd_2d_px": M.summarize(dfd), "hausdorff_2d_px": M.summarize(hd)})
    else:
        missing.append("plan 2D accuracy: no plan paired with annotated pixel trajectories")
    tp, fp, fn = iou_hits["tp"], iou_hits["fp"], iou_hits["fn"]
    if tp + fp == 0:
        missing.append("box F1: the plans carry no boxes")
    elif tp + fn == 0:
        missing.append("box F1: the annotation has no boxes")
    else:
        out["box_f1_iou50"] = 2 * tp / (2 * tp + fp + fn)
    if subtask:
        out["subtask_match"] = float(np.mean(subtask))
    else:
        missing.append("sub-task match: the annotation has no sub-task text at paired keyframes")
    return out, missing


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(iw, 0.0) * max(ih, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


# --- per-bag report ---------------------------------------------------------------------------

def _limits(robot: str) -> tuple[list[str], dict[str, np.ndarray]] | None:
    """Joint names and limits of the stitcher in the robot config (continuous joints only)."""
    from plan_stack.robot_config import load_robot_config

    for spec in load_robot_config(robot).nodes:
        if spec.executable != "stitcher":
            continue
        p = spec.parameters
        every = list(p.get("joint_names", []))
        names = [n for n in every if n not in set(p.get("discrete_joints", []))]
        if not names or "v_max" not in p or "a_max" not in p:
            return None
        lim: dict[str, np.ndarray] = {}
        for key in ("v_max", "a_max", "q_min", "q_max"):
            if key in p and p[key] not in (None, []):
                v = np.asarray(p[key], dtype=float)
                if v.ndim == 1 and len(v) == len(every) != len(names):  # listed for every joint
                    v = v[[every.index(n) for n in names]]
                lim[key] = np.full(len(names), float(v)) if v.ndim == 0 else v
        return names, lim
    return None


def bag_report(bag: str | os.PathLike, outputs: str | os.PathLike, robot: str, counters: Mapping[str, Any],
               pictures_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """All metrics of one replay; `pictures_dir` gets the PNGs the HTML report embeds."""
    from plan_stack.data.bags import read_bag
    from plan_stack.viz.bag import annotation_for, truth_plans
    from plan_stack.viz.plan import plan_from_fields

    msgs = read_bag(outputs)
    report: dict[str, Any] = {"bag": str(bag), "robot": robot, "replay": {k: v for k, v in counters.items()
                                                                         if k != "published_sets_wall"}}
    missing: list[str] = []
    obs, plans = msgs.get("/observation", []), msgs.get("/plan", [])
    chunks, trajs = msgs.get("/action_chunk", []), msgs.get("/trajectory", [])
    report["counts"] = {"camera_sets": counters.get("camera_sets", 0), "observations": len(obs),
                        "plans": len(plans), "chunks": len(chunks), "trajectories": len(trajs),
                        "dropped_sets": max(0, int(counters.get("sets_published", 0)) - len(obs)),
                        "observations_without_plan": max(0, len(obs) - len(plans))}
    # decoding
    if plans:
        pm = [m for _, m in plans]
        report["decoding"] = {k: M.summarize(getattr(m, k) for m in pm)
                              for k in ("vision_ms", "prefill_ms", "decode_ms", "total_ms")}
        report["decoding"]["tokens_per_target_forward"] = M.summarize(
            m.tokens_out / m.target_forwards for m in pm if m.target_forwards)
        prims = [p for m in pm for p in m.primitives]
        report["decoding"]["gate_accepted"] = sum(1 for p in prims if p.accepted_direct)
        report["decoding"]["gate_fallback"] = sum(1 for p in prims if p.fallback_from >= 0)
        report["decoding"]["decoders"] = sorted({m.decoder for m in pm})
    else:
        missing.append("decoding: the planner published no plan")
    # plan accuracy
    annotation = annotation_for(bag)
    if annotation is None:
        missing.append("plan accuracy: the bag has no annotation (<bag>.json beside it)")
    elif plans:
        acc, why = plan_accuracy([plan_from_fields(m) for _, m in plans], truth_plans(annotation))
        report["plan_accuracy"] = acc
        missing += why
    # chunks
    cs = [M.Chunk(_stamp(m), float(m.dt), np.asarray(m.positions, float).reshape(int(m.horizon), -1))
          for _, m in chunks]
    if len(cs) >= 2:
        seams = M.chunk_seams(cs)
        report["chunks"] = {k: M.summarize(v) for k, v in seams.items()}
        report["chunks"]["churn"] = M.summarize(M.chunk_churn(cs))
        report["chunks"]["jerk_rms"] = M.summarize(M.jerk_rms(c.positions, c.dt_s) for c in cs)
        report["chunks"]["inference_ms"] = M.summarize(m.inference_ms for _, m in chunks)
    else:
        missing.append(f"chunk seams: {len(cs)} chunk(s), at least 2 needed")
    # trajectories
    if trajs:
        tr = [_trajectory(m) for _, m in trajs]
        report["trajectories"] = {k: M.summarize(v) for k, v in M.trajectory_seams(tr).items()}
        report["trajectories"]["jerk_rms"] = M.summarize(
            M.jerk_rms(t.positions, float(np.median(np.diff(t.times_s)))) for t in tr if len(t.times_s) > 3)
        limits = _limits(robot)
        if limits is None:
            missing.append("limit compliance: the robot config's stitcher has no v_max/a_max")
        else:
            names, lim = limits
            ratios, violations, unchecked = [], 0, 0
            for (_, m), t in zip(trajs, tr):
                if not set(names) <= set(m.joint_names) or not t.positions.size:
                    unchecked += 1
                    continue
                idx = [list(m.joint_names).index(n) for n in names]
                sub = M.TrajectorySamples(t.stamp_s, t.times_s, t.positions[:, idx],
                                   t.velocities[:, idx] if t.velocities.size else t.velocities,
                                   t.accelerations[:, idx] if t.accelerations.size else t.accelerations)
                r = M.trajectory_limits(sub, lim["v_max"], lim["a_max"], lim.get("q_min"), lim.get("q_max"))
                ratios.append(max(r.get("v_ratio", 0.0), r.get("a_ratio", 0.0)))
                violations += int(r["violated"])
            report["trajectories"]["limit_ratio"] = M.summarize(ratios)
            report["trajectories"]["limit_violations"] = violations
            report["trajectories"]["limit_unchecked"] = unchecked
            if unchecked:
                missing.append(f"limit compliance: {unchecked} trajectories lack the stitcher's joints or positions")
    else:
        missing.append("trajectories: the stitcher published none")
    # the dry-run bridge: every trajectory it refused (its validation is the robot's)
    bridge = _bridge_verdicts(msgs.get("/diagnostics", []))
    if bridge is None:
        missing.append("bridge dry run: no bridge diagnostics recorded")
    else:
        report["bridge"] = bridge
    # latency: camera set published (wall) -> output received (wall, recorder clock)
    report["latency_ms"] = _latencies(msgs, counters.get("published_sets_wall", {}))
    report["not_computed"] = missing
    if pictures_dir is not None:
        published = counters.get("published_sets_wall", {})
        report["pictures"] = _pictures(bag, outputs, published, Path(pictures_dir), msgs)
    return report


def _bridge_verdicts(diagnostics: list) -> dict[str, Any] | None:
    """Refusals the dry-run bridge reported (ERROR statuses published at once with the reason)."""
    seen, refused = False, 0
    reasons: dict[str, int] = {}
    for _, arr in diagnostics:
        for st in arr.status:
            if "_bridge:" not in st.name:
                continue
            seen = True
            if st.level >= 2 and "rejected" in st.message:
                refused += 1
                key = st.message.split(":", 2)[1].strip() if st.message.count(":") >= 2 else st.message
                reasons[key[:80]] = reasons.get(key[:80], 0) + 1
    return {"refused": refused, "reasons": reasons} if seen else None


def _trajectory(m) -> M.TrajectorySamples:
    pts = m.points
    times = np.array([sec_nanosec_to_s(p.time_from_start.sec, p.time_from_start.nanosec) for p in pts])

    def arr(field: str) -> np.ndarray:
        rows = [np.asarray(getattr(p, field), float) for p in pts]
        return np.stack(rows) if rows and all(len(r) == len(rows[0]) and len(r) for r in rows) else np.zeros((0, 0))

    return M.TrajectorySamples(_stamp(m), times, arr("positions"), arr("velocities"), arr("accelerations"))


def _latency_values(msgs: Mapping[str, list], published: Mapping[str, float]) -> dict[str, list[float]]:
    """Per stage: wall time (ms) from publishing a camera set to receiving the output stamped with it;
    end to end: to the first trajectory received after the chunk."""
    sets = {round(float(k), 3): v for k, v in published.items()}
    out: dict[str, list[float]] = {}
    for stage, topic in STAGES:
        out[stage] = [(t_rx - sets[round(_stamp(m), 3)]) * 1e3 for t_rx, m in msgs.get(topic, [])
                      if round(_stamp(m), 3) in sets]
    traj_rx = sorted(t for t, _ in msgs.get("/trajectory", []))
    e2e = []
    for t_rx, m in msgs.get("/action_chunk", []):
        t_pub = sets.get(round(_stamp(m), 3))
        later = [t for t in traj_rx if t >= t_rx]
        if t_pub is not None and later:
            e2e.append((later[0] - t_pub) * 1e3)
    out["end_to_end"] = e2e
    return out


def _latencies(msgs: Mapping[str, list], published: Mapping[str, float]) -> dict[str, Any]:
    return {stage: M.summarize(v) for stage, v in _latency_values(msgs, published).items()}


# --- pictures ------------------------------------------------------------------------------------

def _pictures(bag, outputs, published: Mapping[str, float], out: Path, msgs) -> dict[str, list[str]]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from plan_stack.viz.plan import VizError
    from plan_stack.viz.render import render_bag

    out.mkdir(parents=True, exist_ok=True)
    pics: dict[str, list[str]] = {"plans": [], "plots": []}
    ann = Path(bag).resolve().parent / f"{Path(bag).resolve().name}.json"
    try:
        result = render_bag(outputs, out / "plans", annotation=ann if ann.is_file() else None,
                            every=max(1, len(msgs.get("/plan", [])) // 4), limit=4)
        pics["plans"] = [str(p) for p in result.files]
        pics["skipped"] = list(result.skipped)
    except VizError as exc:  # a picture that cannot be drawn must not lose the metrics
        pics["errors"] = [f"plans: {exc}"]
    values = _latency_values(msgs, published)
    fig, ax = plt.subplots(figsize=(7, 3))
    for stage, v in values.items():
        if v:
            ax.hist(v, bins=20, alpha=0.5, label=f"{stage} (n={len(v)})")
    ax.set_xlabel("ms from camera set")
    ax.set_ylabel("count")
    ax.set_title("latency by stage")
    if any(values.values()):
        ax.legend(fontsize=7)
    pics["plots"].append(_save(fig, out / "latency.png"))
    chunks = [m for _, m in msgs.get("/action_chunk", [])]
    if len(chunks) >= 2:
        fig, ax = plt.subplots(figsize=(7, 3))
        for m in chunks[:12]:
            q = np.asarray(m.positions, float).reshape(int(m.horizon), -1)
            t = _stamp(m) + float(m.dt) * np.arange(len(q))
            ax.plot(t, q[:, 0], linewidth=1)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("joint 0 of each chunk")
        ax.set_title("chunk seams (each line one chunk)")
        pics["plots"].append(_save(fig, out / "seams.png"))
    return pics


def _save(fig, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)


# --- aggregate, files, compare ---------------------------------------------------------------------

def _numbers(report: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten the numeric leaves: `section.metric.stat` -> value."""
    flat = {}
    for k, v in report.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            flat.update(_numbers(v, key + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            flat[key] = float(v)
    return flat


def aggregate(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over bags: each numeric leaf summarised across the bags that have it."""
    keys: dict[str, list[float]] = {}
    for r in reports:
        for k, v in _numbers({s: r[s] for s in r if s not in ("replay", "pictures")}).items():
            keys.setdefault(k, []).append(v)
    return {"bags": len(reports), "metrics": {k: M.summarize(v) for k, v in sorted(keys.items())}}


def write_json(path: str | os.PathLike, doc: Mapping[str, Any]) -> None:
    def safe(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, Mapping):
            return {k: safe(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [safe(x) for x in v]
        return v

    Path(path).write_text(json.dumps(safe(doc), indent=1, allow_nan=False) + "\n")


def _img(path: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(Path(path).name)}" style="max-width:48%">'


def _table(d: Mapping[str, Any]) -> str:
    rows = []
    for k, v in _numbers(d).items():
        rows.append(f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def write_html(path: str | os.PathLike, doc: Mapping[str, Any]) -> None:
    """One self-contained page (pictures embedded as data URIs): viewable offline."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>plan_stack replay report</title>",
             "<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
             "td{border:1px solid #ccc;padding:2px 6px;font-size:12px}.bad{color:#a00}</style></head><body>",
             "<h1>plan_stack replay report</h1>"]
    for r in doc.get("bags", []):
        parts.append(f"<h2>{html.escape(Path(r['bag']).name)}</h2>")
        if r.get("error"):
            parts.append(f"<p class='bad'>not evaluated: {html.escape(r['error'])}</p>")
            continue
        for why in r.get("not_computed", []):
            parts.append(f"<p class='bad'>not computed: {html.escape(why)}</p>")
        parts.append(_table({k: v for k, v in r.items() if k not in ("pictures", "replay")}))
        for group in ("plans", "plots"):
            parts += [_img(p) for p in r.get("pictures", {}).get(group, []) if Path(p).is_file()]
    if doc.get("conditions"):
        parts.append("<h2>conditions</h2><table>")
        for c in doc["conditions"]:
            cls = "" if c["passed"] else " class='bad'"
            parts.append(f"<tr{cls}><td>{html.escape(c['metric'])}</td><td>{c['value']}</td>"
                         f"<td>{'pass' if c['passed'] else 'FAIL ' + html.escape(c['reason'])}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>aggregate</h2>" + _table(doc.get("aggregate", {}).get("metrics", {})))
    parts.append("</body></html>")
    Path(path).write_text("\n".join(parts))


def compare_reports(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Aggregate metrics of two reports side by side with the difference (b - a)."""
    fa = _numbers(a.get("aggregate", {}).get("metrics", {}))
    fb = _numbers(b.get("aggregate", {}).get("metrics", {}))
    rows = []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k), fb.get(k)
        rows.append({"metric": k, "a": va, "b": vb, "diff": None if va is None or vb is None else vb - va})
    return rows
