"""ROS edge shared by the embodiment nodes (ALOHA, Franka, driving): the simulator node's physics
thread, its rate dividers, clock and camera publishing, pose / camera_info messages, and the
joint-trajectory command path of the arm simulators.

Node-side only (imports rclpy and message packages); the logic it calls lives in the ROS-free
modules (`plan_stack.trajectory.core`, `plan_stack.ros.trajectory`, each embodiment's `sim`).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import rclpy
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header
from trajectory_msgs.msg import JointTrajectory

from plan_stack.embodiments.gl_backend import choose_backend
from plan_stack.embodiments.pacing import RealTimePace, StackPacer
from plan_stack.embodiments.sim_config import SimConfig
from plan_stack.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from plan_stack.ros.image import numpy_to_image
from plan_stack.ros.lifecycle import fail
from plan_stack.ros.params import declare_config
from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
from plan_stack.ros.time import s_to_stamp, stamp_to_s
from plan_stack.ros.trajectory import trajectory_from_cdr, trajectory_from_msg
from plan_stack.trajectory.core import TrajectoryError, TrajectoryFollower

__all__ = ["Every", "pose_msg", "camera_info_msg", "ClockPublisher", "CameraPublisher", "SimNode",
           "follow_trajectory_msg"]


class Every:
    """Fires once per period of sim time (drift-free: the next due time advances by the period);
    never fires for a rate of 0."""

    def __init__(self, rate_hz: float) -> None:
        self.period = 1.0 / rate_hz if rate_hz > 0 else None
        self.next_s = 0.0

    def due(self, t: float) -> bool:
        if self.period is None or t + 1e-9 < self.next_s:
            return False
        self.next_s += self.period * max(1, int((t - self.next_s) / self.period) + 1)
        return True

    def reset(self) -> None:
        """Sim time restarted (a scene reset): fire at the next step again."""
        self.next_s = 0.0


def pose_msg(header: Header, pose: np.ndarray) -> PoseStamped:
    """PoseStamped from a 7-vector (x, y, z, qw, qx, qy, qz) — the simulators' pose layout."""
    msg = PoseStamped(header=header)
    p, q = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pose[:3])
    q.w, q.x, q.y, q.z = (float(v) for v in pose[3:7])
    return msg


