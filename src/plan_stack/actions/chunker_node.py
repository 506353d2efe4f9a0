"""`chunker` node: Observation + PlanFeatures -> ActionChunk, with RTC.

Wiring only: parameters -> ChunkerConfig + RtcConfig, the checkpoint ->
`ChunkPolicy`, the execution timeline and RTC state -> `RtcRuntime`, the
newest usable plan features -> `PlanSlot`.

Topics (node-relative): subscribes `observation` (plan_stack/Observation,
latest only) and `plan_features` (plan_stack/PlanFeatures); publishes
`action_chunk` (plan_stack/ActionChunk) and `/diagnostics`.

Timeline: observation stamps are the execution timeline (sim time when the
graph runs on /clock). A chunk is computed for the first observation at or
after the previous chunk's stamp + s*dt (half a step early is accepted); its
stamp is that observation's stamp (sample 0 = the state it saw). The delay
estimate counts both the inference wall time and the control steps that
actually elapsed on the node clock until the chunk was published.

Refusals (no chunk, a diagnostic with the reason, RTC state reset so the
next chunk starts fresh): no plan features yet, features older than
`max_plan_age_s` relative to the observation (or stamped that far after it
or after the node clock), features of the wrong shape or non-finite, an
observation missing configured joints or with non-finite positions. A chunk
is never republished and never filled with zeros; the stitcher settles on the
last one it has. When ROS time jumps back (simulator reset), the plan
features and the RTC state are dropped (WARN `clock`); plan features stamped
in the time before the reset and delivered after it are ignored (WARN).

Waiting for plan features (the planner still loading at start-up, or
planning the first plan after a reset) is no fault: the `plan` status is
STALE and the console says it once when the wait begins and once when chunks
flow again. A refusal is said at once, its repeats counted every 10 s
(`ros.repeats.RepeatFilter`).
"""
from __future__ import annotations

import copy
import time

import numpy as np
import torch
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from plan_stack.actions.config import ChunkerConfig
from plan_stack.actions.errors import ActionsError
from plan_stack.actions.head import load_checkpoint
from plan_stack.actions.plan_slot import NoPlan, PlanSlot
from plan_stack.actions.policy import ChunkPolicy
from plan_stack.actions.rtc.runtime import Method, RtcConfig, RtcRuntime
from plan_stack.config import ConfigError
from plan_stack.device import EngineError, resolve_placement
from plan_stack.engines.runtime import FlowStepEngine
from plan_stack.joint_states import JointSelectError, JointSelector
from plan_stack.msg import ActionChunk, Observation, PlanFeatures
from plan_stack.paths import find_data
from plan_stack.ros.clock import ClockResets
from plan_stack.ros.diagnostics import ERROR, OK, STALE, WARN, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.qos import RELIABLE_QOS, qos_by_name
from plan_stack.ros.repeats import RepeatFilter
from plan_stack.ros.time import clock_s, s_to_stamp, stamp_to_s

__all__ = ["ChunkerConfig", "ChunkerNode", "main"]


_to_s = stamp_to_s
_to_time = s_to_stamp


