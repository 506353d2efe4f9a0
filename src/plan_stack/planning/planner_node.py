"""`planner` node: Observation -> VisualPlan + PlanFeatures, and the `plan_request` action.

Wiring only: parameters -> PlannerNodeConfig + RuntimeConfig, the model
directory -> `PlannerRuntime` (which checks observations, keeps the
streaming window, decodes and checks plans), what to plan next ->
`PlanScheduler` (the newest observation only, `replan_period_s`, requests
first), the `plans` diagnostic's statistics -> `PlanStats`.

Topics (node-relative): subscribes `observation` (plan_stack/Observation,
reliable, depth 1); publishes `plan` (VisualPlan, header.stamp = the
observation's stamp), `plan_features` (PlanFeatures, `plan_stamp` = the
plan's stamp) and `/diagnostics`; serves `plan_request` (PlanRequest).

Threads: planning runs in one worker thread, so the node keeps spinning
(diagnostics, goals, cancels) during a plan. What the scheduler refuses is
counted and reported: an observation replaced while it waited
(`superseded`), older than `max_observation_age_s` by the node clock (sim
time aware) at arrival or when the worker takes it (`stale`), stamped that
far ahead of it (`future`). A `plan_request` goal asking for kinds the model
does not emit is rejected with a WARN diagnostic `requests`; malformed
observations (cameras, image encoding/size, non-finite joint state) give a
WARN diagnostic naming the field. A plan whose primitives or features are
not finite is never published (`invalid`). When ROS time jumps back (a
simulator reset), the observations held are dropped and a plan in progress
from one is cancelled; a plan finished across the reset is not published
(`across_reset`; WARN `clock`).
A `plan_request` goal plans on the freshest observation with its own
instruction and kinds, streams the sub-task text as feedback, can be
cancelled, and its plan is also published.
"""
from __future__ import annotations

import collections
import copy
import threading
import time
from typing import Any

import torch
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from plan_stack.action import PlanRequest
from plan_stack.config import ConfigError
from plan_stack.device import EngineError, resolve_placement
from plan_stack.engines.runtime import PlannerEngines
from plan_stack.msg import Observation, PlanFeatures, VisualPlan
from plan_stack.paths import find_data
from plan_stack.planning.config import PlannerNodeConfig
from plan_stack.planning.errors import PlanningError
from plan_stack.planning.model_dir import load_planner_model
from plan_stack.planning.msg_convert import features_to_msg, frame_from_msg, plan_to_msg
from plan_stack.planning.plan_stats import PlanStats
from plan_stack.planning.runtime import MalformedObservation, PlannerRuntime, RuntimeConfig
from plan_stack.planning.scheduler import Job, Offered, PlanScheduler
from plan_stack.ros.clock import ClockResets
from plan_stack.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.params import ParameterError, declare_config
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.time import clock_s

