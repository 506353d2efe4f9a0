"""Replaying a bag's controller commands on the joint-controlled ALOHA (ROS-free; a real MCAP bag, real physics)."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.embodiments.aloha.bridge import ARM_CONTROLLER_JOINTS
from plan_stack.embodiments.aloha.model import START_ARM_POSE
from plan_stack.eval.episodes.command_replay import ReplayError, main, replay
from plan_stack.ros.trajectory import trajectory_to_cdr
from plan_stack.trajectory.core import Trajectory

JOINTS = ARM_CONTROLLER_JOINTS["right_arm"]
ROTATE = JOINTS.index("right_wrist_rotate")


def _wrist_turn(amplitude: float, duration_s: float, stamp_s: float) -> Trajectory:
    """A minimum-jerk turn of the right wrist_rotate from the start pose: peak speed 1.875 A / T."""
    t = np.linspace(0.0, duration_s, 51)
    u = t / duration_s
    s = 10 * u**3 - 15 * u**4 + 6 * u**5
    ds = (30 * u**2 - 60 * u**3 + 30 * u**4) / duration_s
    dds = (60 * u - 180 * u**2 + 120 * u**3) / duration_s**2
    q = np.tile(np.asarray(START_ARM_POSE, dtype=float), (len(t), 1))
    v, a = np.zeros_like(q), np.zeros_like(q)
    q[:, ROTATE] += amplitude * s
    v[:, ROTATE], a[:, ROTATE] = amplitude * ds, amplitude * dds
    return Trajectory(JOINTS, stamp_s, t, q, v, a)


def _bag(path, trajectories) -> None:
    """An MCAP bag as the recorder writes it: the serialized JointTrajectory at its receipt time (on the right
    arm's controller unless the trajectory names the left arm's joints)."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conns = {arm: w.add_connection(f"/{arm}_arm_controller/joint_trajectory",
                                       "trajectory_msgs/msg/JointTrajectory", typestore=ts)
                 for arm in ("left", "right")}
        for received_s, traj in trajectories:
            arm = traj.joint_names[0].split("_")[0]
            w.write(conns[arm], int(received_s * 1e9), trajectory_to_cdr(traj))


def test_the_replayed_rig_follows_the_commands(tmp_path):
    bag = tmp_path / "run"
    _bag(bag, [(0.1, _wrist_turn(0.6, 0.6, 0.1))])
    rows = {r["joint"]: r for r in replay(bag, seed=3)}
    assert set(rows) == {j for js in ARM_CONTROLLER_JOINTS.values() for j in js if not j.endswith("_gripper")}
    turn = rows["right_wrist_rotate"]
    commanded = 1.875 * 0.6 / 0.6
    # the servo tracks the turn: its peak speed is the commanded one within the servo's overshoot, mid-turn
    assert 0.9 * commanded < turn["peak_rad_s"] < 1.3 * commanded
    assert 0.2 < turn["peak_t_s"] < 0.8
    assert turn["steps_over"] == 0 and turn["peak_on_grid_rad_s"] <= turn["peak_rad_s"]
    assert 0.0 < turn["peak_tracking_error_rad"] < 0.1  # a free turn is followed closely
    assert np.isnan(turn["bag_peak_rad_s"])  # no /joint_states in this bag
    assert rows["left_wrist_rotate"]["peak_rad_s"] < 0.05 * commanded  # nothing commanded the left arm


def test_a_peak_from_the_arms_colliding_is_attributed_to_their_contact(tmp_path):
    """Both arms driven into each other (shoulder 0.15, elbow -0.68): the peaks they cause name the geoms that
    touched; the plain wrist turn of the other test names none."""
    bag = tmp_path / "run"
    meet = np.array([START_ARM_POSE[0], 0.15, -0.68, *START_ARM_POSE[3:]])
    moves = []
    for arm in ("left", "right"):
        t = np.array([0.0, 0.8])
        q = np.stack([np.asarray(START_ARM_POSE, dtype=float), meet])
        moves.append((0.1, Trajectory(ARM_CONTROLLER_JOINTS[f"{arm}_arm"], 0.1, t, q, np.zeros_like(q),
                                      np.zeros_like(q))))
    _bag(bag, moves)
    rows = {r["joint"]: r for r in replay(bag, seed=3)}
    touched = [r for r in rows.values() if r["arm_contact"]]
    assert touched and all("vx300s_left/" in r["arm_contact"] and "vx300s_right/" in r["arm_contact"]
                           for r in touched)
    assert all(r["peak_t_s"] > 0.1 for r in touched)  # during the motion, not at the start
    # pressed into each other, the servos fall behind their references: what the bridge's protective stop sees
    assert max(r["peak_tracking_error_rad"] for r in rows.values()) > 0.2
    plain = tmp_path / "turn"
    _bag(plain, [(0.1, _wrist_turn(0.6, 0.6, 0.1))])
    assert not any(r["arm_contact"] for r in replay(plain, seed=3))


def test_damping_is_applied_to_the_named_joint(tmp_path):
    bag = tmp_path / "run"
    _bag(bag, [(0.1, _wrist_turn(0.6, 0.3, 0.1))])
    free = {r["joint"]: r for r in replay(bag, seed=3)}["right_wrist_rotate"]
    damped = {r["joint"]: r for r in replay(bag, seed=3, damping={"right_wrist_rotate": 5.0})}["right_wrist_rotate"]
    assert damped["peak_rad_s"] < free["peak_rad_s"]  # heavy damping lags the P servo


def test_what_cannot_be_replayed_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty"
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    with Writer(empty, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=get_typestore(Stores.ROS2_KILTED))
    with pytest.raises(ReplayError, match="no /<arm|gripper>_controller"):
        replay(empty, seed=0)
    assert main([str(empty), "--seed", "0"]) == 2
    bag = tmp_path / "run"
    _bag(bag, [(0.1, _wrist_turn(0.6, 0.6, 0.1))])
    for bad in ("right_gripper=1", "right_wrist=1", "right_wrist_rotate=-1", "right_wrist_rotate=x"):
        assert main([str(bag), "--seed", "0", "--damping", bad]) == 2
        assert "damping" in capsys.readouterr().err
