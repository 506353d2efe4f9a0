"""Named QoS profiles."""
from __future__ import annotations

import pytest

from plan_stack.config import ConfigError
from plan_stack.ros.qos import SENSOR_QOS, qos_by_name


def test_qos_by_name_rejects_unknown_profiles():
    assert qos_by_name("sensor") is SENSOR_QOS
    with pytest.raises(ConfigError, match="qos: unknown profile 'fastest'"):
        qos_by_name("fastest")
