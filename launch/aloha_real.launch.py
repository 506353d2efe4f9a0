"""Start the aloha stack on the real robot (no simulator): `ros2 launch plan_stack aloha_real.launch.py`.

Nodes and parameters come from config/aloha_real.yaml (same as `aloha.launch.py config:=aloha_real`);
arguments as in plan_stack.launch_support (use_sim_time, config, rviz, respawn).
"""
from plan_stack.launch_support import generate_launch_description_for


def generate_launch_description():
    return generate_launch_description_for("aloha_real")
