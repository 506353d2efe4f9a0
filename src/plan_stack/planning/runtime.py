"""The planner without ROS: observation in, checked plan out.

`PlannerRuntime` owns one loaded model directory (`model_dir.PlannerModel`),
its decoder and the streaming window. The planner node converts messages to
`FrameInput` at the edge and copies `PlanOutput` into VisualPlan and
PlanFeatures; benchmarks and tests call it directly.

Contract of `plan()`:

* the observation is checked against the model's manifest first (cameras
  present, HxWx3 uint8 images of the manifest's size, finite joint state);
  a mismatch raises `MalformedObservation` naming the field, before any
  model work;
* the window holds the last `history_frames` planned observations, oldest
  first; until it is full the oldest frame is repeated; a stamp older than
  the newest frame restarts it (simulation reset, bag loop). With
  `streaming`, frames already in the window are not encoded again (see
  `TargetAdapter` streaming prefill);
* the result is checked: every metric point finite, `uv` finite or NaN
  pairs (the message's out-of-frame convention), features finite. A plan
  that fails is returned with `valid=False` and a reason and must not be
  published; primitives of kinds not wanted are dropped.

One request at a time (the target is stateful): call from one thread.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from plan_stack.config import ConfigError, param, validate
from plan_stack.planning import layouts as L
from plan_stack.planning.decoders import DecoderChoice, DecoderConfig
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.fields import PrimitiveFields
from plan_stack.planning.model_dir import PlannerModel, prompt_text

__all__ = ["RuntimeConfig", "FrameInput", "PlanOutput", "MalformedObservation", "PlannerRuntime",
           "MESSAGE_KINDS"]

#: frame keys unique in the process: runtimes sharing one target never mistake each other's cached frames
_FRAME_KEYS = itertools.count()

#: Primitive.kind values a model can emit
MESSAGE_KINDS = tuple(sorted({v[2] for v in L.KINDS.values()}))


class MalformedObservation(PlanningError):
    """An observation the model cannot take; `field` names the offending message field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclasses.dataclass(frozen=True)
class RuntimeConfig(DecoderChoice):
    """What to plan and how; zero / empty values take the model manifest's.

    Its fields are the planner node's parameters, the first of them `decoder`, declared once in
    `decoders.DecoderChoice` and shared with `DecoderConfig` (the runtime builds the decoder's config from it,
    the model's budget and the manifest's frame)."""

    primitive_kinds: tuple[str, ...] = param(
        "Primitive.kind values to publish (empty: all the model emits)", (), choices=MESSAGE_KINDS)
    instruction: str = param("instruction when the observation and the request carry none (empty: the "
                             "model's default)", "")
    cameras: tuple[str, ...] = param("Observation cameras fed to the model, in prompt order (empty: the model's)",
                                     (), read_only=True)
    budget: int = param("output tokens per plan (0: the model's)", 0, min=0, max=65536)
    history_frames: int = param("observations per prompt, the streaming window K (0: the model's)", 0, min=0,
                                max=64, read_only=True)
    streaming: bool = param("reuse the KV of frames still in the window; only the new frame is encoded", True,
                            read_only=True)
    response_prefix: str = param("supplied start of every response (e.g. a tool call and a primitive start "
                                 "token, to force one primitive family); empty: none", "")

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass
class FrameInput:
    """One observation, already converted from the message (nothing checked yet)."""

    stamp_s: float
    camera_names: Sequence[str]
    images: Sequence[np.ndarray]  # HxWx3 uint8 (rgb8), one per camera name
    joint_positions: Sequence[float] = ()
    joint_names: Sequence[str] = ()


@dataclasses.dataclass
class PlanOutput:
    """One plan, ready to be copied into VisualPlan / PlanFeatures."""

    stamp_s: float
    instruction: str
    subtask: str
    primitives: list[PrimitiveFields]
    features: np.ndarray  # [n, hidden] float32 over the accepted primitive tokens
    decoder: str
    valid: bool
    reason: str  # why a plan is invalid / empty; "" when fine
    stop_reason: str  # eos | budget | cancelled
    vision_ms: float
    prefill_ms: float
    decode_ms: float
    total_ms: float  # observation check to checked result, image preprocessing included
    target_forwards: int
    drafter_forwards: int
    tokens_out: int
    tau: float
    gate_accepted: int
    gate_fallback: int
    blocks_rejected: int
    prompt_tokens: int
    prefilled_tokens: int
    frames: int
    frames_encoded: int

    @property
    def saved_prefill_fraction(self) -> float:
        return 1.0 - self.prefilled_tokens / max(self.prompt_tokens, 1)


