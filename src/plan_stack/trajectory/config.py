"""Configuration of the stitcher: the library's (`StitcherConfig`) and the node's (`StitcherNodeConfig`)."""
from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar

from plan_stack.config import ConfigError, param, validate

__all__ = ["StitcherConfig", "StitcherNodeConfig", "Backend", "StitchMode", "QpSolver", "InitialState"]


class Backend(enum.StrEnum):
    MPC = "mpc"  # joint MPC (OSQP / DAQP / active set where a bound binds)
    RUCKIG = "ruckig"  # jerk-limited chaser


class StitchMode(enum.StrEnum):
    TRACKING = "tracking"  # follow the rolling chunk
    SETTLE = "settle"  # come to rest at the chunk's last sample


class QpSolver(enum.StrEnum):
    DAQP = "daqp"
    ACTIVE_SET = "active_set"
    OSQP = "osqp"


class InitialState(enum.StrEnum):
    """What a trajectory starts from when it cannot stitch onto the stitcher's own (`trajectory.start_state`)."""

    BRIDGE = "bridge"
    JOINT_STATES = "joint_states"
    CHUNK = "chunk"


@dataclasses.dataclass(frozen=True)
class StitcherConfig:
    joint_names: tuple[str, ...] = param(
        "Joints of the output trajectory, in output order (chunks may list them in any order)", read_only=True)
    discrete_joints: tuple[str, ...] = param(
        "Subset of joint_names passed through rate-limited instead of optimised (grippers)", (), read_only=True)
    backend: Backend = param("Trajectory generator: joint MPC (OSQP) or Ruckig", Backend.MPC)
    mode: StitchMode = param("tracking: follow the rolling chunk; settle: come to rest at the chunk's last sample",
                             StitchMode.TRACKING)
    stitch_len: int = param(
        "Samples of the trajectory being executed kept unchanged at the start of a new one (>= 1; the last is "
        "the optimisation's start state)", 3, min=1, max=1000)
    dt: float = param("Sample period of the output trajectory (s)", 0.02, min=1e-4, max=1.0, read_only=True)
    v_max: float | tuple[float, ...] = param("Velocity limit, scalar or per joint (rad/s or m/s)", 3.0, min=1e-9)
    a_max: float | tuple[float, ...] = param("Acceleration limit, scalar or per joint", 15.0, min=1e-9)
    j_max: float | tuple[float, ...] = param("Jerk limit, scalar or per joint", 150.0, min=1e-9)
    q_min: tuple[float, ...] = param("Lower position limit per continuous joint; empty = none", ())
    q_max: tuple[float, ...] = param("Upper position limit per continuous joint; empty = none", ())
    discrete_rate: float | tuple[float, ...] = param(
        "Rate limit of the discrete joints (units/s), scalar or one per discrete joint: the peak speed of the "
        "interpolated curve (they are emitted at rest at every sample; the mean speed is 8/15 of it)", 2.0,
        min=1e-9)
    w_tracking: float = param("MPC weight on (q - reference)²", 1.0, min=0.0)
    w_velocity: float = param("MPC weight on v²", 0.0, min=0.0)
    w_acceleration: float = param("MPC weight on a²", 1e-5, min=0.0)
    w_jerk: float = param(
        "MPC weight on j² (> 0); smoothing cut-off ~ (w_tracking / w_jerk)^(1/6) rad/s", 1e-6, min=1e-15)
    w_terminal: float = param("MPC settle mode: weight on the final position error", 1.0, min=0.0)
    w_stop_velocity: float = param("MPC settle mode: weight on the final velocity²", 1e-3, min=0.0)
    w_stop_acceleration: float = param("MPC settle mode: weight on the final acceleration²", 1e-6, min=0.0)
    limit_margin: float = param(
        "Relative headroom the generators keep below each limit (absorbs solver tolerance)", 1e-3, min=0.0, max=0.1)
    qp_solver: QpSolver = param(
        "MPC solver for joints where a bound binds: DAQP (dual active set in C, one workspace per shape), the "
        "same dual active-set method in numpy (exact, slow: every step refactorises), or OSQP (set up once per "
        "horizon, warm-started) finished exactly by the active-set method from OSQP's active set",
        QpSolver.DAQP)
    mpc_free_steps: int = param(
        "Move blocking (DAQP and active_set; OSQP ignores it): the first this many steps each get their own jerk",
        8, min=0, max=100000)
    mpc_block: int = param(
        "Move blocking: after mpc_free_steps, one jerk per this many steps (1 = a jerk per step, no blocking). "
        "Fewer variables, fewer constraints active at once, fewer active-set steps; samples and limits stay "
        "exact (constant jerk per sample period)", 6, min=1, max=1000)
    osqp_eps: float = param("OSQP absolute/relative tolerance before polishing", 1e-4, min=1e-12, max=1e-2)
    osqp_max_iter: int = param("OSQP iteration cap per joint", 4000, min=10)
    ruckig_stride: int = param("Ruckig: samples followed between two recomputations", 5, min=1)
    ruckig_lookahead: int = param("Ruckig: the chaser targets the reference this many samples ahead", 10, min=1)
    settle_max_s: float = param("Longest tail appended in settle mode to come to rest (s)", 3.0, min=0.0)
    max_chunk_lead_s: float = param(
        "Chunks stamped further than this ahead of now are rejected (a wrong clock or stamp; s)", 1.0, min=0.0)
    max_chunk_age_s: float = param(
        "Chunks stamped longer ago than this are rejected as stale, even when part of their span is left (s)", 2.0,
        min=0.0)
    min_horizon: int = param("Shortest chunk accepted (samples; it must also be longer than stitch_len)", 2, min=2)
    max_horizon: int = param("Longest chunk accepted (samples): bounds what one chunk can cost to solve", 500,
                             min=2, max=100000)
    position_tolerance: float = param(
        "Chunk samples beyond q_min/q_max by more than this are rejected; samples closer than this are held "
        "at the limit and counted (rad or m)", 0.05, min=0.0)
    saturate_joints: tuple[str, ...] = param(
        "Joints whose range ends are end stops (grippers: fully open / closed): chunk samples beyond q_min/q_max "
        "are clamped into the range however far out they lie and counted, never rejected (a command past an end "
        "stop saturates on the robot). Needs position limits for every joint it names", (), read_only=True)
    bridge_v_max: tuple[float, ...] = param(
        "Velocity limits of the controller (bridge) the trajectories go to, one per joint in joint_names order: the "
        "interpolated curve of every trajectory is checked against them with the bridge's own check before it is "
        "published (empty: the stitcher's own limits; set by limits_from)", ())
    bridge_a_max: tuple[float, ...] = param("see bridge_v_max: acceleration limits (empty: the stitcher's own)", ())
    bridge_j_max: tuple[float, ...] = param("see bridge_v_max: jerk limits (empty: the bridge checks no jerk)", ())
    bridge_q_min: tuple[float, ...] = param("see bridge_v_max: lower position limits (empty: the stitcher's own)",
                                            ())
    bridge_q_max: tuple[float, ...] = param("see bridge_v_max: upper position limits (empty: the stitcher's own)",
                                            ())
    command_latency_s: float = param(
        "Time a command needs to reach the robot; the first new sample is due no earlier than now + this", 0.0,
        min=0.0, max=1.0)

    def __post_init__(self) -> None:
        validate(self)
        if not self.joint_names:
            raise ConfigError("joint_names: at least one joint is required")
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ConfigError(f"joint_names: duplicate names in {list(self.joint_names)}")
        for name in ("discrete_joints", "saturate_joints"):
            unknown = [j for j in getattr(self, name) if j not in self.joint_names]
            if unknown:
                raise ConfigError(f"{name}: {unknown} not in joint_names")
        nd = len(self.discrete_joints)
        nc = len(self.joint_names) - nd
        for name in ("v_max", "a_max", "j_max"):
            v = getattr(self, name)
            if isinstance(v, tuple) and len(v) not in (1, nc, len(self.joint_names)):
                raise ConfigError(f"{name}: expected a scalar, {nc} values (continuous joints) or "
                                  f"{len(self.joint_names)} (all joints), got {len(v)}")
        for name in ("q_min", "q_max"):
            v = getattr(self, name)
            if v and len(v) not in (nc, len(self.joint_names)):
                raise ConfigError(f"{name}: expected {nc} values (continuous joints) or "
                                  f"{len(self.joint_names)}, got {len(v)}")
        if bool(self.q_min) != bool(self.q_max):
            raise ConfigError("q_min: q_min and q_max must be given together")
        if self.saturate_joints and not (self.q_min and (len(self.q_min) == len(self.joint_names) or not any(
                j in self.discrete_joints for j in self.saturate_joints))):
            raise ConfigError("saturate_joints: a joint clamped into its range needs a range: give q_min/q_max "
                              "(one per joint when a saturated joint is discrete)")
        for name in ("bridge_v_max", "bridge_a_max", "bridge_j_max", "bridge_q_min", "bridge_q_max"):
            v = getattr(self, name)
            if v and len(v) != len(self.joint_names):
                raise ConfigError(f"{name}: expected one value per joint ({len(self.joint_names)}), got {len(v)}")
        if bool(self.bridge_q_min) != bool(self.bridge_q_max):
            raise ConfigError("bridge_q_min: bridge_q_min and bridge_q_max must be given together")
        if isinstance(self.discrete_rate, tuple) and len(self.discrete_rate) not in (1, nd):
            raise ConfigError(f"discrete_rate: expected a scalar or {nd} values, got {len(self.discrete_rate)}")
        if self.min_horizon > self.max_horizon:
            raise ConfigError(f"min_horizon: {self.min_horizon} exceeds max_horizon {self.max_horizon}")
        if self.ruckig_lookahead < self.ruckig_stride:
            raise ConfigError(f"ruckig_lookahead: must be >= ruckig_stride ({self.ruckig_stride})")

    @property
    def continuous_joints(self) -> tuple[str, ...]:
        return tuple(j for j in self.joint_names if j not in self.discrete_joints)


