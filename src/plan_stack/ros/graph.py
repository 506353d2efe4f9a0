"""What the ROS graph says about a topic (queries of the running graph)."""
from __future__ import annotations

from rclpy.node import Node

__all__ = ["publisher_nodes"]


def publisher_nodes(node: Node, topic: str) -> list[str]:
    """The fully qualified names of the nodes publishing the resolved `topic`, sorted (a graph query: cheap,
    but not free; call it periodically, not per message)."""
    infos = node.get_publishers_info_by_topic(topic)
    return sorted(f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in infos)
