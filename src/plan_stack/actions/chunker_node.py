"""`chunker` node: Observation + PlanFeatures -> ActionChunk, with RTC.

Wiring only: parameters -> ChunkerConfig + RtcConfig, the checkpoint ->
`ChunkPolicy`, the execution timeline and RTC state -> `RtcRuntime`.

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
features and the RTC state are dropped (WARN `clock`).
"""
from __future__ import annotations

import copy
import dataclasses
import threading
import time

import numpy as np
import torch
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from plan_stack.actions.errors import ActionsError
from plan_stack.actions.head import load_checkpoint
from plan_stack.actions.policy import ChunkPolicy
from plan_stack.actions.rtc.runtime import Method, RtcConfig, RtcRuntime
from plan_stack.config import ConfigError, param, validate
from plan_stack.device import BACKENDS, DEVICES, DTYPES, EngineError, resolve_placement
from plan_stack.engines.runtime import FlowStepEngine
from plan_stack.joint_states import JointSelectError, JointSelector
from plan_stack.msg import ActionChunk, Observation, PlanFeatures
from plan_stack.paths import find_data
from plan_stack.ros.clock import on_clock_reset
from plan_stack.ros.diagnostics import ERROR, OK, STALE, WARN, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.qos import RELIABLE_QOS, qos_by_name
from plan_stack.ros.time import clock_s, s_to_stamp, stamp_to_s

__all__ = ["ChunkerConfig", "ChunkerNode", "main"]


