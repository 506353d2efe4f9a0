"""`planner` over real DDS: plans and features with matching stamps, skips, plan_request, shutdown."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from plan_stack.action import PlanRequest
from plan_stack.msg import Observation, PlanFeatures, VisualPlan
from plan_stack.planning.planner_node import PlannerNode
from plan_stack.planning.tiny_models import BLOCK, CAMERAS, PREFIX, images, make_model_dir
from plan_stack.ros.action_client import ActionCall, GoalRejected
from plan_stack.ros.image import numpy_to_image
from plan_stack.ros.params import ParameterError
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.testing import executor_with, ros_context

pytestmark = pytest.mark.ros
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(make_model_dir(tmp_path_factory.mktemp("planner_node") / "m", budget=40))


def wait_for(predicate, timeout_s=TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class _Rig:
    """Test peer: publishes observations, records plans, features, diagnostics; calls plan_request."""

    def __init__(self, ctx):
        self.node = Node("planner_test_peer", context=ctx)
        self.obs = self.node.create_publisher(Observation, "observation", RELIABLE_QOS)
        self.plans: list[VisualPlan] = []
        self.features: list[PlanFeatures] = []
        self.diag: list = []
        self.node.create_subscription(VisualPlan, "plan", self.plans.append, RELIABLE_QOS)
        self.node.create_subscription(PlanFeatures, "plan_features", self.features.append, RELIABLE_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diag.extend(m.status), 50)
        self.request = ActionCall(self.node, PlanRequest, "plan_request")

    def observation(self, age_s=0.0, seed=0, encoding="rgb8", q=(0.1, 0.2)) -> Observation:
        ims = [numpy_to_image(im, "rgb8") for im in images(seed)]
        if encoding != "rgb8":
            ims[0].encoding = encoding
        msg = Observation(camera_names=CAMERAS, images=ims, instruction="",
                          joint_state=JointState(name=["j0", "j1"], position=list(q)))
        msg.header.stamp = (self.node.get_clock().now() - _dur(age_s)).to_msg()
        return msg

    def diag_seen(self, text: str) -> bool:
        return any(s.name.startswith("planner: ") and text in s.message for s in list(self.diag))


def publish_one(rig, node, msg):
    seen = node.counts["observations"]
    rig.obs.publish(msg)
    assert wait_for(lambda: node.counts["observations"] == seen + 1)


def _dur(s):
    from rclpy.duration import Duration

    return Duration(nanoseconds=int(s * 1e9))


class _Gate:
    """Holds the node's planning calls until opened (to make 'busy' deterministic); the runtime stays real."""

    def __init__(self, node):
        self.open, self.entered, self._plan = threading.Event(), threading.Semaphore(0), node.runtime.plan
        node.runtime.plan = self

    def __call__(self, *args, **kwargs):
        self.entered.release()
        assert self.open.wait(TIMEOUT_S)
        return self._plan(*args, **kwargs)


def _spin(ex):
    t = threading.Thread(target=ex.spin, daemon=True)
    t.start()
    return t


def _params(model_dir, **extra):
    values = {"model_dir": model_dir, "diagnostics_period_s": 0.2, "max_observation_age_s": 10.0, **extra}
    return [Parameter(k, value=v) for k, v in values.items()]


def _stamp(t):
    return (t.sec, t.nanosec)


def test_plans_features_stale_malformed_and_superseded(model_dir):
    with ros_context() as ctx:
        rig = _Rig(ctx)
        node = PlannerNode(context=ctx, parameter_overrides=_params(model_dir, response_prefix=PREFIX))
        with executor_with(ctx, node, rig.node) as ex:
            _spin(ex)
            assert wait_for(lambda: rig.obs.get_subscription_count() and rig.node.count_publishers("plan_features"))
            # 1. observation in -> plan + features out, stamps matching
            obs = rig.observation()
            rig.obs.publish(obs)
            assert wait_for(lambda: rig.plans and rig.features)
            plan, feat = rig.plans[0], rig.features[0]
            assert _stamp(plan.header.stamp) == _stamp(obs.header.stamp) == _stamp(feat.plan_stamp)
            assert plan.decoder == "vflash" and [p.kind for p in plan.primitives] == ["robot_3d"]
            assert plan.primitives[0].accepted_direct and plan.target_forwards >= 1 and plan.total_ms > 0
            assert list(feat.shape) == [BLOCK, 64] and len(feat.data) == BLOCK * 64
            assert np.all(np.isfinite(feat.data)) and np.all(np.isfinite([(p.x, p.y, p.z) for p in
                                                                          plan.primitives[0].points]))
            # 2. stale and malformed: no plan, counted, WARN naming the field
            for msg in (rig.observation(age_s=60.0), rig.observation(encoding="bgr8"),
                        rig.observation(q=(0.1, float("nan")))):
                publish_one(rig, node, msg)  # depth 1: a burst would keep only the newest
            assert wait_for(lambda: node.counts["stale"] == 1 and node.counts["malformed"] == 2)
            assert wait_for(lambda: rig.diag_seen("stale observation")
                            and rig.diag_seen("images[0] (cam_a): encoding 'bgr8'")
                            and rig.diag_seen("joint_state.position[1]: j1 is not finite"))
            # 3. busy worker: newer observations replace the waiting one (superseded), no queue
            gate = _Gate(node)
            first = rig.observation(seed=1)
            rig.obs.publish(first)
            assert gate.entered.acquire(timeout=TIMEOUT_S)
            burst = [rig.observation(seed=2 + i) for i in range(3)]
            for m in burst:
                publish_one(rig, node, m)
            assert node.counts["superseded"] == 2
            gate.open.set()
            assert wait_for(lambda: len(rig.plans) == 3)
            assert [_stamp(p.header.stamp) for p in rig.plans[1:]] == [_stamp(first.header.stamp),
                                                                       _stamp(burst[-1].header.stamp)]
            assert wait_for(lambda: rig.diag_seen("planning") and any(
                kv.key == "superseded" and kv.value == "2" for s in list(rig.diag) for kv in s.values))
            assert wait_for(lambda: len(rig.features) == 3) and node.counts["invalid"] == 0


