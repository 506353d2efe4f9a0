"""Robot name -> its embodiment: the one place that knows which robots exist and where their parts live.

No ROS imports, and nothing heavy at import time: every part is named as
`module:attribute` under the robot's package and imported on first use, so
listing robots (argument parsers, config checks) does not load MuJoCo or
torch. Every robot folder (`embodiments/<robot>/`) uses the same module names:

* `sim` (the simulator class), `expert` (the scripted expert, with one
  uniform entry point `demonstrate(task, seed, sim=None) -> Demonstration`), `recording`
  (`record_episode` and, through `recorder`, one uniform entry point for
  `plan-stack record-demos`), `bridge` (the bridge's config class and, for
  joint-space robots, `load_limits`), `sim_node` / `bridge_node` (ROS shells).

A new robot is one folder with those modules and one entry in `ROBOTS`.
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from plan_stack.config import ConfigError

__all__ = ["Robot", "ROBOTS", "Demonstration", "robot", "robot_names", "robot_of_bridge", "check_task"]


@dataclasses.dataclass(frozen=True)
class Demonstration:
    """What every robot's scripted expert returns from `expert.demonstrate(task, seed, sim=None)`.

    `success` means the same as in the robot's annotations; `episode` is the
    robot's own record (joint commands, trajectory, driving statistics).
    """

    robot: str
    task: str
    seed: int
    success: bool
    episode: Any


def check_task(robot_name: str, task: str) -> None:
    """ValueError unless `task` is one of the robot's tasks (before any simulator is built)."""
    tasks = ROBOTS[robot_name].tasks
    if task not in tasks:
        raise ValueError(f"task: {task!r} is not a {robot_name} task (choose from {list(tasks)})")


@dataclasses.dataclass(frozen=True)
class Robot:
    """One embodiment: its tasks (the first is the default) and where its parts are."""

    name: str
    tasks: tuple[str, ...]
    sim: str  # module:attribute of the simulator class
    expert: str  # module:attribute of `demonstrate(task, seed, sim=None) -> Demonstration`
    record_options: str  # module:attribute of the recorder's options dataclass
    bridge_config: str  # module:attribute of the bridge's config dataclass
    bridge_limits: str | None  # module:attribute of `load_limits(bridge_config) -> Limits`; None: not joint space
    bridge_executable: str
    sim_executable: str
    #: the annotation carries a reward worth printing (`record-demos`)
    reports_reward: bool = False
    #: `record-demos` options only this robot's recorder has (argument names)
    recorder_only_options: tuple[str, ...] = ()
    #: what a successful demonstration means, for the summary line of `record-demos`
    success_means: str = "solved"
    # --- closed-loop episodes (`plan-stack run-episodes`) ---
    #: success criterion of an episode: a kind in `plan_stack.eval.episodes.criterion.CRITERIA`
    success_criterion: str = "success_flag"
    #: default sim-time budget of an episode (s)
    episode_time_limit_s: float = 15.0
    #: camera whose images start the latency clock of an episode
    latency_camera: str = ""
    #: controller command topic whose messages the episode monitor counts as bridge commands (None: none)
    bridge_command_topic: str | None = None
    #: the episode monitor checks the measured arm joint states against the bridge's URDF limits
    checks_joint_states: bool = False

    @property
    def package(self) -> str:
        return f"plan_stack.embodiments.{self.name}"

    def load(self, ref: str) -> Any:
        """The attribute `module:attribute` of this robot's package, imported now."""
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(f"{self.package}.{module}"), attr)

    def demonstrate(self, task: str, seed: int, sim: Any = None) -> Demonstration:
        """One scripted demonstration of `task` (on `sim`, or a fresh simulator)."""
        return self.load(self.expert)(task, seed, sim)

    def recorder(self, task: str, out_dir: str, width: int, height: int) -> Callable[[int, Any], dict]:
        """`(seed, options) -> annotation` recording one demonstration of `task` (one simulator reused)."""
        return self.load("recording:recorder")(task, out_dir, width, height)

    def bridge_config_from(self, parameters: dict[str, Any]) -> Any:
        """The bridge's config from a node's parameter mapping (keys the config does not declare are ignored)."""
        from plan_stack.config import field_kinds, from_mapping

        cls = self.load(self.bridge_config)
        known = field_kinds(cls)
        return from_mapping(cls, {k: v for k, v in parameters.items() if k in known})

    def joint_limits(self, bridge_parameters: dict[str, Any]):
        """The bridge's per-joint `Limits` for these bridge parameters (URDF + config)."""
        if self.bridge_limits is None:
            raise ConfigError(f"robot: {self.name} has no joint limits (its bridge is not joint space)")
        return self.load(self.bridge_limits)(self.bridge_config_from(bridge_parameters))


ROBOTS: dict[str, Robot] = {r.name: r for r in (
    Robot("aloha", ("transfer_cube", "insertion"), sim="sim:AlohaSim", expert="expert:demonstrate",
          record_options="recording:AlohaRecordOptions", bridge_config="bridge:AlohaBridgeConfig",
          bridge_limits="bridge:load_limits", bridge_executable="aloha_bridge", sim_executable="aloha_sim",
          reports_reward=True, recorder_only_options=("perturb",),
          # the scripted transfer-cube expert takes 8 s; the learned stack gets 50 % more
          success_criterion="staged_reward", episode_time_limit_s=12.0, latency_camera="cam_high",
          bridge_command_topic="/left_arm_controller/joint_trajectory", checks_joint_states=True),
    Robot("franka", ("pick_place",), sim="sim:FrankaSim", expert="expert:demonstrate",
          record_options="recording:FrankaRecordOptions", bridge_config="bridge:FrankaBridgeConfig",
          bridge_limits="bridge:load_limits", bridge_executable="franka_bridge", sim_executable="franka_sim",
          recorder_only_options=("miss", "pick_only"),
          success_criterion="success_flag", episode_time_limit_s=15.0, latency_camera="external",
          bridge_command_topic="/fr3_arm_controller/joint_trajectory", checks_joint_states=True),
    Robot("drive", ("drive",), sim="sim:DriveSim", expert="expert:demonstrate",
          record_options="recording:DriveRecordOptions", bridge_config="bridge:DriveBridgeConfig",
          bridge_limits=None, bridge_executable="drive_bridge", sim_executable="drive_sim",
          recorder_only_options=("duration", "horizon", "perturb", "policy_model", "policy_decoder",
                                 "policy_latency", "policy_latency_max", "displace"),
          success_means="without collision or road departure",
          success_criterion="safe_driving", episode_time_limit_s=61.0, latency_camera="front"),
)}


def robot_names() -> list[str]:
    return sorted(ROBOTS)


def robot(name: str) -> Robot:
    """The robot called `name`; ConfigError naming the known ones otherwise."""
    try:
        return ROBOTS[name]
    except KeyError:
        raise ConfigError(f"robot: unknown robot {name!r} (known: {robot_names()})") from None


def robot_of_bridge(executable: str) -> Robot | None:
    """The robot whose bridge node is `executable`, or None."""
    return next((r for r in ROBOTS.values() if r.bridge_executable == executable), None)
