"""The stitcher node's policy (`Stitcher` + `StartState`, initial_state bridge) against the bridge's decisions
(`ArmBridge`) on one simulated clock, with config/aloha.yaml's parameters: what reaches the bridge and what it
says back arrive with chosen delays, in order, as over one reliable DDS topic each (no DDS here; the graph over
DDS is test_stitcher_bridge_dds.py).

The defects these keep fixed: a trajectory the bridge refused in a stream of chunks faster than the stitcher's
acknowledgement timeout was never noticed (each new publication restarted the timeout), so every following
trajectory was stitched onto the refused one and refused in turn, for as long as the stream lasted; a trajectory
the bridge accepted late (joined to its present reference over `late_join_s`) was reported as ours and the
stitcher kept stitching onto the curve it had published, not the one the bridge followed.
"""
from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import pytest

from plan_stack.config import field_kinds, from_mapping
from plan_stack.embodiments.arm_bridge import ArmBridge, ArmBridgeSettings
from plan_stack.embodiments.registry import joint_limits
from plan_stack.robot_config import load_robot_config
from plan_stack.robots import profile
from plan_stack.stamps import s_to_ns
from plan_stack.trajectory.alignment import Chunk
from plan_stack.trajectory.config import StitcherConfig, StitcherNodeConfig
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.start_state import StartState, same_curve
from plan_stack.trajectory.stitching import Stitcher

DT = 0.02


def _aloha():
    nodes = {n.name: n for n in load_robot_config("aloha").nodes}
    params = nodes["stitcher"].parameters
    cfg = from_mapping(StitcherConfig, {k: v for k, v in params.items() if k in field_kinds(StitcherConfig)})
    node_cfg = from_mapping(StitcherNodeConfig, {k: v for k, v in params.items()
                                                 if k in field_kinds(StitcherNodeConfig)})
    assert node_cfg.initial_state == "bridge"
    return cfg, node_cfg, joint_limits(profile("aloha"), nodes["aloha_bridge"].parameters)


class Graph:
    """The stitcher node's chunk handling and the bridge node's command handling on one event queue.

    `delay(k)` is how long trajectory k (from 0) takes to reach the bridge; reports (`active_trajectory`) and,
    with `bridge_state`, refusals take `report_s` back. Trajectories reach the bridge in order."""

    def __init__(self, seed: int = 0, bridge_state: bool = True, report_s: float = 0.005) -> None:
        self.cfg, node_cfg, limits = _aloha()
        self.names = self.cfg.joint_names
        self.rng = np.random.default_rng(seed)
        self.stitcher = Stitcher(self.cfg, lead_s=node_cfg.point_lead_s)
        self.stitcher.prepare(50)
        self.start = StartState(self.stitcher, node_cfg)
        # the bridge node's settings for config/aloha.yaml (command_latency_s: its stops' lead; late_join_s 0.1)
        self.bridge = ArmBridge(self.names, limits, ArmBridgeSettings(0.5, 0.02, 1.0, 0.05, 0.8, 10.0, 0.03,
                                                                      late_join_s=0.1),
                                np.ones(len(self.names), bool), np.full(len(self.names), np.inf))
        self.lo, self.hi = np.asarray(self.cfg.q_min), np.asarray(self.cfg.q_max)
        self.bridge_state, self.report_s = bridge_state, report_s
        self.events: list = []
        self._order = 0
        self._last_delivery = 0.0
        self.published: list[Trajectory] = []
        self.verdicts: dict[int, str] = {}  # trajectory index -> "" (accepted), "late" (joined late) or why refused
        self.now = 0.0
        self.bridge.on_joint_state(0.5 * (self.lo + self.hi), 0.0)
        self._push(1e-3, "report", self.bridge.hold(0.0))
        if bridge_state:
            self._push(1e-3, "state", None)

    def _push(self, t_s: float, kind: str, payload) -> None:
        self._order += 1
        heapq.heappush(self.events, (t_s, self._order, kind, payload))

    def run_until(self, t_s: float) -> None:
        while self.events and self.events[0][0] <= t_s:
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == "report":
                self.start.on_active_trajectory(payload, now)
            elif kind == "state":
                self.start.on_bridge_state(True, "", payload)
            else:
                k, msg = payload
                acc = self.bridge.accept(msg, now)
                if acc.verdict.ok:
                    self.verdicts[k] = "late" if acc.verdict.message else ""
                    self._push(now + self.report_s, "report", self.bridge.in_force)
                else:
                    self.verdicts[k] = acc.verdict.message
                    if self.bridge_state:
                        self._push(now + self.report_s, "state", (s_to_ns(msg.stamp_s), acc.verdict.message))
        self.now = t_s

    def chunk(self, delay_s: float = 0.001) -> int:
        """A rough chunk from where the bridge's reference is, handled as the node does at `now`; its trajectory
        reaches the bridge `delay_s` later. The trajectory's index."""
        now, rng, D = self.now, self.rng, len(self.names)
        self.start.before_chunk(now)
        here = self.bridge.follower.peek(now)
        v = np.cumsum(rng.normal(0.0, 0.5, (50, D)), axis=0)
        ref = here.positions + np.cumsum(v * DT, axis=0) - v[0] * DT
        ref[rng.integers(1, 50):] += 0.3 * rng.choice([-1.0, 1.0], D)
        chunk = Chunk(now, self.names, DT, np.clip(ref, self.lo, self.hi))
        self.start.require_state()
        res = self.stitcher.process(chunk, now, self.start.initial(now, chunk))
        assert res.trajectory is not None, res.messages
        tr = res.trajectory
        msg = dataclasses.replace(tr, stamp_s=tr.t0_s - res.lead_s, times_s=tr.times_s + res.lead_s, dt_s=None)
        self.start.on_published(s_to_ns(msg.stamp_s), now)
        k = len(self.published)
        self.published.append(msg)
        self._last_delivery = max(self._last_delivery, now + delay_s)
        self._push(self._last_delivery, "trajectory", (k, msg))
        return k

    def stream(self, n: int, late: dict[int, float] | None = None, period_s: float = 0.1) -> None:
        """`n` chunks every `period_s` (+ up to a sample, off the output grid); trajectory k of them reaches the
        bridge `late[k]` after it was published (1 ms if not given)."""
        late = late or {}
        for i in range(n):
            self.run_until(self.now + period_s + self.rng.uniform(0.0, DT))
            self.chunk(late.get(i, 0.001))
        self.run_until(self.now + 1.0)

    def refused(self) -> list[int]:
        return [k for k, why in sorted(self.verdicts.items()) if why not in ("", "late")]


