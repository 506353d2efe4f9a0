"""Which state a stitched trajectory starts from, without ROS.

The stitcher joins each new trajectory onto the one being executed (`Stitcher.active`). When there is none,
or the robot is not executing it, the start must come from elsewhere; `StitcherNodeConfig.initial_state` says
where:

* `joint_states`: the measured state (positions and velocities, no acceleration), if it is no older than
  `joint_state_timeout_s`. The active trajectory is forgotten (re-anchoring) when the bridge refused it or
  the measured joints have departed from it by more than `reanchor_tolerance`.
* `bridge`: what the bridge reports executing on `active_trajectory`, sampled `command_latency_s` ahead. A
  trajectory of ours that the bridge refused, or did not report within the acknowledgement timeout, is
  replaced by the bridge's trajectory in force. No start at all before the bridge has reported (`no_state`):
  a bridge without a state refuses a start taken from joint_states.
* `chunk`: the chunk's first sample at rest, before the first trajectory only (open-loop simulation).

The bridge reports on `active_trajectory` the curve it follows (`trajectory.core.followed`: a command's points
from the reference at its activation on). A report of our last trajectory that is not the curve we published
(the bridge joined it late) replaces it as the trajectory to stitch onto, so both agree on the start.

Whatever `initial_state`, the bridge's `bridge_state` (`on_bridge_state`) says when it refuses every command (the
node passes a protective stop): no chunk becomes a trajectory then (`paused`, ChunkError `paused`), and once it
follows commands again the next trajectory starts from what it holds (initial_state bridge) or from the measured
state. It also names the last command refused: a refusal of one of ours re-anchors the next chunk at
once, as an aborted goal does.

`StartState` keeps what these rules need (the measured state, the bridge's trajectory in force, the
trajectory published last and whether the bridge acknowledged it) and decides; the node converts
messages, calls it and reports what it returns. Times are float seconds since the node's epoch; the stamps
compared to recognise our own trajectory are integer nanoseconds since that epoch (exact).

Threads: `on_refused` may be called from any thread (an action client's result callback); every other
method from the one thread that handles chunks, joint states and active_trajectory (the node's executor).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import threading

import numpy as np

from plan_stack.config import ConfigError
from plan_stack.stamps import s_to_ns
from plan_stack.trajectory.alignment import Chunk, ChunkError
from plan_stack.trajectory.config import InitialState, StitcherNodeConfig
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.stitch_limits import joint_columns
from plan_stack.trajectory.stitching import Stitcher

__all__ = ["ACK_HISTORY", "Anchor", "InitialState", "Reanchor", "StartState"]

#: Reports of our trajectories by the bridge whose delays set the acknowledgement timeout.
ACK_HISTORY = 20
#: A reported trajectory is the one we published last when their stamps agree within this (ns): the same
#: stamp, less the round trip through float seconds.
_SAME_STAMP_NS = 1000
#: Published trajectories remembered until the bridge reports or refuses them (a refusal names one by stamp).
_UNACKED_MAX = 64
#: A report of ours is the curve we published when its points agree with ours to this (q, v, a): the same
#: numbers, less the round trip of the times through integer nanoseconds (the first knot, at the bridge's
#: activation, is our curve evaluated there).
_SAME_CURVE_TOL = (1e-6, 1e-5, 1e-3)

#: (state q, v, a) [D] in config joint order: a stitch's start
State = tuple[np.ndarray, np.ndarray, np.ndarray]


class Anchor(enum.Enum):
    """What the next trajectory starts from once the active one was dropped."""

    BRIDGE = "the bridge's trajectory in force"
    MEASURED = "the measured state"


def same_curve(ours: Trajectory, report: Trajectory) -> bool:
    """True when `report`, a bridge's account of `ours` (`core.followed`: our points due after its activation,
    preceded by its reference there), lies on `ours` as `Trajectory.sample` evaluates it: its first point (the
    one a bridge adds) and its last (ours), positions, velocities and accelerations (`_SAME_CURVE_TOL`)."""
    if report.velocities is None or report.accelerations is None or ours.joint_names != report.joint_names:
        return False
    ends = [0, len(report.times_s) - 1]
    q, v, a = ours.sample(report.stamp_s + report.times_s[ends])
    return all(np.abs(x - y[ends]).max(initial=0.0) <= tol for x, y, tol in
               zip((q, v, a), (report.positions, report.velocities, report.accelerations), _SAME_CURVE_TOL))


@dataclasses.dataclass(frozen=True)
class Reanchor:
    """The active trajectory was dropped before a chunk (`StartState.before_chunk`): onto what, and why."""

    onto: Anchor
    why: str

    @property
    def log_text(self) -> str:
        """What the node logs (the same text repeats while a bridge refuses everything)."""
        if self.onto is Anchor.BRIDGE:
            return f"stitching onto what the bridge executes: {self.why}"
        return f"re-anchoring to the measured state: {self.why}"

    @property
    def report_text(self) -> str:
        """What the node's `tracking` diagnostic says."""
        if self.onto is Anchor.BRIDGE:
            return f"stitching onto what the bridge executes: {self.why}"
        return f"re-anchored to the measured state: {self.why}"


