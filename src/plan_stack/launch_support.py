"""Build a launch description from config/<robot>.yaml (real ROS 2 installs).

The launch files in launch/ are one line each around this, so `ros2 launch`
starts exactly the nodes and parameters `plan-stack up` starts. `launch` and
`launch_ros` come with an apt ROS 2 install; they are imported only here.
"""
from __future__ import annotations

from plan_stack.robot_config import load_robot_config


def generate_launch_description_for(robot: str):
    """LaunchDescription with one launch_ros Node per entry of config/<robot>.yaml."""
    try:
        from launch import LaunchDescription
        from launch_ros.actions import Node
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"{exc}: launch files need ROS 2 `launch` and `launch_ros` (apt install "
            "ros-$ROS_DISTRO-launch-ros); without them use `plan-stack up " + robot + "`"
        ) from exc
    cfg = load_robot_config(robot)
    return LaunchDescription([
        Node(
            package="plan_stack",
            executable=spec.executable,
            name=spec.name,
            parameters=[spec.parameters],
            remappings=list(spec.remappings.items()),
            output="screen",
            emulate_tty=True,
        )
        for spec in cfg.nodes
    ])
