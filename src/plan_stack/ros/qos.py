"""The named QoS profiles every plan_stack node chooses from, by meaning (`qos_by_name` for YAML)."""
from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

from plan_stack.config import ConfigError

#: Raw sensor streams (cameras, joint states): best effort, keep last 5.
SENSOR_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=5,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
#: Observations, plans, features, chunks, trajectories: reliable, keep last 10.
RELIABLE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
#: Latched state (camera intrinsics, robot description): late joiners get the last one.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
#: Diagnostics, as diagnostic_updater publishes them.
DIAGNOSTICS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10)

QOS_BY_NAME = {
    "sensor": SENSOR_QOS,
    "sensor_data": qos_profile_sensor_data,
    "reliable": RELIABLE_QOS,
    "latched": LATCHED_QOS,
}


def qos_by_name(name: str) -> QoSProfile:
    """QoS profile for a config string (`sensor`, `sensor_data`, `reliable`, `latched`)."""
    try:
        return QOS_BY_NAME[name]
    except KeyError:
        raise ConfigError(f"qos: unknown profile {name!r} (known: {sorted(QOS_BY_NAME)})") from None
