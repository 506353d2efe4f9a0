"""Bimanual ViperX ALOHA: MuJoCo simulator, bridge and scripted expert.

The library modules (`model`, `sim`, `expert`, `annotation`, `bridge`) import
no ROS; the nodes (`sim_node`, `bridge_node`) are thin shells around them.
"""