class ChunkerNode(Node):
    """Samples a new action chunk every s control steps while the previous one executes."""

    #: inference on an observation must not hold back the next plan features
    executor_threads = 2

    def __init__(self, **kwargs) -> None:
        super().__init__("chunker", **kwargs)
        self.cfg = cfg = declare_config(self, ChunkerConfig)
        self.rtc_cfg = declare_config(self, RtcConfig)
        self._joints = JointSelector(cfg.state_joint_names or cfg.joint_names)
        try:
            # A relative name is looked up in the package's models/ folder (source tree or install).
            checkpoint = str(find_data("models", cfg.checkpoint))
            head, meta = load_checkpoint(checkpoint, **({"num_steps": cfg.num_steps} if cfg.num_steps else {}))
        except (ActionsError, FileNotFoundError) as exc:
            raise ParameterError(f"checkpoint: {exc} (node '{self.get_fully_qualified_name()}')") from None
        hc = head.cfg
        self.trained_delay = int(meta.get("rtc_max_delay", 0))
        problem = None
        if not (len(cfg.joint_names) == hc.action_dim == hc.state_dim):
            problem = (f"joint_names: {len(cfg.joint_names)} joints, but the head has action_dim {hc.action_dim} "
                       f"and state_dim {hc.state_dim}")
        elif self.rtc_cfg.method_enum is Method.TRAINING_TIME and self.trained_delay < 1:
            problem = "method: training_time needs a head trained with rtc_max_delay > 0 (use hard_prefix)"
        if problem is None:
            try:
                self.runtime = RtcRuntime(self.rtc_cfg, hc.horizon, hc.dt_s, self.trained_delay or None)
            except ConfigError as exc:
                problem = str(exc)
        if problem:
            raise ParameterError(f"{problem} (node '{self.get_fully_qualified_name()}')")
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        self.engine = None
        try:
            placement = resolve_placement(cfg.device, cfg.dtype)
            if cfg.backend != "torch":
                self.engine = FlowStepEngine(head, checkpoint, cfg.backend, placement, cfg.engine_dir,
                                             max(cfg.torch_threads, 1))
            self.policy = ChunkPolicy(head, self.rtc_cfg.method, self.rtc_cfg.schedule,
                                      self.rtc_cfg.max_guidance_weight, fast=cfg.fast, engine=self.engine,
                                      device=placement.device, dtype=placement.dtype, noise_scale=cfg.noise_scale)
        except (EngineError, ActionsError) as exc:
            raise ParameterError(f"backend: {exc} (node '{self.get_fully_qualified_name()}')") from None
        self.policy.warm_up()  # trace and first-run allocation now, not in the first query
        self._gen = torch.Generator().manual_seed(cfg.seed)
        self.plans = PlanSlot(self.policy.cfg.cond_width, cfg.max_plan_age_s)
        self.chunks_published = 0
        self.observations_seen = 0
        self.refusals: dict[str, int] = {}
        self.clock_resets = 0  # bumped by the clock-jump callback; the observation callback acts on it
        self._epoch_seen = 0  # clock_resets value the RTC state belongs to
        self._refusal_log = RepeatFilter()  # a refusal repeats with every observation while its cause lasts
        self._waiting_said = False  # "waiting for plan features" logged since chunks last flowed

        obs_qos = copy.copy(qos_by_name(cfg.observation_qos))
        obs_qos.depth = 1
        self._pub = self.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        self.create_subscription(Observation, "observation", self._on_observation, obs_qos,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.create_subscription(PlanFeatures, "plan_features", self._on_plan, RELIABLE_QOS,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._diag = Diagnostics(self, cfg.diagnostics_period_s)
        self._diag.report("plan", STALE, self.plans.problem)
        self._diag.report("chunks", OK, "waiting for the first chunk", method=self.rtc_cfg.method)
        self._resets = ClockResets(self, self._on_clock_reset)

    def close(self) -> None:
        """Remove a start-up export (backend onnx/tensorrt without engine_dir)."""
        if self.engine is not None:
            self.engine.close()

    # --- callbacks ----------------------------------------------------------------

    def _on_clock_reset(self) -> None:
        """ROS time went back (simulator reset or restart): plan features from before it describe another
        world; drop them now. The RTC state (previous chunk, delay estimate) is reset by the observation
        callback, which owns it, and a chunk computed while the reset happened is not published."""
        self.plans.drop("clock jumped back: plan features from before the reset dropped; waiting for new ones",
                        waiting=True)
        self.clock_resets += 1
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the plan features and RTC state")
        self._diag.report("clock", WARN, "clock jumped back: plan features and RTC state dropped",
                          now=True, clock_resets=self.clock_resets)

    def _on_plan(self, msg: PlanFeatures) -> None:
        stamp = _to_s(msg.plan_stamp) or _to_s(msg.header.stamp)
        now = self._now_s()
        if self._resets.from_before(stamp, now, self.plans.max_plan_age_s):  # planned before the reset
            self.refusals["from_before_reset"] = self.refusals.get("from_before_reset", 0) + 1
            self._diag.report("plan", WARN, f"ignored plan features stamped {stamp:.3f} s: from before the clock "
                              "reset", now=True, refusals=self.refusals["from_before_reset"])
            return
        refused = self.plans.offer(msg.shape, msg.data, stamp, now)
        if refused:
            self._refuse("plan", ERROR, refused)
            return
        self._diag.report("plan", OK, "plan features received", plan_stamp=f"{stamp:.6f}",
                          tokens=msg.shape[0])

    def _on_observation(self, msg: Observation) -> None:
        self.observations_seen += 1
        epoch = self.clock_resets
        if epoch != self._epoch_seen:  # the clock went back since the last observation
            self._epoch_seen = epoch
            self.runtime.reset()
        t_query = _to_s(msg.header.stamp)
        due = self.runtime.next_query_s()
        if due is not None and t_query < due - 0.5 * self.runtime.dt_s:
            return  # the current chunk still covers this time
        state = self._state(msg)
        if state is None:
            return
        features = self.plans.take(t_query)
        if isinstance(features, NoPlan):
            if features.waiting:
                self._wait_for_plans(features.reason)
            elif features.age_s is None:
                self._refuse("plan", ERROR, features.reason)
            else:
                self._refuse("plan", STALE, features.reason, key="plan features too old or too new",
                             age_s=f"{features.age_s:.3f}")
            return
        try:
            request = self.runtime.request(t_query)
        except ActionsError as exc:  # an observation older than the chunk in force
            self._refuse("chunks", WARN, f"observation skipped: {exc}")
            return
        t0 = time.perf_counter()
        result = self.policy.sample(state, features, request, generator=self._gen)
        inference_s = time.perf_counter() - t0
        if self.clock_resets != epoch:  # computed for the world before a reset: never published
            self.runtime.reset()
            return
        self._publish(msg, request, result)
        if self._waiting_said:
            self._waiting_said = False
            self.get_logger().info("plan features received: chunks published")
        if self._diag.level("clock") == WARN:  # recovered from a clock reset
            self._diag.report("clock", OK, "chunks published after the clock reset", clock_resets=self.clock_resets)
        consumed = max(self._now_s() - t_query, 0.0) / self.runtime.dt_s
        self.runtime.commit(request, result.positions, inference_s, consumed)
        level = WARN if request.clamped else OK
        text = (f"delay estimate {request.delay_steps:.2f} steps exceeds the supported range; prefix clamped to "
                f"{request.prefix_len}" if request.clamped else "chunk published")
        self._diag.report("chunks", level, text, now=request.clamped, published=self.chunks_published,
                          inference_ms=f"{result.inference_ms:.2f}", delay_steps=f"{request.delay_steps:.2f}",
                          prefix_len=result.prefix_len, execution_steps=request.execution_steps,
                          consumed_steps=f"{consumed:.2f}", method=self.rtc_cfg.method)

    # --- helpers ------------------------------------------------------------------

    def _state(self, msg: Observation) -> np.ndarray | None:
        js = msg.joint_state
        try:
            q = self._joints.select(js.name, js.position).position
        except JointSelectError as exc:
            self._refuse("observation", ERROR, f"joint state: {exc}", problem=exc.reason.value)
            return None
        if self.cfg.state_scale:  # joint_states units -> the head's (e.g. one finger joint -> gripper width)
            q = (q - np.asarray(self.cfg.state_offset)) * np.asarray(self.cfg.state_scale)
        return q

    def _refuse(self, status: str, level: int, reason: str, key: str | None = None, **values) -> None:
        """No chunk this time: say why, and drop the RTC state (the stitcher settles meanwhile). The console
        says a reason at once and its repeats (same `key`, default the reason) every 10 s with their count."""
        self.refusals[status] = self.refusals.get(status, 0) + 1
        self.runtime.reset()
        self._waiting_said = False  # a wait after this is news again
        self._diag.report(status, level, f"no chunk: {reason}", now=True, refusals=self.refusals[status], **values)
        text = self._refusal_log(f"no chunk: {reason}", None if key is None else f"{status}: {key}")
        if text is not None:
            self.get_logger().warning(text)

    def _wait_for_plans(self, reason: str) -> None:
        """No plan features yet (start-up, a clock reset): no fault, no chunk. Said once per wait; the status is
        STALE (reported at once when the wait begins, then by the periodic publication)."""
        self.runtime.reset()
        if self._waiting_said:
            return
        self._waiting_said = True
        self._refusal_log.reset()
        self._diag.report("plan", STALE, f"no chunk: {reason}", now=True)
        self.get_logger().info(f"no chunk until the planner sends plan features: {reason}")

    def _publish(self, obs: Observation, request, result) -> None:
        hc = self.policy.cfg
        msg = ActionChunk(joint_names=list(self.cfg.joint_names), dt=hc.dt_s, horizon=hc.horizon,
                          positions=result.positions.reshape(-1).tolist(), prefix_len=result.prefix_len,
                          inference_ms=float(result.inference_ms), delay_steps=float(request.delay_steps))
        msg.header.stamp = obs.header.stamp
        self._pub.publish(msg)
        self.chunks_published += 1

    def _now_s(self) -> float:
        return clock_s(self)


main = node_main(ChunkerNode)
