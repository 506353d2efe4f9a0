"""Decode annotated keyframes with each decoder and score the plans (the `eval-plans` table).

Every keyframe is decoded from the same prompt the planner would build
(`PlannerModel.encode`) with greedy constrained decoding; the trajectory
primitive of the response is compared per arm with the annotation. An
image-blind baseline row (`blind`: the mean training plan at the same
keyframe index, the most frequent sub-task there) shows how much of a
scripted task's plan does not depend on the scene.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from plan_stack.data.episodes import Keyframe
from plan_stack.eval import plan_metrics as M
from plan_stack.robots import LearningSpec

__all__ = ["Prediction", "Scorer", "prediction_from_result", "blind_baseline", "blind_prediction", "evaluate",
           "format_table", "expected_subtask", "predictions_for", "scored"]


def expected_subtask(kf: Keyframe) -> str:
    """The sub-task text a decoded response should start with (as the response builder writes it)."""
    return f"{kf.subtask.strip()}."


@dataclasses.dataclass
class Prediction:
    """What a decoder (or the baseline) said about one keyframe."""

    subtask: str
    points: list[np.ndarray] | None  # per arm [P, 3]; None: no valid trajectory primitive
    uv: list[np.ndarray] | None  # per arm [P, 2] pixels (NaN outside)
    boxes: dict[str, tuple[float, ...]]
    decode_ms: float = math.nan
    primitive_ms: float = math.nan
    prefill_ms: float = math.nan
    gate_accepted: int = 0
    gate_fallback: int = 0
    gate_implausible: int = 0
    gate_check_ms: float = 0.0
    spec_skipped: int = 0  # DFlash steps run as AR steps where speculation did not pay (SpeculationSchedule)
    tokens: tuple[int, ...] = ()
    primitive_ms_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)


def prediction_from_result(result: Any, spec: LearningSpec) -> Prediction:
    """A `decoding.DecodeResult` -> Prediction (boxes in response order matched to `spec.box_objects`)."""
    traj = [p for p in result.primitives if p.kind != "box"]
    boxes = [p for p in result.primitives if p.kind == "box"]
    points = uv = None
    if len(traj) == len(spec.arms) and all(len(p.points) for p in traj):
        points = [np.asarray(p.points, dtype=float) for p in traj]
        uv = [np.asarray(p.uv, dtype=float).reshape(-1, 2) if p.uv else np.full((len(p.points), 2), np.nan)
              for p in traj]
    st = result.stats
    return Prediction(result.subtask, points, uv, {o: b.uv for o, b in zip(spec.box_objects, boxes)},
                      decode_ms=st.decode_ms, primitive_ms=st.decode_primitive_ms, prefill_ms=st.prefill_ms,
                      gate_accepted=st.gate_accepted, gate_fallback=st.gate_fallback,
                      gate_implausible=st.gate_implausible, gate_check_ms=st.gate_check_ms,
                      spec_skipped=st.spec_skipped, tokens=tuple(result.tokens),
                      primitive_ms_by_kind=dict(st.primitive_ms_by_kind))


def blind_baseline(keyframes: Iterable[Keyframe]) -> dict:
    """Mean training plan per keyframe index (JSON-able): points, pixels (mean of in-image ones), boxes,
    most frequent sub-task."""
    groups: dict[int, list[Keyframe]] = collections.defaultdict(list)
    for kf in keyframes:
        groups[kf.index].append(kf)
    out = {}
    for i, kfs in sorted(groups.items()):
        pts = np.mean([np.stack(k.points) for k in kfs], axis=0)
        uvs = np.stack([np.stack(k.uv) for k in kfs])
        with np.errstate(invalid="ignore"):
            inside = np.isfinite(uvs).all(-1).mean(0) >= 0.5  # [arms, P]
            uv = np.where(inside[..., None], np.nanmean(uvs, axis=0), np.nan)
        boxes = {}
        for obj in sorted({o for k in kfs for o in k.boxes}):  # a set's order changes with the hash seed
            boxes[obj] = np.mean([k.boxes[obj] for k in kfs if obj in k.boxes], axis=0).round(2).tolist()
        subtask = collections.Counter(k.subtask for k in kfs).most_common(1)[0][0]
        uv_out = uv.round(2).astype(object)
        uv_out[np.isnan(uv)] = None  # JSON null: outside the image
        out[str(i)] = {"points": pts.round(5).tolist(), "uv": uv_out.tolist(),
                       "boxes": boxes, "subtask": subtask, "count": len(kfs)}
    return out


def blind_prediction(blind: dict, kf: Keyframe) -> Prediction:
    """The baseline's plan for a keyframe (the last index's plan beyond the longest training episode)."""
    key = str(kf.index) if str(kf.index) in blind else max(blind, key=int)
    b = blind[key]
    uv = [np.array([[np.nan, np.nan] if p is None or p[0] is None else p for p in arm], dtype=float)
          for arm in b["uv"]]
    return Prediction(f"{b['subtask'].strip()}.", [np.asarray(p, dtype=float) for p in b["points"]], uv,
                      {o: tuple(v) for o, v in b["boxes"].items()})


class Scorer:
    """Accumulates one decoder's predictions; `row()` gives the table row."""

    def __init__(self, decoder: str, arms: Sequence[str], box_objects: Sequence[str] = ()):
        self.decoder, self.arms = decoder, tuple(a or "ego" for a in arms)
        self.box_objects = tuple(box_objects)
        self.n = 0
        self.invalid = 0
        self.ade: list[float] = []
        self.fde: list[float] = []
        self.fde_first: list[float] = []  # at each episode's first keyframe: nothing has moved yet
        self.by_arm: dict[str, list[float]] = collections.defaultdict(list)
        self.by_subtask: dict[str, list[float]] = collections.defaultdict(list)
        self.px_sum, self.px_n = 0.0, 0
        self.iou: list[float] = []
        self.match = 0
        self.outliers = 0
        self.ms: dict[str, list[float]] = collections.defaultdict(list)
        self.primitive_ms_by_kind: dict[str, list[float]] = collections.defaultdict(list)
        self.gate: collections.Counter[str] = collections.Counter()
        self.spec_skipped = 0

    def add(self, kf: Keyframe, pred: Prediction) -> None:
        self.n += 1
        self.match += int(pred.subtask.strip() == expected_subtask(kf))
        for obj in self.box_objects:  # a box the annotation has and the prediction lacks scores 0
            if obj in kf.boxes:
                self.iou.append(M.box_iou(pred.boxes.get(obj, ()), kf.boxes[obj]))
        if pred.points is None or pred.uv is None:  # set together (a valid trajectory primitive)
            self.invalid += 1
        else:
            for arm, p, t, puv, tuv in zip(self.arms, pred.points, kf.points, pred.uv, kf.uv):
                d = np.linalg.norm(p - t, axis=1)
                self.ade.append(float(d.mean()))
                self.fde.append(float(d[-1]))
                if kf.index == 0:
                    self.fde_first.append(float(d[-1]))
                self.by_arm[arm].append(float(d.mean()))
                self.by_subtask[kf.subtask].append(float(d.mean()))
                self.outliers += int((d > M.OUTLIER_M).sum())
                s, c = M.pixel_error(puv, tuv)
                self.px_sum, self.px_n = self.px_sum + s, self.px_n + c
        for key in ("decode_ms", "primitive_ms", "prefill_ms", "gate_check_ms"):
            value = getattr(pred, key)
            if math.isfinite(value):
                self.ms[key].append(value)
        for kind, value in pred.primitive_ms_by_kind.items():
            self.primitive_ms_by_kind[kind].append(value)
        self.gate.update(accepted=pred.gate_accepted, fallback=pred.gate_fallback, implausible=pred.gate_implausible)
        self.spec_skipped += pred.spec_skipped

    @property
    def score(self) -> float:
        """Model-selection score (lower is better): mean 3D ADE, with an invalid plan counting 1 m."""
        return (sum(self.ade) + len(self.arms) * self.invalid) / max(len(self.ade) + len(self.arms) * self.invalid, 1)

    def row(self) -> dict:
        mean = lambda xs: float(np.mean(xs)) if len(xs) else None  # noqa: E731
        gate_n = self.gate["accepted"] + self.gate["fallback"]
        return {
            "decoder": self.decoder, "n": self.n, "invalid": self.invalid,
            "ade_3d_m": mean(self.ade), "fde_3d_m": mean(self.fde),
            # the plan's end at the first keyframe, before anything moved: only the scene can place it (a model
            # that reads the object beats the blind row here; one that reads the arm's progress cannot)
            "fde_3d_m_first_keyframe": mean(self.fde_first),
            "sr_5cm": mean([f <= M.SR_RADIUS_M for f in self.fde]),
            "ade_3d_m_by_arm": {k: mean(v) for k, v in sorted(self.by_arm.items())},
            "ade_3d_m_by_subtask": {k: mean(v) for k, v in self.by_subtask.items()},
            "ade_2d_px": self.px_sum / self.px_n if self.px_n else None,
            "box_iou": mean(self.iou), "subtask_match": self.match / self.n if self.n else None,
            "decode_ms": mean(self.ms["decode_ms"]), "primitive_ms": mean(self.ms["primitive_ms"]),
            "prefill_ms": mean(self.ms["prefill_ms"]), "speedup_vs_ar": None,
            "primitive_speedup_vs_ar": None,
            "primitive_ms_by_kind": {k: mean(v) for k, v in sorted(self.primitive_ms_by_kind.items())},
            "primitive_speedup_vs_ar_by_kind": {},
            "gate_accept_rate": self.gate["accepted"] / gate_n if gate_n else None,
            "gate_fallbacks": self.gate["fallback"], "gate_implausible": self.gate["implausible"],
            "gate_check_ms": mean(self.ms["gate_check_ms"]) if gate_n else None,
            "outliers": self.outliers,
            "spec_steps_skipped": self.spec_skipped,
        }


