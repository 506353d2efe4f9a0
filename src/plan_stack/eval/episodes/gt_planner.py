"""The ground-truth-plan ablation: plan features from the annotated expert plan instead of decoding.

`run-episodes --gt-plans` replaces the planner by this node. Before the
episode it rolls the scripted expert of the same seed out (the recorder of
`plan-stack record-demos`, no ROS), which gives the annotation: per keyframe
(every 0.5 s of the expert's timeline) the sub-task and each arm's future
tool-centre path. For each observation (at most every `replan_period_s`, as
the planner) it takes the newest keyframe at or before the observation's
sim time and runs the planner model's frozen target once, teacher-forced on
the prompt (the live camera image, the instruction) and the annotated
response, exactly as the action head's training features were made
(`actions.train_features.keyframe_features`). It publishes `plan_features`
(what the chunker conditions on) and `plan` (the ground-truth primitives).

What it isolates: plan errors of the planner (wrong or late waypoints,
decoding time). What it does not: the expert's timeline is the recorded one,
so a robot running behind it gets plans for a later sub-task phase.
"""
from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import Point
from rclpy.node import Node

from plan_stack.actions.demos import keyframe_in_force
from plan_stack.embodiments import registry
from plan_stack.msg import Observation, PlanFeatures, Primitive, VisualPlan
from plan_stack.robots import profile
from plan_stack.ros.image import image_to_numpy
from plan_stack.ros.qos import RELIABLE_QOS
from plan_stack.ros.time import stamp_to_s

__all__ = ["GroundTruthPlanner", "expert_keyframes"]


def expert_keyframes(robot: str, task: str, seed: int, image_size: tuple[int, int]) -> list:
    """The annotated keyframes of the scripted expert's episode of `seed`, recorded into a temporary folder
    by the robot's own recorder (`plan-stack record-demos`, the options the planner's data was recorded
    with: 224 px, cameras at 2 Hz)."""
    from plan_stack.data.episodes import load_episode_keyframes

    robot_profile = profile(robot)
    if not robot_profile.learning.action_head:
        raise ValueError(f"--gt-plans: the {robot} stack has no action head to feed ground-truth plan features")
    options = registry.record_options_class(robot_profile)(width=224, height=224, camera_rate_hz=2.0)
    with tempfile.TemporaryDirectory(prefix="plan_stack_gt_") as tmp:
        annotation = registry.recorder(robot_profile, task, tmp, 224, 224)(seed, options)
        return load_episode_keyframes(f"{tmp}/{annotation['bag']}.json", robot_profile.learning, image_size,
                                      successful_only=False)


class GroundTruthPlanner(Node):
    """Publishes ground-truth plan features for each observation (see module doc)."""

    def __init__(self, robot: str, seed: int, raw_config: dict, **kwargs: Any) -> None:
        import torch
        from rclpy.parameter import Parameter

        from plan_stack.paths import find_data
        from plan_stack.planning.model_dir import load_planner_model

        super().__init__("gt_planner", parameter_overrides=[Parameter("use_sim_time", value=True)], **kwargs)
        nodes = raw_config["nodes"]
        sim = next(spec for spec in nodes.values() if spec.get("executable", "").endswith("_sim"))
        task = sim.get("parameters", {}).get("task") or profile(robot).episode.tasks[0]
        planner = _planner_parameters(robot)
        torch.set_num_threads(int(planner.get("torch_threads", 1)))
        self.model = load_planner_model(find_data("models", planner.get("model_dir", robot)))
        self.spec = profile(robot).learning
        self.replan_period_s = float(planner.get("replan_period_s", 0.5))
        self.keyframes = expert_keyframes(robot, task, seed, self.model.required_image_size())
        if not self.keyframes:
            raise RuntimeError(f"--gt-plans: the expert episode of seed {seed} has no keyframes")
        self.times = np.array([kf.t_s for kf in self.keyframes])
        self._plan_pub = self.create_publisher(VisualPlan, "plan", RELIABLE_QOS)
        self._feat_pub = self.create_publisher(PlanFeatures, "plan_features", RELIABLE_QOS)
        self.create_subscription(Observation, "observation", self._on_observation, RELIABLE_QOS)
        self._latest: Observation | None = None
        self._last_planned: float | None = None
        self._cond = threading.Condition()
        self._running = True
        self.plans = 0
        self._worker = threading.Thread(target=self._work, name="gt_planner", daemon=True)
        self._worker.start()

    def _on_observation(self, msg: Observation) -> None:
        t = stamp_to_s(msg.header.stamp)
        with self._cond:
            if self._last_planned is not None and self._last_planned <= t < self._last_planned + self.replan_period_s:
                return
            self._latest = msg
            self._cond.notify()

    def _work(self) -> None:
        while self._running:
            with self._cond:
                while self._running and self._latest is None:
                    self._cond.wait(0.2)
                if not self._running:
                    return
                msg, self._latest = self._latest, None
                self._last_planned = stamp_to_s(msg.header.stamp)
            self._plan(msg)

    def _plan(self, msg: Observation) -> None:
        from plan_stack.actions.train_features import keyframe_features

        t = stamp_to_s(msg.header.stamp)
        i = keyframe_in_force(self.times, t)
        names = list(msg.camera_names)
        try:
            images = [image_to_numpy(msg.images[names.index(cam)]) for cam in self.spec.cameras]
        except ValueError:
            self.get_logger().error(f"observation lacks camera(s) {self.spec.cameras} (has {names})")
            return
        kf = dataclasses.replace(self.keyframes[i], images=images)
        t0 = time.monotonic()
        feats, = keyframe_features(self.model, [kf], self.spec)
        ms = 1e3 * (time.monotonic() - t0)
        plan = VisualPlan(instruction=kf.instruction, subtask=kf.subtask, total_ms=float(ms), decoder="ground_truth")
        plan.header.stamp = msg.header.stamp
        for arm, pts in zip(self.spec.arms, kf.points):
            plan.primitives.append(Primitive(kind="robot_3d", arm=arm, frame_id=self.spec.frame_id,
                                             points=[Point(x=float(x), y=float(y), z=float(z)) for x, y, z in pts]))
        self._plan_pub.publish(plan)
        feat = PlanFeatures(shape=list(feats.shape), data=feats.reshape(-1).astype(float).tolist(),
                            plan_stamp=msg.header.stamp)
        feat.header.stamp = self.get_clock().now().to_msg()
        self._feat_pub.publish(feat)
        self.plans += 1

    def close(self) -> None:
        self._running = False
        with self._cond:
            self._cond.notify_all()
        self._worker.join(timeout=10.0)


def _planner_parameters(robot: str) -> dict:
    """The planner's parameters of config/<robot>.yaml (the ablation uses the same model directory)."""
    from plan_stack.robot_config import load_robot_config

    for spec in load_robot_config(robot).nodes:
        if spec.executable == "planner":
            return dict(spec.parameters)
    return {}