class StartState:
    """The start-state policy of one stitcher (see the module doc); owns nothing but its bookkeeping.

    Raises ConfigError when `state_joint_names` or `state_scale` do not give one value per joint.
    """

    def __init__(self, stitcher: Stitcher, node_cfg: StitcherNodeConfig) -> None:
        cfg = stitcher.cfg
        n = len(cfg.joint_names)
        if node_cfg.state_joint_names and len(node_cfg.state_joint_names) != n:
            raise ConfigError(f"state_joint_names: {len(node_cfg.state_joint_names)} names for {n} joints")
        if node_cfg.state_scale and len(node_cfg.state_scale) != n:
            raise ConfigError(f"state_scale: {len(node_cfg.state_scale)} values for {n} joints")
        self.stitcher, self.cfg, self.node_cfg = stitcher, cfg, node_cfg
        ignored = set(node_cfg.reanchor_ignore_joints)
        self._reanchor_cols = np.array([i for i in joint_columns(cfg)[0] if cfg.joint_names[i] not in ignored],
                                       dtype=int)
        #: (stamp s, q, v) in stack units: the newest measured state
        self.measured: tuple[float, np.ndarray, np.ndarray] | None = None
        #: initial_state bridge: what the bridge executes (config order, our epoch) and whether it is ours
        self.executing: Trajectory | None = None
        self.executing_ours = False
        #: (stamp ns since the epoch, published at s) of the trajectory we published last
        self.sent: tuple[int, float] | None = None
        #: (stamp ns, published at s) of ours the bridge has neither reported nor refused yet, oldest first: the
        #: acknowledgement timeout runs from the oldest (a newer publication does not restart it)
        self._unacked: collections.deque[tuple[int, float]] = collections.deque(maxlen=_UNACKED_MAX)
        #: why the bridge refuses every command now (its bridge_state), None while it follows them
        self.paused: str | None = None
        self._resumed: str | None = None  # the pause that ended: the next chunk starts afresh
        #: the bridge publishes bridge_state, so it names each refusal: ours are not timed out then
        self.bridge_says_refusals = False
        #: the bridge has reported the trajectory we published last
        self.acked = False
        self._ack_delays: collections.deque[float] = collections.deque(maxlen=ACK_HISTORY)
        self._refused: str | None = None  # the bridge aborted our last goal (set from the action client's thread)
        self._refused_lock = threading.Lock()

    # --- inputs -----------------------------------------------------------------------

    def measure(self, q: np.ndarray, v: np.ndarray, now_s: float) -> None:
        """A measured state in joint_states units (config joint order; `v` empty when not measured), received at
        `now_s`: stored in stack units, q_stack = (q - state_offset) * state_scale (e.g. gripper metres -> 0..1)."""
        v = v if len(v) else np.zeros(len(q))
        if self.node_cfg.state_scale:
            scale = np.asarray(self.node_cfg.state_scale, dtype=float)
            q, v = (q - np.asarray(self.node_cfg.state_offset, dtype=float)) * scale, v * scale
        self.measured = (now_s, q, v)

    def on_active_trajectory(self, traj: Trajectory, now_s: float) -> bool:
        """The bridge's trajectory in force (stamped in our epoch, any joint order) reported at `now_s`.

        Raises TrajectoryError for a report that must never be stitched onto (`Stitcher.check_reported`).
        True when it is the first report of the trajectory we published last (the bridge follows us again).
        """
        traj = traj.reordered(self.cfg.joint_names)
        self.stitcher.check_reported(traj, now_s)
        sent = self.sent
        stamp_ns = s_to_ns(traj.stamp_s)
        self.executing = traj
        self.executing_ours = sent is not None and abs(stamp_ns - sent[0]) < _SAME_STAMP_NS
        k = self._unacked_index(stamp_ns)
        if k is not None:  # a report of one of ours: it and every earlier one are settled
            self._ack_delays.append(now_s - self._unacked[k][1])
            for _ in range(k + 1):
                self._unacked.popleft()
        acked_now = self.executing_ours and not self.acked
        self.acked = self.acked or self.executing_ours
        return acked_now

    def _unacked_index(self, stamp_ns: int) -> int | None:
        """Position in `_unacked` of our publication stamped `stamp_ns` (ns since the epoch), or None."""
        return next((i for i, (ns, _) in enumerate(self._unacked) if abs(stamp_ns - ns) < _SAME_STAMP_NS), None)

    def on_bridge_state(self, accepting: bool, reason: str, refused: tuple[int, str] | None) -> bool:
        """The bridge's bridge_state: whether it follows commands now (else `reason`: why it refuses every one)
        and the last command it refused as (its stamp in ns since the epoch, why), None if none. A refusal of one
        of ours not yet settled acts as `on_refused`. True when `paused` changed."""
        self.bridge_says_refusals = True
        if refused is not None:
            k = self._unacked_index(refused[0])
            if k is not None:
                for _ in range(k + 1):
                    self._unacked.popleft()
                self.on_refused(refused[1])
        was = self.paused
        self.paused = None if accepting else (reason or "the bridge refuses every command")
        if was is not None and self.paused is None:
            self._resumed = was
        return (was is None) != (self.paused is None)

    def on_refused(self, reason: str) -> None:
        """The bridge aborted our last goal (not for a newer one): it never executed it. Any thread."""
        with self._refused_lock:
            self._refused = reason

    @property
    def refused(self) -> str | None:
        """A refusal not yet acted on (the next chunk acts on it)."""
        return self._refused

    def on_published(self, stamp_ns: int, now_s: float) -> None:
        """We published a trajectory stamped `stamp_ns` (ns since the epoch) at `now_s`."""
        self.sent = (stamp_ns, now_s)
        self._unacked.append((stamp_ns, now_s))
        self.executing_ours = self.acked = False

    def reset(self) -> None:
        """Time went back: the active trajectory, the measured state, the bridge's report and any refusal
        belong to the old world."""
        self.stitcher.reset()
        self.measured = None
        with self._refused_lock:
            self._refused = None
        self.executing, self.executing_ours, self.sent, self.acked = None, False, None, False
        self._unacked.clear()
        self._resumed = None  # a pause stays until the bridge says otherwise (its clock reset ends a stop)

    def ack_timeout_s(self) -> float:
        """`bridge_ack_timeout_s`, or twice the slowest of the recent reports when a loaded machine makes the
        bridge slower than that (a late report must not be taken for a refusal)."""
        return max(self.node_cfg.bridge_ack_timeout_s, 2.0 * max(self._ack_delays, default=0.0))

    # --- before each chunk --------------------------------------------------------------

    def before_chunk(self, now_s: float) -> Reanchor | None:
        """Drop or replace the active trajectory when the robot is not executing it; what was done, if anything."""
        if self.paused is not None:
            return None  # nothing is published while paused; the resume starts afresh
        if self._resumed is not None:
            return self._resume()
        if self.executing is not None:
            return self._follow_bridge(now_s)
        if self.node_cfg.initial_state == InitialState.JOINT_STATES:
            return self._reanchor(now_s)
        return None

    def require_state(self) -> None:
        """Raise ChunkError `paused` while the bridge refuses every command, `no_state` while initial_state bridge
        has no report of the bridge yet."""
        if self.paused is not None:
            raise ChunkError("paused", f"the bridge refuses every command ({self.paused}): no trajectory is "
                             "published until it follows commands again")
        if self.executing is None and self.node_cfg.initial_state == InitialState.BRIDGE:
            # at start-up and after a clock reset the bridge has no state until its first joint state (then
            # it reports its hold) and refuses anything started from joint_states that reached us first
            raise ChunkError("no_state", "waiting for the bridge to report its state on active_trajectory "
                             "(it has none before its first joint state, at start-up or after a clock reset)")

    def initial(self, now_s: float, chunk: Chunk) -> State | None:
        """The start for `Stitcher.process` when nothing active can be stitched onto; None: none known."""
        if self.node_cfg.initial_state == InitialState.CHUNK:
            if self.stitcher.active is not None:
                return None  # the robot holds where the last trajectory ended: start there, not at the chunk
            if set(chunk.joint_names) != set(self.cfg.joint_names) or len(chunk.positions) == 0:
                return None  # process() rejects the chunk with the reason
            q0 = chunk.positions[0][[chunk.joint_names.index(j) for j in self.cfg.joint_names]]
            return q0, np.zeros_like(q0), np.zeros_like(q0)
        if self.executing is not None:  # initial_state bridge: where the bridge's reference will be
            q, v, a = self.executing.sample(np.array([now_s + self.cfg.command_latency_s]))
            return q[0], v[0], a[0]
        if self.measured is None or now_s - self.measured[0] > self.node_cfg.joint_state_timeout_s:
            return None
        _, q, v = self.measured
        return q, v, np.zeros_like(q)  # joint_states carry no acceleration

    def _take_refused(self) -> str | None:
        with self._refused_lock:
            refused, self._refused = self._refused, None
        return refused

    def _resume(self) -> Reanchor | None:
        """The bridge follows commands again after refusing them all: what was ours is gone (held where the stop
        left it, or reset); start from what the bridge holds (initial_state bridge) or from the measured state."""
        why = f"the bridge follows commands again (it refused every one: {self._resumed})"
        self._resumed = None
        self._take_refused()
        self.sent = None
        self._unacked.clear()
        self.executing_ours = self.acked = False
        if self.executing is not None:
            self.stitcher.adopt(self.executing)
            return Reanchor(Anchor.BRIDGE, why)
        self.stitcher.reset()
        if self.node_cfg.initial_state == InitialState.JOINT_STATES:
            return Reanchor(Anchor.MEASURED, why)
        return None  # nothing reported since a clock reset: `require_state` waits for the bridge's report

    def _follow_bridge(self, now_s: float) -> Reanchor | None:
        """initial_state bridge: stitch onto what the bridge executes. When that is not the trajectory we published
        last and ours was refused (aborted goal, bridge_state) or, from a bridge that does not publish
        bridge_state, is not reported within `ack_timeout_s` of the oldest publication not reported since, the
        bridge's trajectory in force becomes the one to stitch onto.
        A report of ours that is not the curve we published (the bridge joined it late) replaces ours."""
        e = self.executing
        assert e is not None  # before_chunk calls this only with a report
        refused = self._take_refused()
        active = self.stitcher.active
        if self.executing_ours:
            if active is not e and (active is None or not same_curve(active, e)):
                self.stitcher.adopt(e)  # what the bridge follows of ours is the start
            return None
        if active is e:
            return None
        sent = self.sent
        pending = self._unacked[0][1] if self._unacked else None
        if not refused and not self.acked and pending is not None and (
                self.bridge_says_refusals or now_s - pending <= self.ack_timeout_s()):
            return None  # ours is still on its way to the bridge (one that names its refusals is believed)
        self.stitcher.adopt(e)
        if sent is None or (self.acked and not refused):
            # nothing of ours yet, or ours ran and the bridge has moved on (the watchdog's hold after its end,
            # a cancel's stop): its trajectory in force is the start, nothing refused
            return None
        why = (f"the bridge refused the last trajectory ({refused})" if refused else
               f"the bridge did not report our last trajectory within {self.ack_timeout_s():.3f} s "
               f"(bridge_ack_timeout_s, or twice its slowest recent report): refused")
        self.sent = None
        self._unacked.clear()
        return Reanchor(Anchor.BRIDGE, why)

    def _reanchor(self, now_s: float) -> Reanchor | None:
        """Forget the active trajectory when the robot is not executing it: the bridge refused or aborted
        it, or the measured joints have departed from it by more than `reanchor_tolerance`."""
        active = self.stitcher.active
        if active is None:
            return None
        why = None
        refused = self._take_refused()
        if refused:
            why = f"the bridge refused the last trajectory ({refused})"
        tol = self.node_cfg.reanchor_tolerance
        m = self.measured
        if why is None and tol > 0 and m is not None and now_s - m[0] <= self.node_cfg.joint_state_timeout_s:
            cols = self._reanchor_cols
            q_ref = active.sample(np.array([m[0]]))[0][0]
            gap = float(np.max(np.abs(m[1][cols] - q_ref[cols]), initial=0.0))
            if gap > tol:
                why = f"measured joints are {gap:.3f} from the trajectory being executed (tolerance {tol})"
        if why is None:
            return None
        self.stitcher.reset()
        return Reanchor(Anchor.MEASURED, why)