def evaluate(model: Any, keyframes: Sequence[Keyframe], spec: LearningSpec, decoders: Sequence[str] = ("ar",),
             blind: dict | None = None, config: Any = None, progress: bool = False) -> list[dict]:
    """One row per decoder (+ `blind` first when a baseline is given); speed-ups are against `ar`."""
    dec = model.decoder(config, decodings=decoders)
    scorers = {d: Scorer(d, spec.arms, spec.box_objects) for d in decoders}
    tokens: dict[str, list[tuple[int, ...]]] = collections.defaultdict(list)
    rows = []
    if blind is not None:
        sb = Scorer("blind", spec.arms, spec.box_objects)
        for kf in keyframes:
            sb.add(kf, blind_prediction(blind, kf))
        rows.append(sb.row())
    it = keyframes
    if progress:
        from tqdm import tqdm

        it = tqdm(keyframes, desc="eval " + ",".join(decoders), unit="keyframe", mininterval=5.0)
    for kf in it:
        prompt = model.encode(kf.instruction, [kf.images])
        for d in decoders:
            result = dec.generate(prompt, decoder=d, image_size=kf.camera_size)
            pred = prediction_from_result(result, spec)
            scorers[d].add(kf, pred)
            tokens[d].append(pred.tokens)
    body = [scorers[d].row() for d in decoders]
    ar = next((r for r in body if r["decoder"] == "ar"), None)
    for r in body:
        if ar is not None and r["decode_ms"]:
            r["speedup_vs_ar"] = ar["decode_ms"] / r["decode_ms"]
            r["primitive_speedup_vs_ar"] = ar["primitive_ms"] / r["primitive_ms"] if r["primitive_ms"] else None
            r["primitive_speedup_vs_ar_by_kind"] = {
                k: ar["primitive_ms_by_kind"][k] / ms for k, ms in r["primitive_ms_by_kind"].items()
                if ms and ar["primitive_ms_by_kind"].get(k)}
        if "ar" in tokens:
            same = [a == b for a, b in zip(tokens["ar"], tokens[r["decoder"]])]
            r["tokens_identical_to_ar"] = sum(same) / len(same) if same else None
    return rows + body