@pytest.mark.parametrize("bridge_state", [False, True])
def test_after_a_late_trajectory_is_refused_the_stream_is_accepted_again(bridge_state):
    """A stall of 0.3 s delivers one trajectory after its first new point was due; the join from the bridge's
    present reference to it is too sharp even over late_join_s, so the bridge refuses it (legitimately: no
    stitcher sees a transport delay coming). The trajectories stitched onto it before the stitcher knows are
    refused too, and no more: with bridge_state the refusal is known when it arrives, without it once the
    acknowledgement timeout has run out from that publication (chunks every 0.1 s, twice as often as the 0.2 s
    timeout: the timeout must not restart with each newer publication, as it did)."""
    g = Graph(seed=3, bridge_state=bridge_state)
    g.stream(40, late={10: 0.3})
    refused = g.refused()
    assert refused and refused[0] == 10, (refused, g.verdicts)
    # only what was published before the stitcher could know: the stall queued two behind the late one; the
    # timeout (0.2 s from trajectory 10, published 0.1 s apart) lets one or two more go out
    assert refused[-1] <= (12 if bridge_state else 14), refused
    assert len(g.verdicts) == 40 and all(g.verdicts[k] == "" for k in range(refused[-1] + 1, 40)), g.verdicts


def test_a_trajectory_joined_late_is_the_start_of_the_next():
    """A trajectory reaches the bridge 0.13 s after it was published, after its first new point was due: the
    bridge joins it from its present reference over late_join_s and reports the curve it follows. That report
    is ours but not the curve the stitcher published: the next trajectory starts on the bridge's, and the
    bridge accepts it as it is (stitched onto the published curve instead, the bridge's check of its join from
    the reference the bridge holds refused it, and only a late join of its own saved it)."""
    g = Graph(seed=0)
    g.stream(12)
    k = g.chunk(delay_s=0.13)
    g.run_until(g.now + 0.13 + 0.01)
    assert g.verdicts[k] == "late"  # joined late, and reported
    report = g.start.executing
    assert g.start.executing_ours and not same_curve(g.published[k], report)
    nxt = g.chunk()  # at once, inside the join
    assert g.stitcher.active is not None
    g.run_until(g.now + 0.01)
    assert g.verdicts[nxt] == "", g.verdicts[nxt]
    g.stream(10)
    assert not g.refused() and all(v == "" for k2, v in g.verdicts.items() if k2 > k), g.verdicts


def test_the_bridge_reports_the_curve_it_follows_and_the_stitcher_keeps_its_own_when_they_agree():
    """`active_trajectory` carries what the controllers follow (`ArmBridge.in_force`: the command's points from
    the reference at its activation); sampled, it is the bridge's reference. When it is our published curve
    (delivered in time), the stitcher keeps its own trajectory on its grid."""
    g = Graph(seed=1)
    g.stream(5)
    for _ in range(3):  # a stream again after the pause, the last stitched onto the one before
        g.run_until(g.now + 0.1)
        g.chunk()
    g.run_until(g.now + 0.01)
    report = g.bridge.in_force
    assert report is not None and report.stamp_s == pytest.approx(g.published[-1].stamp_s)
    assert g.start.executing_ours and g.stitcher.active.dt_s is not None  # our own grid trajectory
    assert same_curve(g.stitcher.active, g.start.executing)
    for t in g.now + np.arange(60) * 0.0137:  # the follower steps forward in time, as the controllers do
        ref = g.bridge.follower.sample(t)
        q, v, a = report.sample(np.array([t]))
        np.testing.assert_allclose(q[0], ref.positions, atol=1e-9)
        np.testing.assert_allclose(v[0], ref.velocities, atol=1e-7)
        np.testing.assert_allclose(a[0], ref.accelerations, atol=1e-5)
