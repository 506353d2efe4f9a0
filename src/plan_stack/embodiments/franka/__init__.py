"""Franka (Panda / FR3) embodiment: tabletop simulator, bridge (7 joints + gripper width)."""