def test_plan_request_feedback_result_cancel_and_rejections(model_dir):
    with ros_context() as ctx:
        rig = _Rig(ctx)
        # a random tied-embedding target repeats its last input token: the supplied word keeps the text non-blank
        node = PlannerNode(context=ctx, parameter_overrides=_params(model_dir, decoder="ar", response_prefix=" go"))
        with executor_with(ctx, node, rig.node) as ex:
            _spin(ex)
            # no observation yet: aborted with a clear error string
            status, result = rig.request.call(PlanRequest.Goal(instruction="stack"), TIMEOUT_S)
            assert status == GoalStatus.STATUS_ABORTED and result.error_string == "no plan: no observation received yet"
            obs = rig.observation()
            rig.obs.publish(obs)
            assert wait_for(lambda: rig.plans)  # the periodic plan (no primitive: text only, no features)
            assert wait_for(lambda: node.counts["no_primitive"] == 1) and not rig.features
            # a request: feedback streams the sub-task text, the result is the plan on that observation
            feedback = []
            handle = rig.request.send(PlanRequest.Goal(instruction="stack the cups"), feedback=feedback.append)
            status, result = rig.request.result(handle, TIMEOUT_S)
            assert status == GoalStatus.STATUS_SUCCEEDED and result.error_string == ""
            assert result.plan.instruction == "stack the cups" and result.plan.decoder == "ar"
            assert _stamp(result.plan.header.stamp) == _stamp(obs.header.stamp)
            # partial texts, growing, each a prefix of the final sub-task (feedback that arrives after the
            # result is dropped by the client, so the very last one may be missing)
            assert wait_for(lambda: len(feedback) >= 2)
            texts = [f.partial_subtask for f in feedback]
            assert all(t.startswith("go") and result.plan.subtask.startswith(t) for t in texts)
            assert all(len(a) < len(b) for a, b in zip(texts, texts[1:]))  # growing, one message per step
            # kinds the model does not emit: rejected
            with pytest.raises(GoalRejected):
                rig.request.send(PlanRequest.Goal(primitive_kinds=["drive_3d"]))
            # cancel: the plan stops at its next decoding step
            gate = _Gate(node)
            handle = rig.request.send(PlanRequest.Goal(instruction="wait"))
            assert gate.entered.acquire(timeout=TIMEOUT_S)
            assert rig.request.cancel(handle)
            assert wait_for(lambda: handle.status == GoalStatus.STATUS_CANCELING or node.counts["requests"] == 2)
            gate.open.set()
            status, result = rig.request.result(handle, TIMEOUT_S)
            assert status == GoalStatus.STATUS_CANCELED and result.error_string == "cancelled"
            assert wait_for(lambda: node.counts["cancelled"] == 1)


