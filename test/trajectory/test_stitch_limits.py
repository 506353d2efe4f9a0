"""The stitcher's limits from its config: per-joint values, discrete bounds, the bridge's check, Ruckig's margin."""
from __future__ import annotations

import numpy as np

from plan_stack.trajectory.limits import Limits
from plan_stack.trajectory.stitch_limits import (
    accept_limits,
    discrete_bounds,
    interpolation_safe,
    joint_columns,
    limits_from_config,
)

NAMES = ("j0", "j1", "j2", "grip")


def test_per_joint_limits_accept_all_or_continuous_lengths(stitcher_config):
    all_joints, _ = limits_from_config(stitcher_config(v_max=(1.0, 2.0, 3.0, 99.0)))
    continuous, _ = limits_from_config(stitcher_config(v_max=(1.0, 2.0, 3.0)))
    np.testing.assert_array_equal(all_joints.v_max, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(continuous.v_max, [1.0, 2.0, 3.0])


def test_columns_split_continuous_and_discrete_joints_in_config_order(stitcher_config):
    cidx, didx = joint_columns(stitcher_config(joint_names=("grip", "j0", "j1"), discrete_joints=("grip",)))
    assert cidx.tolist() == [1, 2] and didx.tolist() == [0]


def test_discrete_joints_have_position_bounds_only_when_the_limits_list_every_joint(stitcher_config):
    lo, hi = discrete_bounds(stitcher_config(q_min=(-1.0, -1.0, -1.0, 0.0), q_max=(1.0, 1.0, 1.0, 1.0)))
    assert lo.tolist() == [0.0] and hi.tolist() == [1.0]
    lo, hi = discrete_bounds(stitcher_config(q_min=(-1.0, -1.0, -1.0), q_max=(1.0, 1.0, 1.0)))
    assert lo.tolist() == [-np.inf] and hi.tolist() == [np.inf]


def test_the_bridge_check_uses_the_bridges_limits_where_given_else_the_stitchers(stitcher_config):
    own = accept_limits(stitcher_config(discrete_rate=3.0))
    np.testing.assert_array_equal(own.v_max, [2.0, 2.0, 2.0, 3.0])  # the discrete joint's rate as its velocity
    assert np.isinf(own.a_max[3]) and np.isinf(own.j_max).all()
    given = accept_limits(stitcher_config(bridge_v_max=(1.0, 1.0, 1.0, 1.0)))
    np.testing.assert_array_equal(given.v_max, [1.0, 1.0, 1.0, 1.0])


def test_ruckigs_limits_leave_room_for_the_quintic_and_never_fall_below_half():
    lim = Limits.create(2, 2.0, 10.0, 100.0, -1.0, 1.0)
    safe = interpolation_safe(lim, 0.02)
    assert (safe.v_max < lim.v_max).all() and (safe.a_max < lim.a_max).all()
    assert (safe.q_min > lim.q_min).all() and (safe.q_max < lim.q_max).all()
    coarse = interpolation_safe(lim, 1.0)  # a huge period: the margins would exceed the limits
    np.testing.assert_array_equal(coarse.v_max, 0.5 * lim.v_max)
    np.testing.assert_array_equal(coarse.a_max, 0.5 * lim.a_max)