@dataclasses.dataclass(frozen=True)
class StitcherNodeConfig:
    """Parameters of the `stitcher` node beyond `StitcherConfig`: where a trajectory starts
    (`trajectory.start_state`), the bridge's action, measured-state units, diagnostics."""

    #: parameters this node no longer has, with what to set instead (`plan_stack.config.removed_params`)
    REMOVED_PARAMS: ClassVar[dict[str, str]] = {
        "measured_start_lead_s": "point_lead_s is the one lead: every trajectory, one started from the measured "
                                 "state too, is stamped point_lead_s before its first new point, and the bridge "
                                 "joins its present reference to that point over the lead; set point_lead_s",
    }

    initial_state: InitialState = param(
        "What a trajectory starts from when it cannot stitch onto our own active one: `bridge` = what the bridge "
        "reports executing on active_trajectory (its accepted trajectories, holds and stops; no start until it has "
        "reported, at start-up and after a clock reset: a bridge without a state refuses a start taken from "
        "joint_states), `joint_states` = the measured state, `chunk` = the chunk's first sample at rest (only for "
        "open-loop simulation without joint_states)", InitialState.JOINT_STATES)
    bridge_ack_timeout_s: float = param(
        "initial_state bridge, with a bridge that does not publish bridge_state (one that does names each refusal "
        "there): a trajectory of ours that active_trajectory has not reported this long after the oldest of ours "
        "not reported since was published (or twice the slowest of the last 20 reports, if longer) counts as "
        "refused, and the next one stitches onto what the bridge executes instead (s)", 0.2, min=0.0)
    execute_action: str = param(
        "ExecuteTrajectory action each trajectory is also sent to (e.g. /execute_trajectory, served by the bridges); "
        "empty = publish on `trajectory` only", "")
    bridge_timeout_s: float = param("How long to wait for the bridge's action server / goal acceptance (s)", 1.0,
                                    min=0.0)
    expected_horizon: int = param(
        "Chunk horizon (samples) whose MPC data is prepared at start-up; 0 = prepare on first use", 0, min=0,
        max=10000)
    joint_state_timeout_s: float = param("Measured states older than this are not used (s)", 0.5, min=0.0)
    reanchor_tolerance: float = param(
        "When the measured joints are further than this from the trajectory being executed (max over the "
        "continuous joints, rad or m), the robot is not following it (the bridge refused it, a fault, a "
        "reset): the stitcher forgets it and starts the next trajectory from the measured state; 0 = never",
        0.1, min=0.0)
    point_lead_s: float = param(
        "Stamp each trajectory this long before its first point is due (time_from_start starts at it; same "
        "absolute times): the bridge then joins its reference to the first point over the lead instead of "
        "taking it as a jump. Stitched onto the trajectory being executed, its grid samples over the lead, and "
        "back to now, are sent too, so the join never replaces more than part of one segment; started from a "
        "state (the bridge's hold, the measured state), the join takes the whole lead. The one lead (it replaces "
        "measured_start_lead_s). Keep it <= command_latency_s; 0 = first point at time 0", 0.0, min=0.0, max=1.0)
    reanchor_ignore_joints: tuple[str, ...] = param(
        "Joints whose distance from the trajectory does not count for re-anchoring (grippers: closed on an "
        "object they stay short of their reference by design)", (), read_only=True)
    diagnostics_period_s: float = param("Diagnostics republish period (s)", 1.0, min=0.01)
    # joint_states units -> stack units (ALOHA grippers: metres -> 0..1), per joint in joint_names order.
    state_offset: tuple[float, ...] = param(
        "Measured joint_states -> stack units: q_stack = (q - state_offset) * state_scale, one value per joint "
        "(empty = identity)", (), read_only=True)
    state_scale: tuple[float, ...] = param("see state_offset (empty = identity)", (), read_only=True)
    state_joint_names: tuple[str, ...] = param(
        "the joint_states joint each joint_names channel is read from, one per joint (empty = joint_names; a "
        "Franka's gripper width channel reads one finger joint, state_scale 2)", (), read_only=True)

    def __post_init__(self) -> None:
        validate(self)
        if len(self.state_offset) != len(self.state_scale):
            raise ConfigError("state_offset/state_scale: give both with one value per joint, or neither")