def camera_info_msg(cam, header: Header) -> CameraInfo:
    """CameraInfo of an undistorted pinhole camera (plumb_bob with zero coefficients)."""
    msg = CameraInfo(header=header, width=cam.width, height=cam.height, distortion_model="plumb_bob")
    msg.d = [0.0] * 5
    msg.k = [cam.fx, 0.0, cam.cx, 0.0, cam.fy, cam.cy, 0.0, 0.0, 1.0]
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [cam.fx, 0.0, cam.cx, 0.0, 0.0, cam.fy, cam.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return msg


class ClockPublisher:
    """Publishes `/clock` at `rate_hz` of sim time: the simulator owns time."""

    def __init__(self, node: Node, rate_hz: float) -> None:
        self._pub = node.create_publisher(Clock, "/clock", RELIABLE_QOS)
        self._every = Every(rate_hz)

    def tick(self, t: float, stamp: Time) -> None:
        if self._every.due(t):
            self._pub.publish(Clock(clock=stamp))

    def reset(self) -> None:
        """Sim time restarted: publish at the next step."""
        self._every.reset()


class CameraPublisher:
    """`cameras/<name>/image_raw` (rgb8) + `cameras/<name>/camera_info` for each camera, at `rate_hz` of
    sim time; no publishers at all when the rate is 0 (rendering disabled).

    `frames` maps camera name -> optical frame id (the header of both messages).
    """

    def __init__(self, node: Node, frames: Mapping[str, str], rate_hz: float) -> None:
        self.frames = dict(frames) if rate_hz > 0 else {}
        self._img = {c: node.create_publisher(Image, f"cameras/{c}/image_raw", SENSOR_QOS)
                     for c in self.frames}
        self._info = {c: node.create_publisher(CameraInfo, f"cameras/{c}/camera_info", SENSOR_QOS)
                      for c in self.frames}
        self._every = Every(rate_hz)

    @property
    def enabled(self) -> bool:
        return bool(self.frames)

    def reset(self) -> None:
        """Sim time restarted: render and publish at the next step."""
        self._every.reset()

    def tick(self, t: float, stamp: Time, render: Callable[[str], np.ndarray], models: Mapping) -> None:
        """Render and publish every camera if due; `render(name)` -> [H, W, 3] uint8, `models[name]` its intrinsics."""
        if not self.frames or not self._every.due(t):
            return
        for name, frame in self.frames.items():
            header = Header(stamp=stamp, frame_id=frame)
            self._img[name].publish(numpy_to_image(render(name), "rgb8", header))
            self._info[name].publish(camera_info_msg(models[name], header))


S = TypeVar("S", bound=SimConfig)


class SimNode(Node):
    """An embedded simulator node: physics (and rendering, which owns the GL context) on its own thread.

    The thread steps on sim time, either as fast as the machine allows (`real_time_factor` 0) or paced to
    `real_time_factor` x wall time, and after each step calls `publish_due(t, stamp, renderer)`. Subclasses
    set `self.sim` (with `time_s`) and implement `open_renderer` (None when not rendering), `physics_step`
    and `publish_due`, then call `start_physics` at the end of their constructor.
    """

    sim: Any  # the robot's simulator (has `time_s`), set by the subclass
    diagnostics: Diagnostics  # set by the subclass
    #: Parameters a running simulator applies when set (`ros2 param set`); every other one is read-only.
    RUNTIME_PARAMETERS: tuple[str, ...] = ("real_time_factor",)

    def declare_sim_config(self, config_type: type[S]) -> S:
        """Declare the simulator's config (a `SimConfig`); `real_time_factor` may be changed at run time
        (validated, applied)."""
        return declare_config(self, config_type, on_change=self._apply_config,
                                          runtime=self.RUNTIME_PARAMETERS)

    def _apply_config(self, cfg) -> None:
        self.cfg = cfg
        self._real_time_factor = cfg.real_time_factor

    def start_physics(self, thread_name: str, real_time_factor: float) -> None:
        self._real_time_factor = real_time_factor
        self._pacer = self._make_pacer(self.cfg)
        self._running = True
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def _make_pacer(self, cfg) -> StackPacer | None:
        """Gates on `action_chunk` / `plan` (observation stamps) when their leads are set (plan_stack.embodiments.pacing)."""
        from plan_stack.msg import ActionChunk, VisualPlan

        gates = [(name, topic, cls, getattr(cfg, f"pace_{name}_lead_s", 0.0))
                 for name, topic, cls in (("chunk", "action_chunk", ActionChunk), ("plan", "plan", VisualPlan))]
        gates = [g for g in gates if g[3] > 0]
        if not gates:
            return None
        pacer = StackPacer([g[0] for g in gates], [g[3] for g in gates], cfg.pace_timeout_s)
        for name, topic, cls, _ in gates:
            self.create_subscription(cls, topic, lambda msg, n=name: pacer.ack(n, stamp_to_s(msg.header.stamp)),
                                     RELIABLE_QOS)
        self.get_logger().info("paced to the stack: " + ", ".join(f"{t} within {lead} s" for _, t, _, lead in gates))
        return pacer

    def _wait_for_stack(self, running) -> None:
        """Paced: hold sim time at 0 until the paced topics have publishers and the cameras subscribers
        (frames sent before discovery matched them would be lost, and the stack would never answer)."""
        topics = [s.topic_name for s in self.subscriptions if s.topic_name.endswith(("/action_chunk", "/plan"))]
        cameras = [p for p in self.publishers if p.topic_name.endswith("/image_raw")]
        while running():
            if all(self.count_publishers(t) > 0 for t in topics) and all(
                    p.get_subscription_count() > 0 for p in cameras):
                return
            time.sleep(0.1)

    def open_renderer(self):
        return None

    @staticmethod
    def offscreen_gl() -> str:
        """Pick a working offscreen GL backend (EGL, then OSMesa) unless MUJOCO_GL is set; call before rendering."""
        return choose_backend()

    def physics_step(self) -> None:
        raise NotImplementedError

    def publish_due(self, t: float, stamp: Time, renderer) -> None:
        raise NotImplementedError

    def end_of_step(self, t: float, running: Callable[[], bool]) -> bool:
        """Called on the physics thread after each step and its publishing (sim time `t`). A subclass may wait
        here (sim time stands still meanwhile) or restart its scene (sim time from 0); it returns True when it
        did either, and the thread then paces anew from the present (and, after a restart, forgets the
        pacing gates' answers from before it)."""
        return False

    def _run(self) -> None:
        renderer = None
        try:
            renderer = self.open_renderer()
            pace = RealTimePace(self._real_time_factor, self.cfg.max_catch_up_s, self.sim.time_s)
            running = lambda: self._running and rclpy.ok(context=self.context)  # noqa: E731
            if self._pacer is not None:
                self._wait_for_stack(running)
                pace.reanchor(self.sim.time_s)
            while running():
                if self._real_time_factor != pace.rtf:  # changed at run time: pace anew from here
                    pace.reanchor(self.sim.time_s, self._real_time_factor)
                if self._pacer is not None and self.sim.time_s >= self._pacer.limit_s():
                    bypassed = self._pacer.bypassed
                    if not self._pacer.wait(self.sim.time_s, running):
                        break
                    pace.reanchor(self.sim.time_s)  # waited: nothing to catch up
                    if self._pacer.bypassed != bypassed:
                        self.diagnostics.report("pacing", WARN if self._pacer.bypassed else OK,
                                                f"not waiting for silent gate(s) {list(self._pacer.bypassed)}"
                                                if self._pacer.bypassed else "paced to the stack", now=True)
                self.physics_step()
                t = self.sim.time_s
                self.publish_due(t, s_to_stamp(t), renderer)
                if self.end_of_step(t, running):  # waited, or the scene restarted: nothing to catch up
                    if self._pacer is not None and self.sim.time_s < t:
                        self._pacer.reset()  # answers from before the restart are stamped in the future
                    pace.reanchor(self.sim.time_s)
                    continue
                sleep_s = pace.after_step(t)
                if sleep_s > 0:
                    time.sleep(sleep_s)
        except Exception as exc:  # a dead physics thread must not leave a live node with a dead robot
            if not (self._running and rclpy.ok(context=self.context)):
                return  # shutting down: publishing into a closed context is expected
            self.diagnostics.report("physics", ERROR, f"physics thread stopped: {exc!r}", now=True)
            fail(self, f"physics thread stopped: {exc!r}")  # FATAL log; the process exits 1
        finally:
            if renderer is not None:
                renderer.close()

    def close(self) -> None:
        self._running = False
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)