class PlannerRuntime:
    """Checks observations, keeps the streaming window, decodes and checks plans."""

    def __init__(self, model: PlannerModel, cfg: RuntimeConfig | None = None):
        self.model = model
        self.cfg = cfg = cfg or RuntimeConfig()
        manifest = model.manifest
        self.cameras = tuple(cfg.cameras) or model.cameras
        if model.cameras and len(self.cameras) != len(model.cameras):
            raise ConfigError(f"cameras: {list(self.cameras)} — the model takes {len(model.cameras)} camera(s) "
                              f"{list(model.cameras)}")
        if self.cameras and not model.target.is_vl:
            raise ConfigError("cameras: the model's target is text-only and takes no images")
        self.image_size = model.image_size  # (width, height) or None: any size
        self.history_frames = cfg.history_frames or int(manifest["history_frames"])
        self.budget = cfg.budget or int(manifest["budget"])
        self.instruction = cfg.instruction or str(manifest["instruction"])
        emitted = {L.KINDS[k][2] for k in manifest["primitive_kinds"] if k in L.KINDS}
        unknown = [k for k in manifest["primitive_kinds"] if k not in L.KINDS]
        if unknown:
            raise ConfigError(f"model_dir: manifest primitive_kinds {unknown} are not layout kinds "
                              f"{sorted(L.KINDS)}")
        self.emitted_kinds = emitted or set(MESSAGE_KINDS)
        self.kinds = self.check_kinds(cfg.primitive_kinds)
        self.streaming = bool(cfg.streaming and self.cameras)
        try:
            frame = str(manifest.get("frame_id") or "")  # the frame the model's metric points are in
            dcfg = DecoderConfig(decoder=cfg.decoder, budget=self.budget)
            if frame:
                dcfg = dataclasses.replace(dcfg, robot_frame_id=frame, drive_frame_id=frame)
        except ConfigError as exc:
            raise ConfigError(f"budget: {exc}") from None
        self.decoder = model.decoder(dcfg)  # ConfigError naming `decoder` when it needs a drafter the model lacks
        self.prefix = model.target.tokenizer.encode(cfg.response_prefix, add_special_tokens=False)
        if len(self.prefix) >= self.budget:
            raise ConfigError(f"response_prefix: {len(self.prefix)} tokens leave no room in the budget "
                              f"({self.budget})")
        self._window: collections.deque = collections.deque(maxlen=self.history_frames)

    # -- checks ----------------------------------------------------------------------
    def check_kinds(self, kinds: Sequence[str]) -> tuple[str, ...]:
        """Wanted Primitive.kind values (empty: all the model emits); ConfigError names a kind it cannot."""
        bad = [k for k in kinds if k not in self.emitted_kinds]
        if bad:
            raise ConfigError(f"primitive_kinds: {bad} not emitted by this model (it emits "
                              f"{sorted(self.emitted_kinds)})")
        return tuple(kinds) or tuple(sorted(self.emitted_kinds))

    def check(self, obs: FrameInput) -> list[np.ndarray]:
        """The model's images in prompt order; raises MalformedObservation naming the field."""
        if not math.isfinite(obs.stamp_s):
            raise MalformedObservation("header.stamp", "not a finite time")
        names = list(obs.camera_names)
        if len(names) != len(obs.images):
            raise MalformedObservation("camera_names", f"{len(names)} names for {len(obs.images)} images")
        images = []
        for cam in self.cameras:
            if cam not in names:
                raise MalformedObservation("camera_names", f"camera {cam!r} missing (has {names})")
            i = names.index(cam)
            im = obs.images[i]
            field = f"images[{i}] ({cam})"
            if not (isinstance(im, np.ndarray) and im.ndim == 3 and im.shape[2] == 3 and im.dtype == np.uint8):
                raise MalformedObservation(field, f"expected an HxWx3 uint8 (rgb8) image, got "
                                                  f"{getattr(im, 'shape', type(im))} {getattr(im, 'dtype', '')}")
            if self.image_size is not None and (im.shape[1], im.shape[0]) != self.image_size:
                raise MalformedObservation(field, f"size {im.shape[1]}x{im.shape[0]}, the model takes "
                                                  f"{self.image_size[0]}x{self.image_size[1]}")
            images.append(im)
        if len(obs.joint_names) and len(obs.joint_names) != len(obs.joint_positions):
            raise MalformedObservation("joint_state", f"{len(obs.joint_names)} names for "
                                                      f"{len(obs.joint_positions)} positions")
        q = np.asarray(obs.joint_positions, dtype=float)
        if q.size and not np.all(np.isfinite(q)):
            j = int(np.flatnonzero(~np.isfinite(q))[0])
            name = obs.joint_names[j] if len(obs.joint_names) > j else str(j)
            raise MalformedObservation(f"joint_state.position[{j}]", f"{name} is not finite ({q[j]})")
        return images

    # -- planning --------------------------------------------------------------------
    def reset(self) -> None:
        """Empty the window (the next plan encodes every frame again)."""
        self._window.clear()
        self.model.target.clear_frames()

    def plan(self, obs: FrameInput, instruction: str = "", kinds: Sequence[str] = (),
             on_text: Callable[[str], None] | None = None,
             should_stop: Callable[[], bool] | None = None) -> PlanOutput:
        """Plan from `obs` (checked first) with the window of previous frames."""
        t0 = time.perf_counter()
        images = self.check(obs)
        wanted = self.check_kinds(kinds) if kinds else self.kinds
        text = instruction or self.instruction
        self._push(obs.stamp_s, images)
        frames = list(self._window)
        frames = [frames[0]] * (self.history_frames - len(frames)) + frames
        target = self.model.target
        if self.streaming:
            prompt = target.streaming_prompt(prompt_text(text), [f[2] for f in frames])
        else:
            prompt = self.model.encode(text, [f[1] for f in frames])
        res = self.decoder.generate(prompt, response_prefix=self.prefix, on_text=on_text, should_stop=should_stop)
        st = res.stats
        counts = target.last_prefill
        features = res.features.detach().float().cpu().numpy().astype(np.float32)
        prims = [p for p in res.primitives if p.kind in wanted]
        valid, reason = True, ""
        if res.stop_reason == "cancelled":
            valid, reason = False, "cancelled"
        else:
            problem = _check_primitives(res.primitives) or (
                "" if np.all(np.isfinite(features)) else "plan features contain non-finite values")
            if problem:
                valid, reason = False, problem
            elif not prims:
                reason = "no primitive of the wanted kinds" + (f" ({'; '.join(res.errors)})" if res.errors else "")
        return PlanOutput(
            stamp_s=obs.stamp_s, instruction=text, subtask=res.subtask, primitives=prims, features=features,
            decoder=res.decoder, valid=valid, reason=reason, stop_reason=res.stop_reason,
            vision_ms=st.vision_ms, prefill_ms=st.prefill_ms, decode_ms=st.decode_ms,
            total_ms=(time.perf_counter() - t0) * 1e3, target_forwards=st.target_forwards,
            drafter_forwards=st.drafter_forwards, tokens_out=st.tokens_out, tau=st.tau,
            gate_accepted=st.gate_accepted, gate_fallback=st.gate_fallback, blocks_rejected=st.blocks_rejected,
            prompt_tokens=counts.prompt_tokens, prefilled_tokens=counts.prefilled_tokens, frames=len(frames),
            frames_encoded=counts.frames_encoded if self.streaming else len(frames))

    def _push(self, stamp_s: float, images: list[np.ndarray]) -> None:
        """Add the observation as the newest frame (same stamp as the newest: reuse it)."""
        if self._window and stamp_s < self._window[-1][0]:
            self.reset()
        if self._window and stamp_s == self._window[-1][0]:
            return
        segment = self.model.target.encode_frame(next(_FRAME_KEYS), images) if self.streaming else None
        self._window.append((stamp_s, images, segment))


def _check_primitives(prims: Sequence[PrimitiveFields]) -> str:
    """First reason a primitive is unfit to publish, "" if none."""
    for i, p in enumerate(prims):
        if p.kind not in MESSAGE_KINDS:
            return f"primitive {i}: unknown kind {p.kind!r}"
        pts = np.asarray(p.points, dtype=float)
        if pts.size and not np.all(np.isfinite(pts)):
            return f"primitive {i} ({p.kind}): non-finite point"
        uv = np.asarray(p.uv, dtype=float).reshape(-1, 2) if len(p.uv) % 2 == 0 else None
        if uv is None:
            return f"primitive {i} ({p.kind}): odd number of uv values"
        nan = np.isnan(uv)
        if np.isinf(uv).any() or (nan.any(axis=1) != nan.all(axis=1)).any():
            return f"primitive {i} ({p.kind}): uv not finite (only whole NaN pairs mark out of frame)"
        if p.kind == "box" and (uv.shape[0] != 2 or nan.any() or not (uv[0] < uv[1]).all()):
            return f"primitive {i} (box): corners must be finite with u1 < u2, v1 < v2"
        if not pts.size and not uv.size:
            return f"primitive {i} ({p.kind}): empty"
    return ""
