"""Start the drive stack on a real ROS 2 install: `ros2 launch plan_stack drive.launch.py`.

Nodes and parameters come from config/drive.yaml, the same file `plan-stack up drive` reads.
"""
from plan_stack.launch_support import generate_launch_description_for


def generate_launch_description():
    return generate_launch_description_for("drive")
