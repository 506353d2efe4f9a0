"""Start the aloha stack on a real ROS 2 install: `ros2 launch plan_stack aloha.launch.py`.

Nodes and parameters come from config/aloha.yaml, the same file `plan-stack up aloha` reads.
"""
from plan_stack.launch_support import generate_launch_description_for


def generate_launch_description():
    return generate_launch_description_for("aloha")
