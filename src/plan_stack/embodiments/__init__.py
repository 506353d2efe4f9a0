"""Embodiments: simulators, bridges and scripted experts (aloha/, franka/, drive/).

Shared ROS-free pieces live at this level: joint-trajectory interpolation
(`joint_trajectory`) and trajectory validation against joint limits
(`validation`), so every bridge and simulator follows the same rules.
"""