def test_invalid_model_output_is_counted_and_never_published(model_dir):
    with ros_context() as ctx:
        rig = _Rig(ctx)
        # a rigged drafter: unconstrained drafts of a random drafter fail the gate -> constrained AR fallback
        node = PlannerNode(context=ctx, parameter_overrides=_params(model_dir, response_prefix=PREFIX))
        node.runtime.decoder.config = type(node.runtime.decoder.config)(decoder="vflash", budget=40,
                                                                        constrain_draft=False)
        with executor_with(ctx, node, rig.node) as ex:
            _spin(ex)
            assert wait_for(lambda: rig.obs.get_subscription_count())
            rig.obs.publish(rig.observation())
            assert wait_for(lambda: rig.plans and rig.features)
            p = rig.plans[0].primitives[0]
            assert not p.accepted_direct and p.fallback_from == 1 and node.counts["gate_fallback"] == 1
            # a rigged target: non-finite hidden states -> the plan is refused, counted, not published
            import torch

            with torch.no_grad():
                node.runtime.model.target.model.model.language_model.norm.weight.fill_(float("nan"))
            rig.obs.publish(rig.observation(seed=4))
            assert wait_for(lambda: node.counts["invalid"] == 1)
            assert wait_for(lambda: rig.diag_seen("plan not published"))
            time.sleep(0.2)
            assert len(rig.plans) == 1 and len(rig.features) == 1


def test_shutdown_mid_plan_stops_the_worker(model_dir):
    with ros_context() as ctx:
        rig = _Rig(ctx)
        node = PlannerNode(context=ctx, parameter_overrides=_params(model_dir, response_prefix=PREFIX))
        with executor_with(ctx, node, rig.node) as ex:
            _spin(ex)
            gate = _Gate(node)
            assert wait_for(lambda: rig.obs.get_subscription_count())
            rig.obs.publish(rig.observation())
            assert gate.entered.acquire(timeout=TIMEOUT_S)
            closer = threading.Thread(target=node.close)
            closer.start()
            assert wait_for(lambda: node.scheduler.stopping)
            gate.open.set()  # the plan starts after the stop request: cancelled at its first step
            closer.join(TIMEOUT_S)
            assert not closer.is_alive() and not node._worker.is_alive()
            assert node.counts["cancelled"] == 1 and node.counts["plans"] == 0 and not rig.plans


def test_bad_model_dir_or_parameters_stop_the_node(tmp_path, model_dir):
    with ros_context() as ctx:
        with pytest.raises(ParameterError, match="model_dir: .*does_not_exist"):
            PlannerNode(context=ctx, parameter_overrides=_params(str(tmp_path / "does_not_exist")))
        (tmp_path / "empty").mkdir()
        with pytest.raises(ParameterError, match="model_dir: .*no manifest.json"):
            PlannerNode(context=ctx, parameter_overrides=_params(str(tmp_path / "empty")))
        with pytest.raises(ParameterError, match="cameras"):
            PlannerNode(context=ctx, parameter_overrides=_params(model_dir, cameras=["cam_a"]))
        with pytest.raises(ParameterError, match="decoder"):
            PlannerNode(context=ctx, parameter_overrides=_params(model_dir, decoder="beam"))


@pytest.mark.parametrize("robot, camera", [("aloha", "cam_high")])  # franka, drive: once their models exist
def test_robot_configs_give_the_planner_valid_parameters(robot, camera):
    from plan_stack.config import from_mapping
    from plan_stack.planning.config import PlannerNodeConfig
    from plan_stack.planning.runtime import RuntimeConfig
    from plan_stack.robot_config import load_robot_config

    spec = next(n for n in load_robot_config(robot).nodes if n.executable == "planner")
    params = {k: v for k, v in spec.parameters.items() if k != "use_sim_time"}
    node_keys = set(PlannerNodeConfig.__dataclass_fields__)
    node_cfg = from_mapping(PlannerNodeConfig, {k: v for k, v in params.items() if k in node_keys})
    runtime_cfg = from_mapping(RuntimeConfig, {k: v for k, v in params.items() if k not in node_keys})
    assert node_cfg.model_dir == robot and runtime_cfg.cameras == (camera,) and runtime_cfg.decoder == "vflash"


def test_backend_onnx_plans_over_dds_and_cuda_without_a_gpu_is_refused(tmp_path):
    import torch

    model_dir = str(make_model_dir(tmp_path / "m", budget=40, manifest={"primitive_kinds": ["robot_3d"],
                                                                         "waypoints": 2}))
    with ros_context() as ctx:
        rig = _Rig(ctx)
        node = PlannerNode(context=ctx, parameter_overrides=_params(model_dir, response_prefix=PREFIX,
                                                                    backend="onnx"))
        with executor_with(ctx, node, rig.node) as ex:
            _spin(ex)
            assert wait_for(lambda: rig.obs.get_subscription_count())
            rig.obs.publish(rig.observation())
            assert wait_for(lambda: rig.plans and rig.features)
            assert [p.kind for p in rig.plans[0].primitives] == ["robot_3d"]
            assert node.engines.counters()["draft_engine_calls"] >= 1
            assert wait_for(lambda: any(kv.key == "backend" and kv.value == "onnx" for s in list(rig.diag)
                                        for kv in s.values))
        if not torch.cuda.is_available():
            with pytest.raises(ParameterError, match="sees no GPU"):
                PlannerNode(context=ctx, parameter_overrides=_params(model_dir, device="cuda"))
