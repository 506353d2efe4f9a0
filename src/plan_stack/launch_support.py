"""Build a launch description from a robot config (real ROS 2 installs).

The launch files in launch/ are one line each around this, so `ros2 launch`
starts exactly the nodes and parameters `plan-stack up` starts. Arguments
(`ros2 launch plan_stack aloha.launch.py name:=value`):

* `config`: robot name (config/<name>.yaml) or path to a robot YAML; default
  the launch file's robot (e.g. `config:=aloha_real` on the real ALOHA);
* `use_sim_time`: `true`/`false` for every node; empty keeps the config's
  value (`false` on a real robot: there is no /clock);
* `rviz`: `true` also starts rviz2 with config/plan_stack.rviz (a message
  says so where rviz2 is not installed);
* `respawn`: `true` (default) restarts a node that died, after `respawn_delay`
  seconds.

`launch` and `launch_ros` come with an apt ROS 2 install; they are imported
only inside the functions. `launch_plan` holds the logic without them.
"""
from __future__ import annotations

from typing import Any

from plan_stack.config import ConfigError
from plan_stack.robot_config import load_robot_config

__all__ = ["LAUNCH_ARGUMENTS", "launch_plan", "parse_flag", "generate_launch_description_for"]

#: name -> (default, description); `config`'s default is the launch file's robot.
LAUNCH_ARGUMENTS: dict[str, tuple[str, str]] = {
    "config": ("", "robot name (config/<name>.yaml) or path to a robot YAML"),
    "use_sim_time": ("", "true/false for every node; empty keeps the config's value (false on a real robot)"),
    "rviz": ("false", "true: also start rviz2 with config/plan_stack.rviz"),
    "respawn": ("true", "true: restart a node that died (after respawn_delay s)"),
    "respawn_delay": ("2.0", "seconds before a node that died is restarted"),
}
RVIZ_CONFIG = "plan_stack.rviz"


def parse_flag(name: str, text: str) -> bool | None:
    """A launch argument's true/false (None when empty)."""
    value = text.strip().lower()
    if value == "":
        return None
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{name}: expected true or false, got {text!r}")


def launch_plan(config: str, use_sim_time: str = "", respawn: str = "true",
                respawn_delay: str = "2.0") -> list[dict[str, Any]]:
    """Keyword arguments of one `launch_ros.actions.Node` per node of the config."""
    cfg = load_robot_config(config, use_sim_time=parse_flag("use_sim_time", use_sim_time))
    again = bool(parse_flag("respawn", respawn))
    try:
        delay = float(respawn_delay)
    except ValueError:
        raise ConfigError(f"respawn_delay: expected seconds, got {respawn_delay!r}") from None
    return [dict(package="plan_stack", executable=spec.executable, name=spec.name,
                 parameters=[dict(spec.parameters)], remappings=list(spec.remappings.items()),
                 output="screen", emulate_tty=True, respawn=again, respawn_delay=delay,
                 **({"prefix": f"nice -n {spec.nice}"} if spec.nice else {}))
            for spec in cfg.nodes]


def _actions(context, robot: str):
    from launch.actions import LogInfo
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    arg = {name: LaunchConfiguration(name).perform(context) for name in LAUNCH_ARGUMENTS}
    plan = launch_plan(arg["config"] or robot, arg["use_sim_time"], arg["respawn"], arg["respawn_delay"])
    actions = [Node(**kwargs) for kwargs in plan]
    if parse_flag("rviz", arg["rviz"]):
        try:
            from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

            get_package_share_directory("rviz2")
        except (ImportError, PackageNotFoundError):
            actions.append(LogInfo(msg="rviz:=true but rviz2 is not installed (apt install ros-$ROS_DISTRO-rviz2)"))
        else:
            from plan_stack.paths import find_data

            actions.append(Node(package="rviz2", executable="rviz2", name="rviz2", output="screen",
                                arguments=["-d", str(find_data("config", RVIZ_CONFIG))]))
    return actions


def generate_launch_description_for(robot: str):
    """LaunchDescription: the arguments above, then one launch_ros Node per node of the chosen config."""
    try:
        from launch import LaunchDescription
        from launch.actions import DeclareLaunchArgument, OpaqueFunction
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"{exc}: launch files need ROS 2 `launch` and `launch_ros` (apt install "
            "ros-$ROS_DISTRO-launch-ros); without them use `plan-stack up " + robot + "`"
        ) from exc
    declared = [DeclareLaunchArgument(name, default_value=robot if name == "config" else default, description=text)
                for name, (default, text) in LAUNCH_ARGUMENTS.items()]
    return LaunchDescription([*declared, OpaqueFunction(function=_actions, args=[robot])])
