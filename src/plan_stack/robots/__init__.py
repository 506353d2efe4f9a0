"""The robots: one `RobotProfile` per robot (`profile.py`), its data in `<robot>.py`.

The one place that knows which robots exist. Plain data at the base of the package order: every layer may
read it (the planner's data sets, the training recipes, the episode runner, the executables table), and
the robot code it names is loaded by `plan_stack.embodiments.registry` only. A new robot is one folder
under `embodiments/`, one profile here, `config/<robot>.yaml`, its URDF under `urdf/` and its launch file.
Imports only the standard library and `plan_stack.config` (CMake and setup.py read the executables
table, which reads the profiles, before anything else is installed).
"""
from __future__ import annotations

from plan_stack.config import ConfigError
from plan_stack.robots.aloha import ALOHA
from plan_stack.robots.drive import DRIVE
from plan_stack.robots.franka import FRANKA
from plan_stack.robots.profile import (
    EpisodeSettings,
    Executable,
    LearningSpec,
    OnpolicyRound,
    Parts,
    Recipe,
    RobotProfile,
    Split,
)

__all__ = ["PROFILES", "profile", "robot_names", "profile_of_bridge", "RobotProfile", "Parts", "Executable",
           "LearningSpec", "Recipe", "EpisodeSettings", "Split", "OnpolicyRound"]

#: robot name -> its profile
PROFILES: dict[str, RobotProfile] = {p.name: p for p in (ALOHA, FRANKA, DRIVE)}


def robot_names() -> list[str]:
    return sorted(PROFILES)


def profile(name: str) -> RobotProfile:
    """The profile of the robot called `name`; ConfigError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"robot: unknown robot {name!r} (known: {robot_names()})") from None


def profile_of_bridge(executable: str) -> RobotProfile | None:
    """The robot whose bridge node is `executable`, or None."""
    return next((p for p in PROFILES.values() if p.bridge_executable.name == executable), None)
