"""Start the drive stack on the real robot (no simulator): `ros2 launch plan_stack drive_real.launch.py`.

Nodes and parameters come from config/drive_real.yaml (same as `drive.launch.py config:=drive_real`);
arguments as in plan_stack.launch_support (use_sim_time, config, rviz, respawn).
"""
from plan_stack.launch_support import generate_launch_description_for


def generate_launch_description():
    return generate_launch_description_for("drive_real")
