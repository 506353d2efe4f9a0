"""ROS domain reservation: held domains are never handed out twice; closing the handle frees one."""
from __future__ import annotations

from plan_stack.ros.domains import reserve_domain


def test_reservations_are_distinct_and_released_on_close():
    a, ha = reserve_domain(150, 200, start=150)
    b, hb = reserve_domain(150, 200, start=150)
    assert a != b and 150 <= a <= 200 and 150 <= b <= 200
    ha.close()
    c, hc = reserve_domain(150, 200, start=a)
    assert c == a  # free again
    hb.close()
    hc.close()
