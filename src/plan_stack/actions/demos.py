"""Recorded ALOHA demonstrations (`plan-stack record-demos`, docs/aloha.md) -> `Episode`s.

Per episode: `/action` (commanded positions, stack units) are the actions
(`/expert_action` instead where the recording has it: a recovery
demonstration, whose pushed commands are not what a policy should learn but
the expert's own command from the pushed state is — the DART label),
`/joint_states` at each command's stamp is the state (what the chunker sees
in `Observation.joint_state`), and the conditioning is built from the
annotation's ground-truth plan in force at that time (the latest keyframe):
one token per arm waypoint, one per object box, one for the sub-task text
and one for the instruction, in the `PlanFeatures` shape ([tokens, width]).
`train-action-head --demos` and heads `bench/rtc.py` trains without `--model`
are conditioned on these tokens; the shipped heads are conditioned on the
planner target's plan features instead (`actions.train_features`).

Token layout (width `COND_WIDTH` = 16):
`[0:3]` xyz (m, cam_high optical frame), `[3:5]` uv / image size, `[5]` in
image, `[6]` left arm, `[7]` right arm, `[8]` waypoint index / (P - 1),
`[9]` box, `[10]` text, `[11:16]` hashed bag-of-words (text) or the box
`[u1, v1, u2, v2] / size` (box).
"""
from __future__ import annotations

import glob
import json
import os
import zlib
from pathlib import Path

import numpy as np

from plan_stack.actions.data import Episode
from plan_stack.actions.errors import DatasetError
from plan_stack.data.bags import read_bag
from plan_stack.stamps import sec_nanosec_to_s

__all__ = ["COND_WIDTH", "text_features", "plan_tokens", "keyframe_in_force", "load_demo_dir", "load_episode"]

COND_WIDTH = 16
_TEXT_DIMS = 5


def text_features(text: str) -> np.ndarray:
    """Deterministic hashed bag-of-words embedding [5] (no tokenizer or model hub needed)."""
    out = np.zeros(_TEXT_DIMS)
    words = text.lower().split()
    for w in words:
        rng = np.random.default_rng(zlib.crc32(w.encode()))
        out += rng.standard_normal(_TEXT_DIMS)
    return out / max(np.sqrt(len(words)), 1.0)


def plan_tokens(keyframe: dict, instruction: str, width: int, height: int) -> np.ndarray:
    """Conditioning tokens [K, COND_WIDTH] of one annotated keyframe (ground-truth plan)."""
    tokens = []
    arms = keyframe["arms"]  # ALOHA: left, right; a single arm (Franka) is flagged as the first
    for a, arm in enumerate([k for k in ("left", "right") if k in arms] or list(arms)):
        plan = arms[arm]
        n = len(plan["xyz"])
        for p, (xyz, uv, inside) in enumerate(zip(plan["xyz"], plan["uv"], plan["in_image"])):
            tok = np.zeros(COND_WIDTH)
            tok[0:3] = xyz
            if uv is not None and inside:
                tok[3:5] = uv[0] / width, uv[1] / height
                tok[5] = 1.0
            tok[6 + a] = 1.0
            tok[8] = p / max(n - 1, 1)
            tokens.append(tok)
    for box in keyframe.get("boxes", []):
        tok = np.zeros(COND_WIDTH)
        tok[9] = 1.0
        u1, v1, u2, v2 = box["bbox"]
        tok[11:15] = u1 / width, v1 / height, u2 / width, v2 / height
        tokens.append(tok)
    for text in (keyframe["subtask"], instruction):
        tok = np.zeros(COND_WIDTH)
        tok[10] = 1.0
        tok[11:16] = text_features(text)
        tokens.append(tok)
    return np.stack(tokens)


def _read_joint_topics(bag_dir: str) -> dict[str, tuple[np.ndarray, np.ndarray, list[str]]]:
    out = {}
    msgs = read_bag(bag_dir, topics=("/action", "/expert_action", "/joint_states"))
    if msgs.get("/expert_action"):
        msgs["/action"] = msgs["/expert_action"]
    for topic in ("/action", "/joint_states"):
        rows = [msg for _, msg in msgs.get(topic, [])]
        out[topic] = (np.array([sec_nanosec_to_s(m.header.stamp.sec, m.header.stamp.nanosec) for m in rows]),
                      np.array([np.asarray(m.position, dtype=float) for m in rows]),
                      list(rows[0].name) if rows else [])
    return out


