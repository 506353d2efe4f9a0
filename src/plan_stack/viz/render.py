"""`plan-stack render BAG --out DIR`: PNG pictures of the plans in a rosbag2 (MCAP) bag, without RViz.

Bags with plans (plan_stack/msg/VisualPlan on any topic): for each plan,
`overlay_NNNN.png` draws it on the image it was planned from (the
Observation with the plan's stamp, its `--camera` or first image; for a
plan without its Observation, the raw `/cameras/<camera>/image_raw` frame
with the plan's header stamp), and `plan3d_NNNN.png` plots its 3D primitives. When the bag
has an annotation (`<bag>.json` beside the folder, as `plan-stack
record-demos` writes it, or `--annotation`), the keyframe within
`--truth-tolerance` of the plan is drawn too: dashed in the 3D plot (with
ADE/FDE) and in the ground-truth colour under the plan in the overlay.

Bags without plans but with an annotation (recorded demonstrations): for each
keyframe, `truth_NNNN.png` draws the annotated ground-truth plan on the
annotated camera's frame recorded at that bag time (annotation times are bag
times, episode start = 0 s).

Plans that cannot be drawn are skipped with a warning line; exit status 2
with one line when the bag cannot be read or holds nothing to draw.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from plan_stack.viz.bag import (
    annotation_for,
    bag_connections,
    camera_of_topic,
    camera_topic,
    image_array,
    nearest,
    read_annotation,
    read_messages,
    truth_plans,
)
from plan_stack.viz.config import VizStyle, to_rgb8
from plan_stack.viz.overlay import draw_overlay
from plan_stack.viz.plan import VizError, check_plan, plan_from_fields, stamp_s
from plan_stack.viz.plot import plot_plan_3d

__all__ = ["add_arguments", "run", "render_bag", "RenderResult", "write_png"]

PLAN_TYPE = "plan_stack/msg/VisualPlan"
OBSERVATION_TYPE = "plan_stack/msg/Observation"
IMAGE_TYPE = "sensor_msgs/msg/Image"


@dataclasses.dataclass
class RenderResult:
    files: list[Path] = dataclasses.field(default_factory=list)
    plans: int = 0  # plans (or ground-truth keyframes) read, after --every / --limit
    source: str = "plans"  # what was drawn: "plans" or, for bags without plans, annotated "keyframes"
    skipped: list[str] = dataclasses.field(default_factory=list)  # why plans were not drawn
    with_truth: int = 0  # plans drawn with a ground-truth keyframe


def write_png(path: Path, rgb: np.ndarray) -> Path:
    import cv2

    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise VizError(f"out: cannot write {path}")
    return path


def _select(items: list, every: int, limit: int) -> list:
    items = items[::every]
    return items[:limit] if limit > 0 else items


def _camera_frames(bag: Path, conns: dict[str, str], camera: str | None,
                   bag_time: bool = False) -> tuple[str, list[tuple[float, Any]]]:
    """(camera name, [(time s, Image)]) sorted by time: header stamps, or bag time with `bag_time`."""
    cams: dict[str, str] = {}
    for t, ty in conns.items():
        cam = camera_of_topic(t) if ty == IMAGE_TYPE else None
        if cam:
            cams[cam] = t
    if not cams:
        return "", []
    name = camera or sorted(cams)[0]
    if name not in cams:
        raise VizError(f"camera: no {camera_topic(name)} in the bag (cameras: {sorted(cams)})")
    msgs = read_messages(bag, [cams[name]]).get(cams[name], [])
    return name, sorted(((t if bag_time else stamp_s(m.header.stamp), m) for t, m in msgs), key=lambda x: x[0])


def render_bag(bag: str | os.PathLike, out: str | os.PathLike, style: VizStyle = VizStyle(), *,
               annotation: str | os.PathLike | None = None, camera: str | None = None, every: int = 1,
               limit: int = 0, truth_tolerance_s: float = 0.05, progress: bool = False) -> RenderResult:
    """Render every (`every`-th, at most `limit`) plan of a bag, or its annotated ground truth; see module doc."""
    bag = Path(bag)
    if not bag.exists():
        raise VizError(f"bag: {bag} does not exist")
    if every < 1 or limit < 0 or truth_tolerance_s < 0:
        raise VizError(f"every/limit/truth_tolerance: need every >= 1, limit >= 0, tolerance >= 0, "
                       f"got {every}, {limit}, {truth_tolerance_s}")
    conns = bag_connections(bag)
    ann = read_annotation(annotation) if annotation else annotation_for(bag)
    truths = truth_plans(ann) if ann else []
    truth_items = [(t.stamp_s, t) for t in truths]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = RenderResult()
    plan_topics = [t for t, ty in conns.items() if ty == PLAN_TYPE]
    from tqdm import tqdm

    if plan_topics:
        msgs = read_messages(bag, plan_topics)
        plans = sorted((m for topic in plan_topics for _, m in msgs.get(topic, [])),
                       key=lambda m: stamp_s(m.header.stamp))
        plans = _select(plans, every, limit)
        result.plans = len(plans)
        obs_topics = [t for t, ty in conns.items() if ty == OBSERVATION_TYPE]
        observations = {}
        for items in read_messages(bag, obs_topics).values():
            for _, o in items:
                observations[(o.header.stamp.sec, o.header.stamp.nanosec)] = o
        raw: dict[str, list] = {}  # raw camera frames, read on first need (plans without an Observation)

        def frames() -> list:
            if "frames" not in raw:
                raw["frames"] = _camera_frames(bag, conns, camera or (ann["camera"]["name"] if ann else None))[1]
            return raw["frames"]

        for k, msg in enumerate(tqdm(plans, desc="render", unit="plan", disable=not progress)):
            try:
                plan = check_plan(plan_from_fields(msg))
            except VizError as exc:
                result.skipped.append(f"plan {k} at {stamp_s(msg.header.stamp):.3f} s: {exc}")
                continue
            truth = nearest(truth_items, plan.stamp_s, truth_tolerance_s)
            result.with_truth += truth is not None
            image = _plan_image(msg, observations, frames, camera)
            if image is not None:
                canvas = image
                if truth is not None:
                    canvas = draw_overlay(canvas, truth, style, text=False, colour=to_rgb8(style.colour_truth))
                canvas = draw_overlay(canvas, plan, style)
                result.files.append(write_png(out / f"overlay_{k:04d}.png", canvas))
            else:
                result.skipped.append(f"plan {k} at {plan.stamp_s:.3f} s: no image with its stamp (3D plot only)")
            if plan.primitives_3d or truth is not None:
                path = out / f"plan3d_{k:04d}.png"
                plot_plan_3d(plan, path, style, truth)
                result.files.append(path)
    elif truths and ann is not None:  # (truths come from the annotation)
        # annotation times are bag (sim) times of the recording, so frames are matched on bag time
        name, cam_frames = _camera_frames(bag, conns, camera or ann["camera"]["name"], bag_time=True)
        if not cam_frames:
            raise VizError(f"bag: no camera images to draw the annotation on "
                           f"(camera {camera or ann['camera']['name']!r})")
        chosen = _select(truths, every, limit)
        result.plans, result.source = len(chosen), "keyframes"
        for k, truth in enumerate(tqdm(chosen, desc="render", unit="keyframe", disable=not progress)):
            img_msg = nearest(cam_frames, truth.stamp_s, truth_tolerance_s)
            if img_msg is None:
                result.skipped.append(f"keyframe {k} at {truth.stamp_s:.3f} s: no {name} frame within "
                                      f"{truth_tolerance_s} s")
                continue
            canvas = draw_overlay(image_array(img_msg), check_plan(truth), style)
            result.files.append(write_png(out / f"truth_{k:04d}.png", canvas))
            result.with_truth += 1
    else:
        raise VizError(f"bag: {bag} has no {PLAN_TYPE} messages and no annotation (nothing to draw)")
    return result


def _plan_image(msg, observations: dict, frames, camera: str | None) -> np.ndarray | None:
    """The image a plan's uv refer to: its Observation's (camera or first) image, else the raw frame with its stamp."""
    key = (msg.header.stamp.sec, msg.header.stamp.nanosec)
    obs = observations.get(key)
    if obs is not None:
        names = list(obs.camera_names)
        name = camera or (names[0] if names else None)
        if name not in names:
            raise VizError(f"camera: {name!r} is not in the Observation's cameras {names}")
        return image_array(obs.images[names.index(name)])
    img = nearest(frames(), stamp_s(msg.header.stamp), 0.0)
    return None if img is None else image_array(img)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="rosbag2 folder (MCAP)")
    parser.add_argument("--out", required=True, help="output directory for the PNG files")
    parser.add_argument("--annotation", default=None,
                        help="ground-truth annotation JSON (default: <bag>.json beside the bag folder, if present)")
    parser.add_argument("--camera", default=None,
                        help="camera the 2D plan is drawn on (default: the Observation's first camera; "
                             "for ground truth: the annotated camera)")
    parser.add_argument("--every", type=int, default=1, help="render every N-th plan or keyframe (default 1)")
    parser.add_argument("--limit", type=int, default=0, help="render at most N plans or keyframes (0: all)")
    parser.add_argument("--truth-tolerance", type=float, default=0.05,
                        help="a keyframe (or camera frame) this close in time to a plan is its ground truth, s "
                             "(default 0.05)")


def run(args: argparse.Namespace) -> int:
    try:
        res = render_bag(args.bag, args.out, annotation=args.annotation, camera=args.camera, every=args.every,
                         limit=args.limit, truth_tolerance_s=args.truth_tolerance, progress=True)
    except (VizError, FileNotFoundError, OSError) as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    for line in res.skipped:
        print(f"warning: {line}", file=sys.stderr)
    print(f"{len(res.files)} pictures from {res.plans} {res.source} ({res.with_truth} with ground truth) in {args.out}")
    return 0