__all__ = ["PlannerNodeConfig", "PlannerNode", "main"]


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
        self._stats = PlanStats(cfg.stats_window)
        self.scheduler = PlanScheduler(cfg.replan_period_s, cfg.max_observation_age_s, self._now_s)

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
        self._resets = ClockResets(self, self._on_clock_reset)
        self._worker = threading.Thread(target=self._work, name="planner-worker", daemon=True)
        self._worker.start()

    def _on_clock_reset(self) -> None:
        """ROS time went back (simulator reset or restart): what was observed before is another world."""
        self.scheduler.clock_reset()
        self.get_logger().warning("clock jumped back (simulator reset?): dropped the observations and the plan in "
                                  "progress")
        self._diag.report("clock", WARN, "clock jumped back: observations and the plan in progress dropped",
                          now=True, clock_resets=self._resets.count)

    # --- input --------------------------------------------------------------------

    def _on_observation(self, msg: Observation) -> None:
        self.counts["observations"] += 1
        try:
            frame = frame_from_msg(msg, self.runtime.cameras)
            self.runtime.check(frame)
        except MalformedObservation as exc:
            self._skip("malformed", WARN, f"malformed observation: {exc}", field=exc.field)
            return
        offer = self.scheduler.offer(frame, msg.header.stamp, msg.instruction)
        if offer.outcome in (Offered.STALE, Offered.FUTURE):
            self._skip(offer.outcome.value, WARN, offer.message)
        elif offer.outcome is Offered.SUPERSEDED:
            self.counts["superseded"] += 1

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
        if self.scheduler.busy:
            self.get_logger().warning("plan_request rejected: another request is being planned")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> PlanRequest.Result:
        goal = goal_handle.request
        job = self.scheduler.request(goal.instruction, tuple(goal.primitive_kinds))
        if isinstance(job, str):
            goal_handle.abort()
            return PlanRequest.Result(error_string=f"no plan: {job}")
        self.counts["requests"] += 1
        deadline = time.monotonic() + self.cfg.request_timeout_s
        job.wait(lambda: goal_handle.is_cancel_requested or self.scheduler.stopping or time.monotonic() > deadline,
                 lambda text: goal_handle.publish_feedback(PlanRequest.Feedback(partial_subtask=text)))
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
        return PlanRequest.Result(plan=plan_to_msg(out, job.stamp))

    # --- worker -------------------------------------------------------------------

    def _work(self) -> None:
        while (job := self.scheduler.next_job()) is not None:
            try:
                self._run(job)
            except Exception as exc:  # a failing plan must not stop the planner
                job.error = f"{type(exc).__name__}: {exc}"
                self.counts["errors"] += 1
                self._diag.report("plans", ERROR, f"planning failed: {job.error}", now=True)
                self.get_logger().error(f"planning failed: {job.error}", throttle_duration_sec=1.0)
            finally:
                self.scheduler.finish(job)

    def _run(self, job: Job) -> None:
        stale = self.scheduler.begin(job)
        if stale:
            self._skip("stale", WARN, stale)
            return
        resets = self._resets.count
        out = self.runtime.plan(job.frame, job.instruction, job.kinds, on_text=job.add_text if job.request else None,
                                should_stop=lambda: job.cancel.is_set() or self.scheduler.stopping)
        job.output = out
        if out.stop_reason == "cancelled":
            self.counts["cancelled"] += 1
            return
        if not out.valid:
            self._skip("invalid", ERROR, f"plan not published: {out.reason}", status="plans")
            return
        if self.scheduler.stopping:
            return
        if self._resets.count != resets and not job.request:  # planned for the world before a clock reset
            self.counts["across_reset"] += 1
            return
        self._plan_pub.publish(plan_to_msg(out, job.stamp))
        if out.features.shape[0]:
            self._feat_pub.publish(features_to_msg(out, job.stamp, self.get_clock().now().to_msg()))
        else:
            self.counts["no_primitive"] += 1
        self.counts["plans"] += 1
        if self._diag.level("clock") == WARN:  # recovered from a clock reset
            self._diag.report("clock", OK, "planning after the clock reset", clock_resets=self._resets.count)
        if self._diag.level("observation") not in (None, OK):
            self._diag.report("observation", OK, "planning from observations")
        self.counts["gate_accepted"] += out.gate_accepted
        self.counts["gate_fallback"] += out.gate_fallback
        self.counts["blocks_rejected"] += out.blocks_rejected
        self._stats.add(time.monotonic(), out)
        self._report()

    # --- output -------------------------------------------------------------------

    def _report(self) -> None:
        engine_counts: dict[str, Any] = self.engines.counters() if self.engines else {}
        self._diag.report("plans", OK, "planning", **self._stats.values(self.counts), **engine_counts)

    def _skip(self, what: str, level: int, message: str, status: str = "observation", **values) -> None:
        self.counts[what] += 1
        self._diag.report(status, level, message, now=True, count=self.counts[what], **values)
        self.get_logger().warning(message, throttle_duration_sec=1.0)

    def _now_s(self) -> float:
        return clock_s(self)

    def close(self) -> None:
        """Stop the worker (a plan in progress is cancelled at its next decoding step). Idempotent."""
        if self.scheduler.stopping:
            return
        self.scheduler.close()
        self._worker.join(timeout=10.0)
        if self._worker.is_alive():
            self.get_logger().error("planner worker did not stop within 10 s")
        if self.engines is not None:
            self.engines.close()
        self._server.destroy()


main = node_main(PlannerNode)