def _states_as_actions(states: np.ndarray, js_names: list[str], act_names: list[str], bag_dir: str) -> np.ndarray:
    """Joint states in the command's joint order. A parallel gripper commanded as one width channel
    (`*_gripper`, Franka) while its two finger joints are reported is the fingers' sum (the bridge's
    convention); any other mismatch is an error."""
    fingers = [i for i, n in enumerate(js_names) if "finger" in n]
    cols = []
    for name in act_names:
        if name in js_names:
            cols.append(states[:, js_names.index(name)])
        elif name.endswith("_gripper") and len(fingers) == 2:
            cols.append(states[:, fingers].sum(axis=1))
        else:
            raise DatasetError(f"{bag_dir}: /action joints {act_names} differ from /joint_states {js_names}")
    return np.stack(cols, axis=1)


def keyframe_in_force(key_times, t_s):
    """Index of the keyframe in force at `t_s` (scalar or array): the newest at or before it (1 µs of
    slack for float stamps), the first one before any. The one rule training, evaluation and the
    ground-truth planner share."""
    key_times = np.asarray(key_times, dtype=float)
    idx = np.clip(np.searchsorted(key_times, np.asarray(t_s, dtype=float) + 1e-6, side="right") - 1,
                  0, len(key_times) - 1)
    return int(idx) if np.ndim(idx) == 0 else idx


def load_episode(annotation_path: str) -> Episode:
    """One recorded episode: its annotation JSON and the bag folder it names."""
    with open(annotation_path, encoding="utf-8") as fh:
        ann = json.load(fh)
    bag_dir = os.path.join(os.path.dirname(annotation_path), ann["bag"])
    if not os.path.isdir(bag_dir):
        raise DatasetError(f"{annotation_path}: bag folder {bag_dir} is missing")
    topics = _read_joint_topics(bag_dir)
    t_act, actions, act_names = topics["/action"]
    t_js, states, js_names = topics["/joint_states"]
    if len(t_act) < 2 or len(t_js) < 1:
        raise DatasetError(f"{bag_dir}: needs /action and /joint_states messages")
    if act_names != js_names:
        states = _states_as_actions(states, js_names, act_names, bag_dir)
    dt = float(np.median(np.diff(t_act)))
    # state when each command was issued: the latest joint state at or before its stamp
    js_idx = np.searchsorted(t_js, t_act + 1e-6, side="right") - 1
    if np.any(js_idx < 0):
        raise DatasetError(f"{bag_dir}: a command precedes every joint state")
    cam = ann["camera"]
    keys = ann["keyframes"]
    if not keys:
        raise DatasetError(f"{annotation_path}: no keyframes")
    seqs = [plan_tokens(k, ann["instruction"], cam["width"], cam["height"]) for k in keys]
    n_tok = max(s.shape[0] for s in seqs)
    cond = np.zeros((len(seqs), n_tok, COND_WIDTH))
    for i, s in enumerate(seqs):  # a missing box (occluded) repeats the text token rather than padding with zeros
        cond[i, : s.shape[0]] = s
        cond[i, s.shape[0]:] = s[-1]
    key_t = np.array([k["t_s"] for k in keys])
    # a command before the first annotated keyframe has no plan in force (a recovery demonstration is
    # annotated from its mistake on, docs/franka.md): it is not a sample
    planned = t_act >= key_t[0] - 1e-6
    if planned.sum() < 2:
        raise DatasetError(f"{annotation_path}: fewer than 2 commands at or after the first keyframe")
    t_act, actions, js_idx = t_act[planned], actions[planned], js_idx[planned]
    cond_index = keyframe_in_force(key_t, t_act)
    return Episode(Path(annotation_path).stem, round(dt, 6), actions, states[js_idx], cond, cond_index)


def load_demo_dir(path: str, successful_only: bool = True) -> list[Episode]:
    """Every annotated episode in `path` (sorted by name); failed demonstrations are skipped."""
    files = sorted(glob.glob(os.path.join(path, "*.json")))
    if not files:
        raise DatasetError(f"demos: no annotation JSON files in {path!r} (run `plan-stack record-demos`)")
    episodes = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            ok = json.load(fh).get("success", False)
        if ok or not successful_only:
            episodes.append(load_episode(f))
    if not episodes:
        raise DatasetError(f"demos: no successful episode in {path!r}")
    return episodes
