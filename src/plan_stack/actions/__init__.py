"""Action chunks, ROS-free: flow-matching action head,
Real-Time Chunking (RTC), demonstrations and training. The chunker node
(`chunker_node.py`) is the only module here that imports rclpy.

Nothing heavy is imported here; import the submodules you need.
"""
