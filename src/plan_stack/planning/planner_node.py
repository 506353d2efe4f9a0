"""`planner` node: Observation -> VisualPlan + PlanFeatures, and the `plan_request` action.

Wiring only: parameters -> PlannerNodeConfig + RuntimeConfig, the model
directory -> `PlannerRuntime` (which checks observations, keeps the
streaming window, decodes and checks plans).

Topics (node-relative): subscribes `observation` (plan_stack/Observation,
reliable, depth 1); publishes `plan` (VisualPlan, header.stamp = the
observation's stamp), `plan_features` (PlanFeatures, `plan_stamp` = the
plan's stamp) and `/diagnostics`; serves `plan_request` (PlanRequest).

Threads: planning runs in one worker thread, so the node keeps spinning
(diagnostics, goals, cancels) during a plan. The worker takes the newest
waiting observation only; one that arrives while another waits replaces it
(counted `superseded`). Observations older than `max_observation_age_s` by
the node clock (sim time aware) are skipped (`stale`), at arrival and again
when the worker takes them, and so are those stamped that far ahead of it
(`future`); a `plan_request` goal asking for kinds the model does not emit is
rejected with a WARN diagnostic `requests`; malformed ones (cameras, image encoding/size,
non-finite joint state) give a WARN diagnostic naming the field. A plan
whose primitives or features are not finite is never published (`invalid`).
A `plan_request` goal plans on the freshest observation with its own
instruction and kinds, streams the sub-task text as feedback, can be
cancelled, and its plan is also published.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import threading
import time
from typing import Any

import numpy as np
import torch
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from plan_stack.action import PlanRequest
from plan_stack.config import ConfigError, param, validate
from plan_stack.device import BACKENDS, DEVICES, DTYPES, EngineError, resolve_placement
from plan_stack.engines.runtime import PlannerEngines
from plan_stack.msg import Observation, PlanFeatures, Primitive, VisualPlan
from plan_stack.paths import find_data
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.model_dir import load_planner_model
from plan_stack.planning.runtime import FrameInput, MalformedObservation, PlannerRuntime, PlanOutput, RuntimeConfig
from plan_stack.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from plan_stack.ros.image import ImageError, image_to_numpy
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.time import clock_s, stamp_to_s

__all__ = ["PlannerNodeConfig", "PlannerNode", "main"]


@dataclasses.dataclass(frozen=True)
class PlannerNodeConfig:
    model_dir: str = param("planner model directory (target/, drafter/, manifest.json): a path, or a name under "
                           "the package's models/ folder (aloha, franka, drive)", read_only=True)
    replan_period_s: float = param("least time between the stamps of observations planned from (s); 0: plan "
                                   "whenever the worker is free", 0.0, min=0.0)
    max_observation_age_s: float = param("observations older than this by the node clock are not planned from (s)",
                                         1.0, min=0.0)
    request_timeout_s: float = param("longest a plan_request goal waits for its plan (s)", 30.0, min=0.1)
    torch_threads: int = param("torch CPU threads for the model (0 = leave torch's default)", 1, min=0)
    device: str = param("cpu, cuda, or auto (cuda when torch sees a GPU): where the target and drafter run",
                        "cpu", choices=DEVICES, read_only=True)
    dtype: str = param("auto (float32 on cpu, bf16/fp16 on cuda) or an explicit dtype", "auto", choices=DTYPES,
                       read_only=True)
    backend: str = param("what runs the drafter pass and the vision encoder: torch, onnx (onnxruntime) or "
                         "tensorrt; the target's KV-cached forward is always PyTorch", "torch", choices=BACKENDS,
                         read_only=True)
    engine_dir: str = param("exported models (`plan-stack export`) for backend onnx/tensorrt; empty: export the "
                            "model at start-up into a temporary directory", "", read_only=True)
    diagnostics_period_s: float = param("diagnostics republish period (s)", 1.0, min=0.01)
    stats_window: int = param("plans the latency percentiles and plans/s are computed over", 100, min=1)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass
class _Job:
    """One plan to make: from an observation, or for a plan_request goal."""

    frame: FrameInput
    stamp: Time
    instruction: str
    kinds: tuple[str, ...] = ()
    request: bool = False
    texts: list[str] = dataclasses.field(default_factory=list)  # sub-task text after each decoding step
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    output: PlanOutput | None = None
    error: str = ""


class PlannerNode(Node):
    """Plans from the newest observation in a worker thread; serves plan_request."""

    #: a plan_request goal blocks one thread while it waits for the worker
    executor_threads = 2

    def __init__(self, **kwargs) -> None:
        super().__init__("planner", **kwargs)
        self.cfg = cfg = declare_config(self, PlannerNodeConfig)
        rcfg = declare_config(self, RuntimeConfig)
        name = self.get_fully_qualified_name()
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        try:
            placement = resolve_placement(cfg.device, cfg.dtype)
        except EngineError as exc:
            raise ParameterError(f"device/dtype: {exc} (node '{name}')") from None
        try:
            path = find_data("models", cfg.model_dir)
            model = load_planner_model(path, dtype=placement.dtype)
        except (FileNotFoundError, PlanningError, OSError, ValueError, KeyError) as exc:
            raise ParameterError(f"model_dir: {cfg.model_dir!r}: {exc} (node '{name}')") from None
        model.target.model.to(placement.device)
        if model.drafter is not None:
            model.drafter.to(placement.device)
            model.drafter.reset()
        self.engines = None
        if cfg.backend != "torch":
            try:
                self.engines = PlannerEngines(model, cfg.backend, placement, cfg.engine_dir, max(cfg.torch_threads, 1))
            except EngineError as exc:
                raise ParameterError(f"backend: {exc} (node '{name}')") from None
        try:
            self.runtime = PlannerRuntime(model, rcfg)
        except ConfigError as exc:
            raise ParameterError(f"{exc} (node '{name}')") from None
        self.counts: collections.Counter[str] = collections.Counter()
        self._times: collections.deque = collections.deque(maxlen=cfg.stats_window)
        self._cond = threading.Condition()
        self._pending: _Job | None = None
        self._request: _Job | None = None
        self._latest: tuple[FrameInput, Time, str] | None = None
        self._last_planned_s: float | None = None
        self._stopping = threading.Event()

        obs_qos = copy.copy(RELIABLE_QOS)
        obs_qos.depth = 1  # only the newest observation matters
        self._plan_pub = self.create_publisher(VisualPlan, "plan", RELIABLE_QOS)
        self._feat_pub = self.create_publisher(PlanFeatures, "plan_features", RELIABLE_QOS)
        self.create_subscription(Observation, "observation", self._on_observation, obs_qos,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._diag = Diagnostics(self, cfg.diagnostics_period_s)
        self._server = ActionServer(self, PlanRequest, "plan_request", execute_callback=self._execute,
                                    goal_callback=self._on_goal, cancel_callback=lambda _g: CancelResponse.ACCEPT,
                                    callback_group=ReentrantCallbackGroup())
        rt = self.runtime
        self._diag.report("model", OK, f"{path}", decoder=rcfg.decoder, cameras=list(rt.cameras),
                          history_frames=rt.history_frames, streaming=rt.streaming, budget=rt.budget,
                          drafter=model.drafter is not None, device=str(placement.device),
                          dtype=str(placement.dtype).removeprefix("torch."), backend=cfg.backend)
        self._diag.report("plans", OK, "waiting for the first observation")
        self._worker = threading.Thread(target=self._work, name="planner-worker", daemon=True)
        self._worker.start()

    # --- input --------------------------------------------------------------------

    def _on_observation(self, msg: Observation) -> None:
        self.counts["observations"] += 1
        try:
            frame = self._frame(msg)
            self.runtime.check(frame)
        except MalformedObservation as exc:
            self._skip("malformed", WARN, f"malformed observation: {exc}", field=exc.field)
            return
        age = self._now_s() - frame.stamp_s
        if age > self.cfg.max_observation_age_s:
            self._skip("stale", WARN, f"stale observation: {age:.3f} s old (max_observation_age_s "
                       f"{self.cfg.max_observation_age_s})")
            return
        if -age > self.cfg.max_observation_age_s:  # a wrong clock, or sent before a simulator reset
            self._skip("future", WARN, f"observation stamped {-age:.3f} s ahead of the node clock "
                       f"(max_observation_age_s {self.cfg.max_observation_age_s})")
            return
        with self._cond:
            self._latest = (frame, msg.header.stamp, msg.instruction)
            last = self._last_planned_s
            if last is not None and last <= frame.stamp_s < last + self.cfg.replan_period_s - 1e-9:
                return  # the plan in force is recent enough (replan_period_s)
            if self._pending is not None:
                self.counts["superseded"] += 1
            self._pending = _Job(frame, msg.header.stamp, msg.instruction)
            self._cond.notify()

    def _frame(self, msg: Observation) -> FrameInput:
        """Message -> FrameInput; only the model's cameras are decoded (raises MalformedObservation)."""
        names = list(msg.camera_names)
        if len(names) != len(msg.images):
            raise MalformedObservation("camera_names", f"{len(names)} names for {len(msg.images)} images")
        images = [np.zeros((0, 0, 3), np.uint8)] * len(names)
        for cam in self.runtime.cameras:
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

    # --- plan_request -------------------------------------------------------------

    def _on_goal(self, goal: PlanRequest.Goal) -> GoalResponse:
        try:
            self.runtime.check_kinds(list(goal.primitive_kinds))
        except ConfigError as exc:
            self.get_logger().warning(f"plan_request rejected: {exc}")
            self.counts["requests_rejected"] += 1
            self._diag.report("requests", WARN, f"plan_request rejected: {exc}", now=True,
                              rejected=self.counts["requests_rejected"])
            return GoalResponse.REJECT
        with self._cond:
            busy = self._request is not None
        if busy:
            self.get_logger().warning("plan_request rejected: another request is being planned")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> PlanRequest.Result:
        goal = goal_handle.request
        with self._cond:
            latest = self._latest
        error = ""
        if latest is None:
            error = "no observation received yet"
        else:
            age = self._now_s() - latest[0].stamp_s
            if age > self.cfg.max_observation_age_s:
                error = (f"newest observation is {age:.3f} s old (max_observation_age_s "
                         f"{self.cfg.max_observation_age_s})")
        if error or latest is None:
            goal_handle.abort()
            return PlanRequest.Result(error_string=f"no plan: {error}")
        frame, stamp, obs_instruction = latest
        job = _Job(frame, stamp, goal.instruction or obs_instruction, tuple(goal.primitive_kinds), request=True)
        with self._cond:
            if self._request is not None:
                goal_handle.abort()
                return PlanRequest.Result(error_string="no plan: another request is being planned")
            self._request = job
            self._cond.notify()
        self.counts["requests"] += 1
        deadline = time.monotonic() + self.cfg.request_timeout_s
        sent = 0

        def feedback() -> int:  # every text the worker reported since the last call, in order
            texts = job.texts[sent:]
            for text in texts:
                goal_handle.publish_feedback(PlanRequest.Feedback(partial_subtask=text))
            return sent + len(texts)

        while not job.done.wait(0.02):
            if goal_handle.is_cancel_requested or self._stopping.is_set() or time.monotonic() > deadline:
                job.cancel.set()
            sent = feedback()
        sent = feedback()
        out = job.output
        if goal_handle.is_cancel_requested:
            goal_handle.canceled()
            return PlanRequest.Result(error_string="cancelled")
        if job.error or out is None or not out.valid or out.stop_reason == "cancelled":
            reason = job.error or (out.reason if out is not None else "no output")
            if out is not None and out.stop_reason == "cancelled" and time.monotonic() > deadline:
                reason = f"request_timeout_s ({self.cfg.request_timeout_s}) exceeded"
            goal_handle.abort()
            return PlanRequest.Result(error_string=f"no plan: {reason}")
        goal_handle.succeed()
        return PlanRequest.Result(plan=self._plan_msg(out, job.stamp))

    # --- worker -------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping.is_set():
            with self._cond:
                while self._request is None and self._pending is None and not self._stopping.is_set():
                    self._cond.wait(0.5)
                if self._stopping.is_set():
                    return
                job = self._request if self._request is not None else self._pending
                if job is None:
                    continue
                if job is self._pending:
                    self._pending = None
            try:
                self._run(job)
            except Exception as exc:  # a failing plan must not stop the planner
                job.error = f"{type(exc).__name__}: {exc}"
                self.counts["errors"] += 1
                self._diag.report("plans", ERROR, f"planning failed: {job.error}", now=True)
                self.get_logger().error(f"planning failed: {job.error}", throttle_duration_sec=1.0)
            finally:
                job.done.set()
                if job.request:
                    with self._cond:
                        self._request = None

    def _run(self, job: _Job) -> None:
        if not job.request:
            age = self._now_s() - job.frame.stamp_s
            if age > self.cfg.max_observation_age_s:
                self._skip("stale", WARN, f"stale observation: {age:.3f} s old when the planner was "
                           f"free (max_observation_age_s {self.cfg.max_observation_age_s})")
                return
        with self._cond:
            self._last_planned_s = job.frame.stamp_s

        def on_text(text: str) -> None:
            if not job.texts or job.texts[-1] != text:
                job.texts.append(text)  # list.append is atomic; the action thread reads by index

        out = self.runtime.plan(job.frame, job.instruction, job.kinds, on_text=on_text if job.request else None,
                                should_stop=lambda: job.cancel.is_set() or self._stopping.is_set())
        job.output = out
        if out.stop_reason == "cancelled":
            self.counts["cancelled"] += 1
            return
        if not out.valid:
            self._skip("invalid", ERROR, f"plan not published: {out.reason}", status="plans")
            return
        if self._stopping.is_set():
            return
        self._plan_pub.publish(self._plan_msg(out, job.stamp))
        if out.features.shape[0]:
            feat = PlanFeatures(shape=list(out.features.shape), data=out.features.reshape(-1).tolist(),
                                plan_stamp=job.stamp)
            feat.header.stamp = self.get_clock().now().to_msg()
            self._feat_pub.publish(feat)
        else:
            self.counts["no_primitive"] += 1
        self.counts["plans"] += 1
        if self._diag.level("observation") not in (None, OK):
            self._diag.report("observation", OK, "planning from observations")
        self.counts["gate_accepted"] += out.gate_accepted
        self.counts["gate_fallback"] += out.gate_fallback
        self.counts["blocks_rejected"] += out.blocks_rejected
        self._times.append((time.monotonic(), out))
        self._report()

    # --- output -------------------------------------------------------------------

    def _plan_msg(self, out: PlanOutput, stamp: Time) -> VisualPlan:
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

    def _report(self) -> None:
        outs = [o for _, o in self._times]
        stamps = [t for t, _ in self._times]

        def pct(attr: str) -> str:
            v = np.asarray([getattr(o, attr) for o in outs])
            return f"{np.percentile(v, 50):.1f}/{np.percentile(v, 95):.1f}"

        rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else 0.0
        prompt = sum(o.prompt_tokens for o in outs)
        saved = 100.0 * (1.0 - sum(o.prefilled_tokens for o in outs) / max(prompt, 1))
        c = self.counts
        engine_counts: dict[str, Any] = self.engines.counters() if self.engines else {}
        self._diag.report(
            "plans", OK, "planning", plans=c["plans"], plans_per_s=f"{rate:.2f}",
            total_ms_p50_p95=pct("total_ms"), vision_ms_p50_p95=pct("vision_ms"),
            prefill_ms_p50_p95=pct("prefill_ms"), decode_ms_p50_p95=pct("decode_ms"),
            tokens_per_target_forward=f"{np.mean([o.tau for o in outs]):.2f}",
            gate_accepted=c["gate_accepted"], gate_fallback=c["gate_fallback"], blocks_rejected=c["blocks_rejected"],
            skipped_stale=c["stale"], skipped_malformed=c["malformed"], superseded=c["superseded"],
            invalid=c["invalid"], no_primitive=c["no_primitive"], cancelled=c["cancelled"],
            streaming_saved_prefill_pct=f"{saved:.1f}", **engine_counts)

    def _skip(self, what: str, level: int, message: str, status: str = "observation", **values) -> None:
        self.counts[what] += 1
        self._diag.report(status, level, message, now=True, count=self.counts[what], **values)
        self.get_logger().warning(message, throttle_duration_sec=1.0)

    def _now_s(self) -> float:
        return clock_s(self)

    def close(self) -> None:
        """Stop the worker (a plan in progress is cancelled at its next decoding step). Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._cond:
            for job in (self._request, self._pending):
                if job is not None:
                    job.cancel.set()
            self._cond.notify_all()
        self._worker.join(timeout=10.0)
        if self._worker.is_alive():
            self.get_logger().error("planner worker did not stop within 10 s")
        if self.engines is not None:
            self.engines.close()
        self._server.destroy()


main = node_main(PlannerNode)
