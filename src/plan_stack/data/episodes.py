"""Annotated keyframes of recorded episodes, with the camera images the planner would see.

Each robot's recorder writes `DIR/<task>_<seed>.json` (annotation) next to the
rosbag2 folder it names. A keyframe here is one annotated instant: the
instruction, the sub-task, the ground-truth plan (per arm: P waypoints in the
annotated camera's optical frame, metres, and their pixels; or the driving
path in the ego frame) and, per camera, the latest image at or before the
keyframe's time, brought to the model's image size with the same
`ingest.preprocess.fit` (centre crop + resize) that the ingest node applies.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
from collections.abc import Iterable, Sequence

import numpy as np

from plan_stack.robots import PROFILES, LearningSpec

__all__ = ["spec_of_format", "Keyframe", "annotation_files", "load_keyframes",
           "load_episode_keyframes", "data_fingerprint", "episode_seed"]


def spec_of_format(annotation_format: str) -> LearningSpec | None:
    """The learning facts of the robot whose recorder writes annotations of this format tag (None: no robot
    does)."""
    return next((p.learning for p in PROFILES.values() if p.learning.format == annotation_format), None)


@dataclasses.dataclass
class Keyframe:
    """One annotated instant of one episode."""

    episode: str
    seed: int
    index: int  # keyframe index within the episode
    t_s: float
    instruction: str
    subtask: str
    images: list[np.ndarray]  # per prompt camera, HxWx3 uint8 at the model's image size
    points: list[np.ndarray]  # per arm [P, 3] metres (driving: z = 0)
    uv: list[np.ndarray]  # per arm [P, 2] pixels of the annotated camera, NaN outside the image
    boxes: dict[str, tuple[float, float, float, float]]  # object -> (u1, v1, u2, v2) pixels
    camera_size: tuple[int, int]  # (width, height) of the annotated camera: the pixel frame of uv/boxes


def annotation_files(path: str | os.PathLike) -> list[str]:
    """Annotation JSON files of a recording folder: those with their episode's bag folder beside them
    (`<stem>.json` + `<stem>/`), so other JSON files there (summaries, reports) are not taken for episodes."""
    files = sorted(f for f in glob.glob(os.path.join(os.fspath(path), "*.json")) if os.path.isdir(f[:-len(".json")]))
    if not files:
        raise FileNotFoundError(f"{path}: no annotation JSON files (record them with `plan-stack record-demos`)")
    return files


def episode_seed(annotation_path: str) -> int:
    with open(annotation_path, encoding="utf-8") as fh:
        return int(json.load(fh)["seed"])


def data_fingerprint(paths: Iterable[str | os.PathLike]) -> dict:
    """Identity of a data set: seeds, episode count and a hash of every annotation file's bytes.

    Written into checkpoints and manifests; a resume compares it (a different
    data set under the same directory name is a different fingerprint).
    """
    h = hashlib.sha256()
    seeds, n = [], 0
    for p in paths:
        for f in annotation_files(p):
            with open(f, "rb") as fh:
                raw = fh.read()
            h.update(os.path.basename(f).encode() + b"\0" + hashlib.sha256(raw).digest())
            seed = json.loads(raw).get("seed")  # recorded episodes carry it; hand-made annotations may not
            if seed is not None:
                seeds.append(int(seed))
            n += 1
    seeds.sort()
    return {"episodes": n, "seed_min": seeds[0] if seeds else None, "seed_max": seeds[-1] if seeds else None,
            "sha256": h.hexdigest()}


def _bag_images(bag_dir: str, camera: str) -> tuple[np.ndarray, list[np.ndarray]]:
    from plan_stack.data.bags import read_bag
    from plan_stack.ingest.preprocess import to_rgb8

    topic = f"/cameras/{camera}/image_raw"
    msgs = read_bag(bag_dir, topics=(topic,)).get(topic, [])
    if not msgs:
        raise ValueError(f"{bag_dir}: no {topic} messages")
    times = np.array([t for t, _ in msgs])
    images = [to_rgb8(np.asarray(m.data, dtype=np.uint8).reshape(m.height, m.width, -1), m.encoding)
              for _, m in msgs]
    return times, images


def _nan_uv(uv: Sequence) -> np.ndarray:
    return np.array([[np.nan, np.nan] if p is None else p for p in uv], dtype=float).reshape(-1, 2)


def load_episode_keyframes(annotation_path: str, spec: LearningSpec, image_size: tuple[int, int],
                           successful_only: bool = True) -> list[Keyframe]:
    """The annotated keyframes of one episode (empty for a failed demonstration when `successful_only`,
    unless its labels are the expert's whatever the driven outcome: `expert_labels`, on-policy recording)."""
    from plan_stack.ingest.preprocess import fit

    f = annotation_path
    with open(f, encoding="utf-8") as fh:
        ann = json.load(fh)
    if ann.get("format") != spec.format:
        raise ValueError(f"{f}: format {ann.get('format')!r} is not {spec.robot}'s {spec.format!r}")
    if successful_only and not (ann.get("success", False) or ann.get("expert_labels", False)):
        return []
    bag = os.path.join(os.path.dirname(f), ann["bag"])
    streams = [_bag_images(bag, cam) for cam in spec.cameras]
    cam = ann["camera"]
    size = (int(cam["width"]), int(cam["height"]))
    out = []
    for i, k in enumerate(ann["keyframes"]):
        t = float(k["t_s"])
        images = []
        for times, frames in streams:
            j = max(int(np.searchsorted(times, t + 1e-6, side="right")) - 1, 0)
            images.append(fit(frames[j], image_size[0], image_size[1], "crop"))
        if spec.ground_path:
            xy = np.asarray(k["xy"], dtype=float)
            points = [np.concatenate([xy, np.zeros((len(xy), 1))], 1)]
            uv = [_nan_uv(k["uv"])]
            subtask = ann.get("subtask", spec.default_subtask)
        else:
            points = [np.asarray(k["arms"][a]["xyz"], dtype=float) for a in spec.arms]
            uv = [_nan_uv(k["arms"][a]["uv"]) for a in spec.arms]
            subtask = k["subtask"]
        boxes = {b["object"]: _bbox(b["bbox"]) for b in k.get("boxes", []) if b.get("bbox") is not None}
        out.append(Keyframe(os.path.splitext(os.path.basename(f))[0], int(ann["seed"]), i, t,
                            ann["instruction"], subtask, images, points, uv, boxes, size))
    return out


def _bbox(values: Sequence[float]) -> tuple[float, float, float, float]:
    u1, v1, u2, v2 = (float(v) for v in values)
    return u1, v1, u2, v2


def load_keyframes(path: str | os.PathLike, spec: LearningSpec, image_size: tuple[int, int],
                   successful_only: bool = True, limit: int | None = None, progress: bool = False) -> list[Keyframe]:
    """Every annotated keyframe of the episodes in `path` (sorted by file name; the first `limit` files)."""
    files = annotation_files(path)[:limit]
    bar = files
    if progress:
        from tqdm import tqdm

        bar = tqdm(files, desc=f"read {os.path.basename(os.fspath(path))}", unit="episode", mininterval=5.0)
    out: list[Keyframe] = []
    for f in bar:
        out += load_episode_keyframes(f, spec, image_size, successful_only)
    return out