#: Numerical slack on the servo position range (joint units) before a command point counts as outside it.
POSITION_SLACK = 1e-6


def follow_trajectory_msg(node: SimNode, key: str, follower: TrajectoryFollower, msg: JointTrajectory | bytes,
                          lock: threading.Lock, now_s: Callable[[], float],
                          max_start_delay: float = float("inf"),
                          position_range: tuple[np.ndarray, np.ndarray] | None = None,
                          from_before_reset: Callable[[float, float], bool] | None = None) -> None:
    """Hand a controller's JointTrajectory to its follower (joint_trajectory_controller semantics).

    Malformed or non-finite trajectories, ones due more than `max_start_delay` s ahead (a wrong clock
    or stamp) and ones with a point outside `position_range` (follower joint order; the servos would
    clip it and drive to the limit) are rejected (warning + ERROR diagnostic `key`), never followed; one
    that ended in the past is ignored with a WARN, and so is one that `from_before_reset(due_s, now_s)` says
    was stamped in the time of a scene before a reset. `msg` may be serialized (a `raw=True` subscription).
    """
    try:
        traj = trajectory_from_cdr(msg) if isinstance(msg, bytes) else trajectory_from_msg(msg)
        if not all(np.all(np.isfinite(a)) for a in (traj.positions, traj.velocities, traj.accelerations)
                   if a is not None):
            raise TrajectoryError("positions: non-finite values")
        now = now_s()
        ahead = traj.start_s(now) + float(traj.times_s[0]) - now
        if from_before_reset is not None and from_before_reset(now + ahead, now):
            node.diagnostics.report(key, WARN, f"ignored a trajectory due in {ahead:.3f} s: stamped in the time of "
                                    "the scene before the reset", now=True)
            return
        if ahead > max_start_delay:
            raise TrajectoryError(f"header.stamp: due in {ahead:.3f} s, more than {max_start_delay} s ahead")
        if position_range is not None:
            order = [traj.joint_names.index(n) for n in follower.joint_names if n in traj.joint_names]
            if len(order) == len(follower.joint_names):
                q = traj.positions[:, order]
                lo, hi = position_range
                bad = np.argwhere((q < lo - POSITION_SLACK) | (q > hi + POSITION_SLACK))
                if bad.size:
                    i, j = (int(x) for x in bad[0])
                    raise TrajectoryError(f"positions: {follower.joint_names[j]} = {q[i, j]:.6g} at point {i} is "
                                          f"outside [{lo[j]:.6g}, {hi[j]:.6g}]")
        with lock:
            accepted = follower.set_trajectory(traj, now_s())
    except TrajectoryError as exc:
        node.get_logger().warning(f"{key}: rejected trajectory: {exc}")
        node.diagnostics.report(key, ERROR, f"rejected trajectory: {exc}", now=True)
        return
    if not accepted:
        node.diagnostics.report(key, WARN, "ignored a trajectory that ended in the past", now=True)
