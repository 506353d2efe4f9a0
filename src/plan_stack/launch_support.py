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
* `respawn`: `true` (default) restarts a node that crashed, after
  `respawn_delay` seconds.

What happens when a node process ends is `node_processes.after_exit`, the
policy `plan-stack up` follows too (`exit_response` words it for launch): a
crash is respawned (launch's own `respawn`); a node that refused its
parameters (exit status 2) stops the whole launch (an `OnProcessExit` handler
emits `Shutdown` during the respawn delay, so launch does not start it again:
`respawn_delay` must be above 0); a node stopped on request (status 0,
SIGINT, SIGTERM) is not respawned (`ShutdownProcess` for that process).

A node's `nice` reaches its process as the environment variable
`node_processes.NICE_ENV`, which the node applies to itself at start-up: no
`prefix`, so launch's `--launch-prefix` still applies to every node and its
output is labelled with the node's name (`exec_name`), not `nice`.

`launch` and `launch_ros` come with an apt ROS 2 install; they are imported
only inside the functions. `launch_plan` and `exit_response` hold the logic
without them.
"""
from __future__ import annotations

from typing import Any

from plan_stack.config import ConfigError
from plan_stack.node_processes import NICE_ENV, AfterExit, after_exit, describe_exit
from plan_stack.robot_config import load_robot_config

__all__ = ["LAUNCH_ARGUMENTS", "launch_plan", "exit_response", "parse_flag", "generate_launch_description_for"]

#: name -> (default, description); `config`'s default is the launch file's robot.
LAUNCH_ARGUMENTS: dict[str, tuple[str, str]] = {
    "config": ("", "robot name (config/<name>.yaml) or path to a robot YAML"),
    "use_sim_time": ("", "true/false for every node; empty keeps the config's value (false on a real robot)"),
    "rviz": ("false", "true: also start rviz2 with config/plan_stack.rviz"),
    "respawn": ("true", "true: restart a node that crashed (after respawn_delay s); a node that refused its "
                        "parameters (exit status 2) stops the launch"),
    "respawn_delay": ("2.0", "seconds (> 0) before a node that crashed is restarted"),
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
    """Keyword arguments of one `launch_ros.actions.Node` per node of the config (`_actions` adds the exit
    handler). `exec_name` labels the node's output with its name; a `nice` travels in `additional_env`."""
    cfg = load_robot_config(config, use_sim_time=parse_flag("use_sim_time", use_sim_time))
    again = bool(parse_flag("respawn", respawn))
    try:
        delay = float(respawn_delay)
    except ValueError:
        delay = float("nan")
    if not delay > 0.0:
        # launch starts a respawn at once without a delay, before any exit handler has run
        raise ConfigError(f"respawn_delay: expected seconds above 0, got {respawn_delay!r}")
    return [dict(package="plan_stack", executable=spec.executable, name=spec.name, exec_name=spec.name,
                 parameters=[dict(spec.parameters)], remappings=list(spec.remappings.items()),
                 output="screen", emulate_tty=True, respawn=again, respawn_delay=delay,
                 **({"additional_env": {NICE_ENV: str(spec.nice)}} if spec.nice else {}))
            for spec in cfg.nodes]


def exit_response(name: str, returncode: int, respawn: bool, respawn_delay: float) -> tuple[AfterExit, str]:
    """What the launch does when node `name`'s process ends with `returncode` (`after_exit`), and the line it
    logs. `respawn`: whether launch's own respawn is on for the node."""
    action = after_exit(returncode)
    what = f"node {name} {describe_exit(returncode)}"
    if action is AfterExit.STOP_ALL:
        return action, f"{what}: it refused its parameters (see its log above); stopping the launch"
    if action is AfterExit.STOPPED:
        return action, f"{what}: it stopped on request and is not restarted"
    if respawn:
        return action, f"{what}; restarting it in {respawn_delay:g} s"
    return action, f"{what}; not restarted (respawn:=false)"


def _exit_handler(name: str, respawn: bool, respawn_delay: float):
    """An `on_exit` callable for one node's launch action: the launch actions of `exit_response`."""
    from launch.actions import EmitEvent, LogInfo
    from launch.events import Shutdown, matches_action
    from launch.events.process import ShutdownProcess

    def on_exit(event, context):
        if context.is_shutdown:  # the launch is stopping: every node ends, nothing to decide or say
            return None
        action, message = exit_response(name, event.returncode, respawn, respawn_delay)
        if action is AfterExit.STOP_ALL:
            return [LogInfo(msg=message), EmitEvent(event=Shutdown(reason=message))]
        if action is AfterExit.STOPPED and respawn:
            # launch would respawn it after the delay: ending the action's shutdown future prevents that
            stop_respawn = ShutdownProcess(process_matcher=matches_action(event.action))
            return [LogInfo(msg=message), EmitEvent(event=stop_respawn)]
        return [LogInfo(msg=message)]

    return on_exit


def _actions(context, robot: str):
    from launch.actions import LogInfo
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    arg = {name: LaunchConfiguration(name).perform(context) for name in LAUNCH_ARGUMENTS}
    plan = launch_plan(arg["config"] or robot, arg["use_sim_time"], arg["respawn"], arg["respawn_delay"])
    actions = [Node(**kwargs, on_exit=_exit_handler(kwargs["name"], kwargs["respawn"], kwargs["respawn_delay"]))
               for kwargs in plan]
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
        import launch_ros  # noqa: F401  # its Node actions are built in _actions, once launch runs it
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
