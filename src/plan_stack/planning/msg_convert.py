"""The planner's messages <-> `planning.runtime` types (the planner node's edge; no decisions here).

Observation -> `FrameInput` (only the model's cameras are decoded), `PlanOutput` -> VisualPlan and
PlanFeatures. Stamps are handed through as message stamps: a plan carries its observation's.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point

from plan_stack.msg import Observation, PlanFeatures, Primitive, VisualPlan
from plan_stack.planning.runtime import FrameInput, MalformedObservation, PlanOutput
from plan_stack.ros.image import ImageError, image_to_numpy
from plan_stack.ros.time import stamp_to_s

__all__ = ["frame_from_msg", "plan_to_msg", "features_to_msg"]


def frame_from_msg(msg: Observation, cameras: Sequence[str]) -> FrameInput:
    """Message -> FrameInput; only `cameras` (the model's) are decoded, the others stay empty.

    Raises MalformedObservation naming the field (camera names vs images, encoding, image size); a camera
    the message lacks is left for `PlannerRuntime.check` to name.
    """
    names = list(msg.camera_names)
    if len(names) != len(msg.images):
        raise MalformedObservation("camera_names", f"{len(names)} names for {len(msg.images)} images")
    images = [np.zeros((0, 0, 3), np.uint8)] * len(names)
    for cam in cameras:
        if cam not in names:
            continue  # runtime.check names it
        i = names.index(cam)
        im = msg.images[i]
        if im.encoding != "rgb8":
            raise MalformedObservation(f"images[{i}] ({cam})", f"encoding {im.encoding!r}, expected 'rgb8'")
        try:
            images[i] = image_to_numpy(im)
        except ImageError as exc:
            raise MalformedObservation(f"images[{i}] ({cam})", str(exc)) from None
    js = msg.joint_state
    return FrameInput(stamp_to_s(msg.header.stamp), names, images, list(js.position), list(js.name))


def plan_to_msg(out: PlanOutput, stamp: Time) -> VisualPlan:
    """A checked plan as VisualPlan, stamped `stamp` (the observation's)."""
    msg = VisualPlan(instruction=out.instruction, subtask=out.subtask, vision_ms=float(out.vision_ms),
                     prefill_ms=float(out.prefill_ms), decode_ms=float(out.decode_ms),
                     total_ms=float(out.total_ms), target_forwards=out.target_forwards,
                     drafter_forwards=out.drafter_forwards, tokens_out=out.tokens_out, decoder=out.decoder)
    msg.header.stamp = stamp
    for p in out.primitives:
        msg.primitives.append(Primitive(
            kind=p.kind, arm=p.arm, frame_id=p.frame_id, points=[Point(x=x, y=y, z=z) for x, y, z in p.points],
            uv=[float(v) for v in p.uv], horizon_s=float(p.horizon_s), block_size=int(p.block_size),
            accepted_direct=bool(p.accepted_direct), fallback_from=int(p.fallback_from)))
    return msg


def features_to_msg(out: PlanOutput, plan_stamp: Time, stamp: Time) -> PlanFeatures:
    """The plan's features [n, hidden] as PlanFeatures: `plan_stamp` = the plan's stamp, header = `stamp`."""
    feat = PlanFeatures(shape=list(out.features.shape), data=out.features.reshape(-1).tolist(), plan_stamp=plan_stamp)
    feat.header.stamp = stamp
    return feat