@dataclasses.dataclass(frozen=True)
class ChunkerConfig:
    checkpoint: str = param("trained action head directory (config.json + model.safetensors): a path, or a "
                            "name under the package's models/ folder such as aloha/action_head/rtc",
                            read_only=True)
    joint_names: tuple[str, ...] = param("joints of each chunk row, in the head's action order", read_only=True)
    # The head's state is in its training units (the stack's, e.g. a Franka gripper width in m) while the
    # Observation carries the robot's joint_states (the two finger joints): read each channel from one
    # measured joint and map it, q_head = (q - state_offset) * state_scale, as the stitcher does.
    state_joint_names: tuple[str, ...] = param(
        "the Observation joint each joint_names channel is read from, one per channel (empty = joint_names)",
        (), read_only=True)
    state_offset: tuple[float, ...] = param(
        "Observation joint units -> head state units: q = (q_measured - state_offset) * state_scale, one value "
        "per channel (empty = identity)", (), read_only=True)
    state_scale: tuple[float, ...] = param("see state_offset (empty = identity)", (), read_only=True)
    max_plan_age_s: float = param("plan features older than this (vs. the observation stamp) are stale (s)",
                                  2.0, min=0.0)
    num_steps: int = param("Euler steps per chunk (0 = the checkpoint's)", 0, min=0)
    fast: bool = param("run the head as a frozen TorchScript trace (backend torch on the CPU; not used by "
                       "test_time_vjp)", True)
    backend: str = param("what runs the flow step: torch (eager or traced), onnx (onnxruntime) or tensorrt",
                         "torch", choices=BACKENDS, read_only=True)
    device: str = param("cpu, cuda, or auto (cuda when torch sees a GPU)", "cpu", choices=DEVICES, read_only=True)
    dtype: str = param("auto (float32 on cpu, bf16/fp16 on cuda) or an explicit dtype", "auto", choices=DTYPES,
                       read_only=True)
    engine_dir: str = param("exported models (`plan-stack export`) for backend onnx/tensorrt; empty: export the "
                            "checkpoint at start-up into a temporary directory", "", read_only=True)
    torch_threads: int = param("torch CPU threads for inference (0 = leave torch's default)", 1, min=0)
    seed: int = param("seed of the sampling noise", 0, min=0)
    noise_scale: float = param("scale of the flow's start noise: 1 samples the head's distribution, 0 gives one "
                               "deterministic chunk per state and plan (near its mode)", 1.0, min=0.0, max=1.0,
                               read_only=True)
    observation_qos: str = param("QoS of `observation` (depth forced to 1: only the latest matters)",
                                 "reliable", choices=["reliable", "sensor", "sensor_data"])
    diagnostics_period_s: float = param("diagnostics republish period (s)", 1.0, min=0.01)

    def __post_init__(self) -> None:
        validate(self)
        if not self.joint_names:
            raise ConfigError("joint_names: at least one joint is needed")
        n = len(self.joint_names)
        for name in ("state_joint_names", "state_offset", "state_scale"):
            if len(getattr(self, name)) not in (0, n):
                raise ConfigError(f"{name}: {len(getattr(self, name))} values for {n} joint_names (give one per "
                                  "joint, or none)")
        if len(self.state_offset) != len(self.state_scale):
            raise ConfigError("state_offset/state_scale: give both with one value per joint, or neither")


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
        self._plan_lock = threading.Lock()
        self._plan: tuple[float, np.ndarray] | None = None  # (plan stamp s, [K, W])
        self._plan_problem = "no plan features received yet"
        self.chunks_published = 0
        self.observations_seen = 0
        self.refusals: dict[str, int] = {}
        self.clock_resets = 0  # bumped by the clock-jump callback; the observation callback acts on it
        self._epoch_seen = 0  # clock_resets value the RTC state belongs to

        obs_qos = copy.copy(qos_by_name(cfg.observation_qos))
        obs_qos.depth = 1
        self._pub = self.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        self.create_subscription(Observation, "observation", self._on_observation, obs_qos,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.create_subscription(PlanFeatures, "plan_features", self._on_plan, RELIABLE_QOS,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._diag = Diagnostics(self, cfg.diagnostics_period_s)
        self._diag.report("plan", STALE, self._plan_problem)
        self._diag.report("chunks", OK, "waiting for the first chunk", method=self.rtc_cfg.method)
        on_clock_reset(self, self._on_clock_reset)

    def close(self) -> None:
        """Remove a start-up export (backend onnx/tensorrt without engine_dir)."""
        if self.engine is not None:
            self.engine.close()

    # --- callbacks ----------------------------------------------------------------

    def _on_clock_reset(self) -> None:
        """ROS time went back (simulator reset or restart): plan features from before it describe another
        world; drop them now. The RTC state (previous chunk, delay estimate) is reset by the observation
        callback, which owns it, and a chunk computed while the reset happened is not published."""
        with self._plan_lock:
            self._plan = None
            self._plan_problem = "clock jumped back: plan features from before the reset dropped"
            self.clock_resets += 1
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the plan features and RTC state")
        self._diag.report("clock", WARN, "clock jumped back: plan features and RTC state dropped",
                          now=True, clock_resets=self.clock_resets)

    def _on_plan(self, msg: PlanFeatures) -> None:
        shape = tuple(msg.shape)
        width = self.policy.cfg.cond_width
        data = np.asarray(msg.data, dtype=np.float32)
        if len(shape) != 2 or shape[0] < 1 or shape[1] != width or data.size != shape[0] * shape[1]:
            self._reject_plan(f"plan features of shape {list(shape)} with {data.size} values; expected "
                              f"[tokens >= 1, {width}]")
            return
        if not np.all(np.isfinite(data)):
            self._reject_plan("plan features contain non-finite values")
            return
        stamp = _to_s(msg.plan_stamp) or _to_s(msg.header.stamp)
        lead = stamp - self._now_s()
        if lead > self.cfg.max_plan_age_s:  # stamped in the future: a wrong clock, or from before a reset
            self._reject_plan(f"plan features stamped {lead:.3f} s ahead of the node clock (max_plan_age_s "
                              f"{self.cfg.max_plan_age_s})")
            return
        with self._plan_lock:
            self._plan = (stamp, data.reshape(shape))
            self._plan_problem = ""
        self._diag.report("plan", OK, "plan features received", plan_stamp=f"{stamp:.6f}",
                          tokens=shape[0])

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
        with self._plan_lock:
            plan, plan_problem = self._plan, self._plan_problem
        if plan is None:
            self._refuse("plan", ERROR, plan_problem or "no plan features")
            return
        age = t_query - plan[0]
        if abs(age) > self.cfg.max_plan_age_s:
            when = f"{age:.3f} s old at" if age > 0 else f"stamped {-age:.3f} s after"
            self._refuse("plan", STALE, f"plan features are {when} the observation "
                         f"(max_plan_age_s {self.cfg.max_plan_age_s})", age_s=f"{age:.3f}")
            return
        try:
            request = self.runtime.request(t_query)
        except ActionsError as exc:  # an observation older than the chunk in force
            self._refuse("chunks", WARN, f"observation skipped: {exc}")
            return
        t0 = time.perf_counter()
        result = self.policy.sample(state, plan[1], request, generator=self._gen)
        inference_s = time.perf_counter() - t0
        if self.clock_resets != epoch:  # computed for the world before a reset: never published
            self.runtime.reset()
            return
        self._publish(msg, request, result)
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

    def _reject_plan(self, reason: str) -> None:
        with self._plan_lock:
            self._plan = None
            self._plan_problem = reason
        self._refuse("plan", ERROR, reason)

    def _refuse(self, status: str, level: int, reason: str, **values) -> None:
        """No chunk this time: say why, and drop the RTC state (the stitcher settles meanwhile)."""
        self.refusals[status] = self.refusals.get(status, 0) + 1
        self.runtime.reset()
        self._diag.report(status, level, f"no chunk: {reason}", now=True, refusals=self.refusals[status], **values)
        self.get_logger().warning(f"no chunk: {reason}", throttle_duration_sec=1.0)

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
