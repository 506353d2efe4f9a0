"""`chunker` over real DDS on sim time: chunk cadence, RTC prefix, refusals with diagnostics."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import Log
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from plan_stack.actions.chunker_node import ChunkerNode
from plan_stack.actions.head import FlowHead, HeadConfig, save_checkpoint
from plan_stack.msg import ActionChunk, Observation, PlanFeatures
from plan_stack.ros.params import ParameterError
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS
from plan_stack.ros.testing import executor_with, ros_context, spin_until

pytestmark = pytest.mark.ros

JOINTS = ["j0", "j1", "j2"]
H, DT, S = 10, 0.02, 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """An untrained tiny head: the node's wiring, timeline and RTC do not depend on training."""
    torch.manual_seed(0)
    head = FlowHead(HeadConfig(action_dim=3, state_dim=3, horizon=H, cond_width=4, width=16, layers=1, heads=2,
                               num_steps=3, dt_s=DT))
    path = str(tmp_path_factory.mktemp("chunker_ckpt"))
    save_checkpoint(path, head, {"rtc_max_delay": 0})
    return path


def _time(t_s: float) -> Time:
    ns = int(round(t_s * 1e9))
    return Time(sec=ns // 10**9, nanosec=ns % 10**9)


class _Rig:
    """Test peer: drives /clock, publishes observations and plan features, records the outputs."""

    def __init__(self, ctx):
        self.node = Node("chunker_test_peer", context=ctx)
        self.clock = self.node.create_publisher(Clock, "/clock", LATCHED_QOS)
        self.obs = self.node.create_publisher(Observation, "observation", RELIABLE_QOS)
        self.plan = self.node.create_publisher(PlanFeatures, "plan_features", RELIABLE_QOS)
        self.chunks: list[ActionChunk] = []
        self.diag: list = []
        self.node.create_subscription(ActionChunk, "action_chunk", self.chunks.append, RELIABLE_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diag.extend(m.status), 10)

    def observation(self, t_s: float, q) -> Observation:
        msg = Observation(joint_state=JointState(name=list(reversed(JOINTS)), position=list(reversed(q))))
        msg.header.stamp = _time(t_s)
        return msg

    def features(self, t_s: float, shape=(2, 4)) -> PlanFeatures:
        return PlanFeatures(shape=list(shape), data=[0.1 * i for i in range(int(np.prod(shape)))],
                            plan_stamp=_time(t_s))


def _diag_seen(rig, name, text):
    return any(s.name == f"chunker: {name}" and text in s.message for s in rig.diag)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_chunker_cadence_rtc_prefix_and_refusals(checkpoint, backend):
    params = [Parameter("use_sim_time", value=True), Parameter("checkpoint", value=checkpoint),
              Parameter("backend", value=backend),
              Parameter("joint_names", value=JOINTS), Parameter("method", value="hard_prefix"),
              Parameter("execution_horizon_steps", value=S), Parameter("initial_delay_steps", value=2.0),
              Parameter("max_plan_age_s", value=0.5), Parameter("diagnostics_period_s", value=0.2)]
    with ros_context() as ctx:
        rig = _Rig(ctx)
        chunker = ChunkerNode(context=ctx, parameter_overrides=params)
        with executor_with(ctx, chunker, rig.node) as ex:
            assert spin_until(ex, lambda: rig.obs.get_subscription_count() and rig.plan.get_subscription_count()
                              and rig.node.count_subscribers("/clock") >= 1, 10.0)

            def step(t_s, q=(0.1, 0.2, 0.3)):
                rig.clock.publish(Clock(clock=_time(t_s)))
                assert spin_until(ex, lambda: abs(chunker.get_clock().now().nanoseconds * 1e-9 - t_s) < 1e-6, 15.0)
                seen = chunker.observations_seen
                rig.obs.publish(rig.observation(t_s, q))
                assert spin_until(ex, lambda: chunker.observations_seen > seen, 15.0)
                ex.spin_once(timeout_sec=0.01)

            # 1. no plan yet: no chunk, a diagnostic says why
            step(10.0)
            assert spin_until(ex, lambda: _diag_seen(rig, "plan", "no chunk: no plan features"), 15.0)
            assert chunker.chunks_published == 0

            # 2. features arrive; a chunk every S control steps, stamped with the observation time
            rig.plan.publish(rig.features(10.0))
            assert spin_until(ex, lambda: chunker.plans.plan is not None, 15.0)
            for k in range(9):
                step(10.0 + k * DT)
            assert spin_until(ex, lambda: len(rig.chunks) == 3, 15.0)
            stamps = [c.header.stamp.sec + c.header.stamp.nanosec * 1e-9 for c in rig.chunks]
            np.testing.assert_allclose(np.diff(stamps), S * DT, atol=1e-6)
            first, second = (np.asarray(c.positions).reshape(H, 3) for c in rig.chunks[:2])
            assert rig.chunks[0].prefix_len == 0 and rig.chunks[1].prefix_len == 2
            assert list(rig.chunks[1].joint_names) == JOINTS and rig.chunks[1].horizon == H
            assert rig.chunks[1].dt == pytest.approx(DT) and rig.chunks[1].inference_ms > 0
            # the locked prefix is the previous chunk continued from the new query time
            np.testing.assert_allclose(second[:2], first[S:S + 2], atol=1e-9)
            assert np.all(np.isfinite(second)) and not np.allclose(second[2:], 0.0)

            # 3. NaN state: no chunk, ERROR diagnostic
            n = len(rig.chunks)
            step(10.0 + 12 * DT, q=(0.1, float("nan"), 0.3))
            bad = "joint state: non-finite position for ['j1']"
            assert spin_until(ex, lambda: _diag_seen(rig, "observation", bad), 15.0)
            # 4. plan features too old for the observation: no chunk, STALE diagnostic
            step(10.8)
            assert spin_until(ex, lambda: _diag_seen(rig, "plan", "old at the observation"), 15.0)
            # 5. wrong feature width: rejected, and no chunk from the old plan either
            rig.plan.publish(rig.features(10.8, shape=(2, 5)))
            assert spin_until(ex, lambda: _diag_seen(rig, "plan", "expected [tokens >= 1, 4]"), 15.0)
            step(10.82)
            ex.spin_once(timeout_sec=0.1)
            assert len(rig.chunks) == n and chunker.chunks_published == n

            # 6. a fresh plan: chunks resume, starting without a prefix (RTC state was reset)
            rig.plan.publish(rig.features(10.84))
            assert spin_until(ex, lambda: chunker.plans.plan is not None, 15.0)
            step(10.84)
            assert spin_until(ex, lambda: len(rig.chunks) == n + 1, 15.0)
            assert rig.chunks[-1].prefix_len == 0


def test_clock_jumping_back_drops_plan_and_rtc_state(checkpoint):
    """Simulator reset: /clock goes from 20 s back to 1 s. The plan features from before are dropped (no chunk
    from them), a plan stamped before the reset is refused, and fresh features start a chunk without prefix."""
    params = [Parameter("use_sim_time", value=True), Parameter("checkpoint", value=checkpoint),
              Parameter("joint_names", value=JOINTS), Parameter("method", value="hard_prefix"),
              Parameter("execution_horizon_steps", value=S), Parameter("initial_delay_steps", value=2.0),
              Parameter("max_plan_age_s", value=0.5)]
    with ros_context() as ctx:
        rig = _Rig(ctx)
        chunker = ChunkerNode(context=ctx, parameter_overrides=params)
        with executor_with(ctx, chunker, rig.node) as ex:
            assert spin_until(ex, lambda: rig.obs.get_subscription_count() and rig.plan.get_subscription_count()
                              and rig.node.count_subscribers("/clock") >= 1, 10.0)

            def clock(t_s):
                rig.clock.publish(Clock(clock=_time(t_s)))
                assert spin_until(ex, lambda: abs(chunker.get_clock().now().nanoseconds * 1e-9 - t_s) < 1e-6, 15.0)

            def observe(t_s):
                seen = chunker.observations_seen
                rig.obs.publish(rig.observation(t_s, (0.1, 0.2, 0.3)))
                assert spin_until(ex, lambda: chunker.observations_seen > seen, 15.0)

            clock(20.0)
            rig.plan.publish(rig.features(20.0))
            assert spin_until(ex, lambda: chunker.plans.plan is not None, 15.0)
            for k in range(S + 1):
                clock(20.0 + k * DT)
                observe(20.0 + k * DT)
            assert spin_until(ex, lambda: len(rig.chunks) == 2, 15.0)
            assert rig.chunks[1].prefix_len == 2

            clock(1.0)  # the simulator was reset
            assert spin_until(ex, lambda: _diag_seen(rig, "clock", "clock jumped back"), 15.0)
            assert chunker.clock_resets == 1 and chunker.plans.plan is None
            observe(1.0)  # no plan features from before the reset are used
            assert spin_until(ex, lambda: _diag_seen(rig, "plan", "from before the reset dropped"), 15.0)
            rig.plan.publish(rig.features(20.1))  # in flight from before the reset: stamped in the future
            assert spin_until(ex, lambda: _diag_seen(rig, "plan", "from before the clock reset"), 15.0)
            ignored = [s for s in rig.diag if s.name == "chunker: plan" and "from before the clock reset" in s.message]
            assert ignored[0].level == DiagnosticStatus.WARN  # a reset's leftovers, no fault
            rig.plan.publish(rig.features(25.0))  # later than the old time ever was: a wrong clock
            assert spin_until(ex, lambda: _diag_seen(rig, "plan", "ahead of the node clock"), 15.0)
            assert len(rig.chunks) == 2

            rig.plan.publish(rig.features(1.0))
            assert spin_until(ex, lambda: chunker.plans.plan is not None, 15.0)
            clock(1.02)
            observe(1.02)
            assert spin_until(ex, lambda: len(rig.chunks) == 3, 15.0)
            last = rig.chunks[-1]
            assert last.prefix_len == 0  # the RTC state was dropped: nothing locked from the old chunk
            assert last.header.stamp.sec == 1


def test_waiting_for_plan_features_is_said_once_per_wait_and_is_no_error(checkpoint):
    """The planner still loading (tens of seconds at start-up) or planning its first plan after a simulator
    reset: the chunker has observations but no plan features. That is a wait, not a fault: the `plan` status is
    STALE, never ERROR, and the console says it once per wait (not once a second), and once when chunks flow."""
    params = [Parameter("use_sim_time", value=True), Parameter("checkpoint", value=checkpoint),
              Parameter("joint_names", value=JOINTS), Parameter("method", value="hard_prefix"),
              Parameter("execution_horizon_steps", value=S), Parameter("max_plan_age_s", value=0.5)]
    with ros_context() as ctx:
        rig = _Rig(ctx)
        logs: list[str] = []
        rig.node.create_subscription(Log, "/rosout", lambda m: logs.append(m.msg) if m.name == "chunker" else None,
                                     100)
        chunker = ChunkerNode(context=ctx, parameter_overrides=params)
        with executor_with(ctx, chunker, rig.node) as ex:
            assert spin_until(ex, lambda: rig.obs.get_subscription_count() and rig.plan.get_subscription_count()
                              and rig.node.count_subscribers("/clock") >= 1, 10.0)
            said = lambda: [m for m in logs if "no chunk" in m]  # noqa: E731
            plan_levels = lambda: {s.level for s in rig.diag if s.name == "chunker: plan"}  # noqa: E731

            def observe_for(t0, wall_s):  # observations at 20 Hz of sim time, 2.5 s of wall time
                t, end = t0, time.monotonic() + wall_s
                while time.monotonic() < end:
                    rig.clock.publish(Clock(clock=_time(t)))
                    rig.obs.publish(rig.observation(t, (0.1, 0.2, 0.3)))
                    spin_until(ex, lambda: False, 0.05)
                    t += 0.05
                return t

            t = observe_for(10.0, 2.5)
            assert chunker.observations_seen >= 20 and not rig.chunks
            assert len(said()) == 1, said()  # once, not once a second
            assert "until the planner sends plan features" in said()[0]
            assert plan_levels() == {DiagnosticStatus.STALE}, plan_levels()
            rig.plan.publish(rig.features(t))
            assert spin_until(ex, lambda: chunker.plans.plan is not None, 15.0)
            rig.clock.publish(Clock(clock=_time(t)))
            rig.obs.publish(rig.observation(t, (0.1, 0.2, 0.3)))
            assert spin_until(ex, lambda: rig.chunks, 15.0)
            assert spin_until(ex, lambda: any("chunks published" in m for m in logs), 10.0), logs
            # the simulator resets: a new wait, said once more, still no fault
            observe_for(1.0, 2.5)
            assert len(said()) == 2, said()
            assert "after the reset" in said()[1] or "reset" in said()[1]
            assert DiagnosticStatus.ERROR not in plan_levels(), plan_levels()


def test_chunker_rejects_a_checkpoint_that_does_not_fit(checkpoint, tmp_path):
    with ros_context() as ctx:
        with pytest.raises(ParameterError, match="joint_names: 2 joints"):
            ChunkerNode(context=ctx, parameter_overrides=[
                Parameter("checkpoint", value=checkpoint), Parameter("joint_names", value=["a", "b"])])
        with pytest.raises(ParameterError, match="training_time needs a head trained"):
            ChunkerNode(context=ctx, parameter_overrides=[
                Parameter("checkpoint", value=checkpoint), Parameter("joint_names", value=JOINTS),
                Parameter("method", value="training_time")])
        with pytest.raises(ParameterError, match="checkpoint"):
            ChunkerNode(context=ctx, parameter_overrides=[
                Parameter("checkpoint", value=str(tmp_path)), Parameter("joint_names", value=JOINTS)])
        if not torch.cuda.is_available():
            for name, value, match in (("device", "cuda", "sees no GPU"), ("backend", "tensorrt", "tensorrt")):
                with pytest.raises(ParameterError, match=match):
                    ChunkerNode(context=ctx, parameter_overrides=[
                        Parameter("checkpoint", value=checkpoint), Parameter("joint_names", value=JOINTS),
                        Parameter("method", value="hard_prefix"), Parameter("execution_horizon_steps", value=S),
                        Parameter(name, value=value)])
        with pytest.raises(ParameterError, match="run `plan-stack export` first"):
            ChunkerNode(context=ctx, parameter_overrides=[
                Parameter("checkpoint", value=checkpoint), Parameter("joint_names", value=JOINTS),
                Parameter("method", value="hard_prefix"), Parameter("execution_horizon_steps", value=S),
                Parameter("backend", value="onnx"),
                Parameter("engine_dir", value=str(tmp_path))])