def predictions_for(model: Any, keyframes: Sequence[Keyframe], spec: LearningSpec, decoder: str = "ar",
                    config: Any = None) -> list[Prediction]:
    """One decoder's prediction for each of `keyframes`."""
    dec = model.decoder(config, decodings=[decoder])
    return [prediction_from_result(dec.generate(model.encode(kf.instruction, [kf.images]), decoder=decoder,
                                                image_size=kf.camera_size), spec) for kf in keyframes]


def scored(keyframes: Sequence[Keyframe], predictions: Sequence[Prediction], spec: LearningSpec,
           decoder: str = "ar") -> Scorer:
    """A Scorer filled with `predictions` of `keyframes`, in order."""
    s = Scorer(decoder, spec.arms, spec.box_objects)
    for kf, pred in zip(keyframes, predictions, strict=True):
        s.add(kf, pred)
    return s


def _fmt(v: Any, scale: float = 1.0, nd: int = 2) -> str:
    return "-" if v is None else f"{v * scale:.{nd}f}"


def format_table(rows: Sequence[dict], focus_subtask: str | None = None) -> str:
    """Markdown table of the rows (distances in cm, pixel error in px)."""
    head = ["decoder", "n", "ADE 3D cm", "FDE cm", "FDE t=0 cm", "SR@5cm"]
    arms = sorted({a for r in rows for a in r["ade_3d_m_by_arm"]})
    head += [f"ADE {a} cm" for a in arms]
    if focus_subtask:
        head.append("ADE focus cm")
    head += ["ADE 2D px", "box IoU", "sub-task", "decode ms", "prim ms", "speed-up", "prim speed-up",
             "gate acc", "implaus.", "outliers", "invalid"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["decoder"], str(r["n"]), _fmt(r["ade_3d_m"], 100), _fmt(r["fde_3d_m"], 100),
                 _fmt(r.get("fde_3d_m_first_keyframe"), 100),
                 _fmt(r["sr_5cm"], 100, 1) + ("%" if r["sr_5cm"] is not None else "")]
        cells += [_fmt(r["ade_3d_m_by_arm"].get(a), 100) for a in arms]
        if focus_subtask:
            cells.append(_fmt(r["ade_3d_m_by_subtask"].get(focus_subtask), 100))
        cells += [_fmt(r["ade_2d_px"], 1, 1), _fmt(r["box_iou"], 1, 3), _fmt(r["subtask_match"], 1, 3),
                  _fmt(r["decode_ms"], 1, 1), _fmt(r["primitive_ms"], 1, 1), _fmt(r["speedup_vs_ar"], 1, 1),
                  _fmt(r["primitive_speedup_vs_ar"], 1, 1), _fmt(r["gate_accept_rate"], 1, 3),
                  str(r["gate_implausible"]), str(r["outliers"]), str(r["invalid"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
