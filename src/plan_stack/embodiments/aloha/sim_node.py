"""`aloha_sim`: the embedded ALOHA, speaking a real ALOHA driver's ROS interfaces.

Publishes (node-relative unless absolute): `/clock` (the sim owns time),
`joint_states` (14 joints, joint units), `cameras/<name>/image_raw` (rgb8)
and `cameras/<name>/camera_info`, and privileged ground truth for evaluators:
`ground_truth/<object>/pose`, `ground_truth/<arm>_gripper/pose` (tool-centre
point; geometry_msgs/PoseStamped in `world`) and `ground_truth/reward`
(std_msgs/Int32, staged task reward, 4 = solved); a collision of the two
arms (contact force over `arm_collision_force_n`) is reported at once as an
ERROR `safety` diagnostic (the geoms, the force), its end as OK.

The task ends when it is solved (reward 4) or after `task_time_limit_s` of
sim time: its outcome (plan_stack/TaskOutcome) is published latched on
`ground_truth/task_outcome`, logged and reported (`task` diagnostic), and
the simulator does what `on_task_end` says (`embodiments.task_episodes`):
`continue`, `hold` (sim time stops) or `reset` (after `reset_pause_s` of wall
time with sim time standing still, so the stack finishes what it computed
for the old scene, the scene restarts with the next seed and sim time from
0: every node sees a clock reset). A controller command stamped in the old
scene's time that arrives after the reset is ignored (WARN), never
followed. Accepts
trajectory_msgs/JointTrajectory on `<controller>/joint_trajectory` for the
two arm and two gripper controllers, with joint_trajectory_controller
semantics (see `plan_stack.trajectory.core`).

Physics runs on its own thread (which also owns the GL context for
rendering), stepping on sim time either as fast as the machine allows
(`real_time_factor: 0`) or paced to `real_time_factor` x wall time.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, Int32
from trajectory_msgs.msg import JointTrajectory

from plan_stack.config import ConfigError, param
from plan_stack.embodiments.aloha.bridge import ARM_CONTROLLER_JOINTS
from plan_stack.embodiments.aloha.model import CAMERAS, JOINT_NAMES, TASKS
from plan_stack.embodiments.node_common import (
    CameraPublisher,
    ClockPublisher,
    Every,
    SimNode,
    follow_trajectory_msg,
    pose_msg,
)
from plan_stack.embodiments.sim_config import SimConfig
from plan_stack.embodiments.task_episodes import TaskEnd, TaskEpisodes, TaskOutcome
from plan_stack.msg import TaskOutcome as TaskOutcomeMsg
from plan_stack.ros.diagnostics import ERROR, OK, Diagnostics
from plan_stack.ros.lifecycle import node_main
from plan_stack.ros.qos import LATCHED_QOS, RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.time import s_to_stamp

__all__ = ["AlohaSimConfig", "AlohaSimNode", "main"]


@dataclasses.dataclass(frozen=True)
class AlohaSimConfig(SimConfig):
    """Parameters of the embedded ALOHA simulator (node `aloha_sim`)."""

    task: str = param("task: transfer_cube or insertion", "transfer_cube", choices=tuple(TASKS), read_only=True)
    seed: int = param("seed of the object placement", 0, min=0, read_only=True)
    joint_state_rate_hz: float = param("joint_states publish rate (sim time)", 50.0, min=1.0, max=500.0)
    cameras: tuple[str, ...] = param("cameras to render (cam_high, cam_left_wrist, cam_right_wrist)",
                                     tuple(CAMERAS), read_only=True)
    ground_truth_rate_hz: float = param("privileged ground-truth publish rate (sim time)", 10.0, min=0.0, max=500.0)
    left_arm_controller: str = param("left arm controller name (topic prefix)", "left_arm_controller", read_only=True)
    right_arm_controller: str = param("right arm controller name", "right_arm_controller", read_only=True)
    left_gripper_controller: str = param("left gripper controller name", "left_gripper_controller", read_only=True)
    right_gripper_controller: str = param("right gripper controller name", "right_gripper_controller", read_only=True)
    world_frame: str = param("frame of the ground-truth poses", "world", read_only=True)
    arm_collision_force_n: float = param(
        "an arm-arm contact pressing harder than this (N) is a collision, reported as an ERROR `safety` diagnostic "
        "(validation seeds: successful handovers touch with <= 10 N, the failed ones collided with 96-257 N)",
        40.0, min=0.0, read_only=True)
    arm_contact_clear_s: float = param(
        "the arms apart this long (sim s) end a contact: a collision's `safety` report turns OK, and the next "
        "touch is a new contact (touching arms bounce on and off contact every few ms)", 0.2, min=0.0,
        read_only=True)
    max_start_delay: float = param(
        "a controller command due further ahead than this (s, sim time) is refused: a wrong clock or stamp",
        10.0, min=0.0, read_only=True)
    task_time_limit_s: float = param(
        "a task not solved within this much sim time since its scene started ends as a failure (`time_limit`); "
        "0: no limit (settable at run time)", 0.0, min=0.0, max=86400.0)
    on_task_end: str = param(
        "what the simulator does when its task ends (solved, or task_time_limit_s): `continue` (the scene runs "
        "on), `hold` (sim time stops at the end state until this is set otherwise), `reset` (the scene restarts "
        "with the next seed and sim time from 0; the stack sees a clock reset) (settable at run time)",
        TaskEnd.CONTINUE.value, choices=tuple(e.value for e in TaskEnd))
    reset_pause_s: float = param(
        "with on_task_end `reset`: wall time between the task's end and the reset, sim time standing still (the "
        "stack finishes what it was computing for the old scene; a viewer sees the end state)", 0.5, min=0.0,
        max=60.0, read_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [c for c in self.cameras if c not in CAMERAS]
        if unknown:
            raise ConfigError(f"cameras: unknown camera(s) {unknown} (known: {sorted(CAMERAS)})")
        for rate in ("joint_state_rate_hz", "clock_rate_hz", "camera_rate_hz", "ground_truth_rate_hz"):
            value = getattr(self, rate)
            if value > 500.0:  # the physics step is 2 ms
                raise ConfigError(f"{rate}: {value} Hz exceeds the 500 Hz physics rate")


#: Task checks per second of sim time (the staged reward is computed from the contacts).
TASK_CHECK_RATE_HZ = 50.0


class AlohaSimNode(SimNode):
    RUNTIME_PARAMETERS = (*SimNode.RUNTIME_PARAMETERS, "on_task_end", "task_time_limit_s")

    def __init__(self, **kwargs) -> None:
        super().__init__("aloha_sim", **kwargs)
        cfg = self.declare_sim_config(AlohaSimConfig)
        self.cfg = cfg
        from plan_stack.embodiments.aloha.sim import MAX_REWARD, AlohaSim, RigControllers

        self.sim = AlohaSim(cfg.task, offscreen_size=(cfg.camera_width, cfg.camera_height))
        self.sim.reset(seed=cfg.seed)
        self._lock = threading.Lock()
        self.diagnostics = Diagnostics(self, 1.0)
        self._controllers = RigControllers()
        self.episodes = TaskEpisodes(cfg.task, cfg.seed, MAX_REWARD, cfg.task_time_limit_s)
        lo, hi = self.sim.command_range
        self._ranges = {key: (lo[cols], hi[cols]) for key, cols in self._controllers.index.items()}
        for key in ARM_CONTROLLER_JOINTS:
            controller = getattr(cfg, f"{key}_controller")
            self.create_subscription(
                JointTrajectory, f"{controller}/joint_trajectory",
                lambda msg, k=key: follow_trajectory_msg(self, k, self._controllers.followers[k], msg, self._lock,
                                                         lambda: self.sim.time_s, cfg.max_start_delay,
                                                         self._ranges[k], self.episodes.from_before_reset),
                RELIABLE_QOS, raw=True)
        self._clock_pub = ClockPublisher(self, cfg.clock_rate_hz)
        self._js_pub = self.create_publisher(JointState, "joint_states", SENSOR_QOS)
        self._cameras = CameraPublisher(self, {c: f"{c}_optical_frame" for c in cfg.cameras}, cfg.camera_rate_hz)
        self._obj_pub = {o: self.create_publisher(PoseStamped, f"ground_truth/{o}/pose", SENSOR_QOS)
                         for o in self.sim.task.objects}
        self._grip_pub = {a: self.create_publisher(PoseStamped, f"ground_truth/{a}_gripper/pose", SENSOR_QOS)
                          for a in ("left", "right")}
        self._reward_pub = self.create_publisher(Int32, "ground_truth/reward", RELIABLE_QOS)
        self._outcome_pub = self.create_publisher(TaskOutcomeMsg, "ground_truth/task_outcome", LATCHED_QOS)
        self._js, self._gt = Every(cfg.joint_state_rate_hz), Every(cfg.ground_truth_rate_hz)
        self._task_check = Every(TASK_CHECK_RATE_HZ)
        self.outcomes: list[TaskOutcome] = []  # every task's outcome so far
        self._report_task_started()
        self._touching = False  # an arm-arm contact is in progress
        self._collided = False  # ... and it was reported as a collision
        self._arms_touched_s = -float("inf")  # sim time the arms last touched
        self.start_physics("aloha_sim_physics", cfg.real_time_factor)

    # --- physics thread ---------------------------------------------------------

    def open_renderer(self):
        if not self._cameras.enabled:
            return None
        self.offscreen_gl()
        from plan_stack.embodiments.aloha.sim import CameraRenderer

        return CameraRenderer(self.sim, self.cfg.camera_width, self.cfg.camera_height, tuple(self._cameras.frames))

    def physics_step(self) -> None:
        t = self.sim.time_s
        with self._lock:
            self.sim.set_command(self._controllers.command(t))
        self.sim.step()
        self._check_arm_contact()

    def _check_arm_contact(self) -> None:
        """One ERROR `safety` report per contact of the arms that presses over `arm_collision_force_n`, OK once
        they have been apart for `arm_contact_clear_s`."""
        t = self.sim.time_s
        contacts = self.sim.arm_contacts()
        if contacts:
            self._touching, self._arms_touched_s = True, t
            left, right, force = max(contacts, key=lambda c: c[2])
            if not self._collided and force > self.cfg.arm_collision_force_n:
                self._collided = True
                self.diagnostics.report("safety", ERROR, f"arms collided at {t:.3f} s: {left} - {right}, "
                                        f"{force:.0f} N", now=True, sim_time_s=f"{t:.3f}", force_n=f"{force:.1f}")
        elif self._touching and t - self._arms_touched_s >= self.cfg.arm_contact_clear_s:
            self._touching = False
            if self._collided:
                self._collided = False
                self.diagnostics.report("safety", OK, "arms apart")

    def publish_due(self, t: float, stamp: Time, renderer) -> None:
        self._clock_pub.tick(t, stamp)
        if self._js.due(t):
            self._publish_joint_states(stamp)
        if self._gt.due(t):
            self._publish_ground_truth(stamp)
        if renderer is not None:
            self._cameras.tick(t, stamp, renderer.render, renderer.models)

    def _publish_joint_states(self, stamp: Time) -> None:
        msg = JointState(header=Header(stamp=stamp), name=list(JOINT_NAMES))
        msg.position = self.sim.joint_positions().tolist()
        msg.velocity = self.sim.joint_velocities().tolist()
        self._js_pub.publish(msg)

    def _publish_ground_truth(self, stamp: Time) -> None:
        header = Header(stamp=stamp, frame_id=self.cfg.world_frame)
        for name, pose in self.sim.object_poses().items():
            self._obj_pub[name].publish(pose_msg(header, pose))
        for arm, pose in self.sim.tcp_poses().items():
            self._grip_pub[arm].publish(pose_msg(header, pose))
        self._reward_pub.publish(Int32(data=int(self.sim.reward())))

    # --- the task -----------------------------------------------------------------

    def end_of_step(self, t: float, running: Callable[[], bool]) -> bool:
        """The task ended at this step: say so, then continue, hold or reset (`on_task_end`)."""
        if not self._task_check.due(t):
            return False
        cfg = self.cfg  # parameters set at run time are read here
        self.episodes.time_limit_s = cfg.task_time_limit_s
        outcome = self.episodes.update(t, self.sim.reward(), TaskEnd(cfg.on_task_end))
        if outcome is None:
            return False
        self.outcomes.append(outcome)
        self._publish_outcome(outcome)
        if outcome.next is TaskEnd.CONTINUE:
            return False
        if outcome.next is TaskEnd.HOLD:
            while running() and TaskEnd(self.cfg.on_task_end) is TaskEnd.HOLD:
                time.sleep(0.05)
            if not running() or TaskEnd(self.cfg.on_task_end) is TaskEnd.CONTINUE:
                return True  # sim time stood still: pace anew
        deadline = time.monotonic() + cfg.reset_pause_s
        while running() and time.monotonic() < deadline:  # the stack settles on the old scene meanwhile
            time.sleep(0.02)
        if running():
            self._reset_scene()
        return True

    def _publish_outcome(self, o: TaskOutcome) -> None:
        msg = TaskOutcomeMsg(task=o.task, episode=o.episode, seed=o.seed, success=o.success, reason=o.reason,
                             max_reward=o.max_reward, duration_s=o.duration_s, next=o.next.value,
                             next_seed=o.next_seed)
        msg.header.stamp = s_to_stamp(o.end_s)
        self._outcome_pub.publish(msg)
        self.get_logger().info(o.text())
        self.diagnostics.report("task", OK, o.text(), now=True, episode=o.episode, seed=o.seed, success=o.success,
                                reason=o.reason, max_reward=o.max_reward, duration_s=f"{o.duration_s:.2f}",
                                next=o.next.value, successes=sum(x.success for x in self.outcomes),
                                tasks=len(self.outcomes))

    def _reset_scene(self) -> None:
        """The next seed's scene from sim time 0: objects re-placed, the arms at the start pose, the controllers
        holding it (a command from before is forgotten), every publisher due at once."""
        from plan_stack.embodiments.aloha.sim import RigControllers

        with self._lock:
            seed = self.episodes.next_scene()
            self.sim.reset(seed=seed)
            self._controllers = RigControllers()
        for every in (self._js, self._gt, self._task_check):
            every.reset()
        self._clock_pub.reset()
        self._cameras.reset()
        self._touching, self._arms_touched_s = False, -float("inf")
        if self._collided:
            self._collided = False
            self.diagnostics.report("safety", OK, "arms apart (scene reset)")
        self.get_logger().info(f"scene reset: task {self.episodes.episodes + 1} with seed {seed}; sim time "
                               "restarts at 0")
        self._report_task_started()

    def _report_task_started(self) -> None:
        e = self.episodes
        self.diagnostics.report("task", OK, f"task {e.episodes + 1} ({e.task}, seed {e.seed}) running", now=True,
                                episode=e.episodes + 1, seed=e.seed, tasks=e.episodes,
                                successes=sum(x.success for x in self.outcomes))


main = node_main(AlohaSimNode)
