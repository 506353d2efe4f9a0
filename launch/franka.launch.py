"""Start the franka stack on a real ROS 2 install: `ros2 launch plan_stack franka.launch.py`.

Nodes and parameters come from config/franka.yaml, the same file `plan-stack up franka` reads.
"""
from plan_stack.launch_support import generate_launch_description_for


def generate_launch_description():
    return generate_launch_description_for("franka")
