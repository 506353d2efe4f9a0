"""Stitcher properties over random chunks, limits, delays and start states."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_stack.config import ConfigError
from plan_stack.trajectory.alignment import Chunk, ChunkError
from plan_stack.trajectory.checks import check_trajectory
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.core import Reference, Trajectory
from plan_stack.trajectory.limits import check_limits
from plan_stack.trajectory.stitching import Stitcher, StitchStatus

NAMES = ("j0", "j1", "j2", "grip")
DT = 0.02


def _feasible_start(rng, lim_v, lim_a, lim_j, D):
    """A state from which a jerk-limited stop stays inside the velocity limit."""
    a = rng.uniform(-0.5, 0.5, D) * min(lim_a, np.sqrt(lim_v * lim_j))  # a²/2j <= v_max / 8
    v = rng.uniform(-0.5, 0.5, D) * (lim_v - a * a / (2 * lim_j))
    return v, a


def _chunk(rng, stamp, H, scale, q_off):
    t = np.arange(H) * DT + stamp
    ph = rng.uniform(0, 6, 3)
    ref = np.empty((H, 4))
    ref[:, :3] = q_off + scale * np.sin(2 * np.pi * 0.5 * t[:, None] + ph) + rng.normal(0, 0.01 * scale + 1e-4, (H, 3))
    ref[:, 3] = (rng.uniform(size=H) > 0.5).astype(float)
    return Chunk(stamp, NAMES, DT, ref)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), backend=st.sampled_from(["mpc", "ruckig"]),
       mode=st.sampled_from(["tracking", "settle"]), stitch_len=st.integers(1, 6), H=st.integers(8, 40),
       vmax=st.floats(0.5, 5.0), amax=st.floats(2.0, 20.0), jmax=st.floats(10.0, 300.0),
       scale=st.floats(0.0, 0.6), n_chunks=st.integers(1, 3))
def test_every_trajectory_is_within_limits_and_continuous(seed, backend, mode, stitch_len, H, vmax, amax, jmax,
                                                           scale, n_chunks):
    if H <= stitch_len + 1:
        H = stitch_len + 2
    rng = np.random.default_rng(seed)
    cfg = StitcherConfig(joint_names=NAMES, discrete_joints=("grip",), backend=backend, mode=mode,
                         stitch_len=stitch_len, dt=DT, v_max=vmax, a_max=amax, j_max=jmax, discrete_rate=3.0)
    s = Stitcher(cfg)
    v0, a0 = _feasible_start(rng, vmax, amax, jmax, 3)
    q0 = rng.uniform(-1, 1, 4)
    q0[3] = 0.0
    measured = (q0, np.append(v0, 0.0), np.append(a0, 0.0))
    now = 10.0
    prev: Trajectory | None = None
    for _ in range(n_chunks):
        stamp = now - rng.uniform(0, 3) * DT  # chunks arrive a little late
        try:
            res = s.process(_chunk(rng, stamp, H, scale, q0[:3]), now, measured if prev is None else None)
        except ChunkError as exc:  # too late for this horizon: refused, nothing changes
            assert exc.reason == "stale" and s.active is prev
            now += rng.uniform(1, H / 2) * DT
            continue
        assert res.status is not StitchStatus.FAILED, res.messages
        tr = res.trajectory
        # Limits (to 1e-6 relative), independently of the library's own verdict.
        rep = check_limits(DT, tr.positions[:, :3], tr.velocities[:, :3], tr.accelerations[:, :3], s.limits,
                           tr.positions[:, 3:], s.discrete_rate, rtol=1e-6)
        assert rep.ok, rep
        # Starts exactly at the current execution state; C2 at the seam.
        if prev is None:
            np.testing.assert_array_equal(tr.positions[0], measured[0])
            np.testing.assert_array_equal(tr.velocities[0, :3], measured[1][:3])
            np.testing.assert_array_equal(tr.accelerations[0, :3], measured[2][:3])
        else:
            assert tr.t0_s >= now - 1e-12 and tr.t0_s < now + DT
            k = (tr.t0_s - prev.t0_s) / DT
            assert abs(k - round(k)) < 1e-9  # on the active trajectory's grid
            q, v, a = prev.sample(tr.t0_s + DT * np.arange(res.bridge_len))
            np.testing.assert_array_equal(tr.positions[:res.bridge_len], q)
            np.testing.assert_array_equal(tr.velocities[:res.bridge_len, :3], v[:, :3])
            np.testing.assert_array_equal(tr.accelerations[:res.bridge_len, :3], a[:, :3])
        assert res.seam_jump == (0.0, 0.0, 0.0)
        if mode == "settle" and res.generator != "brake" and not any("settle tail needs" in m for m in res.messages):
            assert np.all(tr.velocities[-1, :3] == 0.0) and np.all(tr.accelerations[-1, :3] == 0.0)
        prev = tr
        now += rng.uniform(1, H / 2) * DT


def _cfg(**kw):
    base = dict(joint_names=NAMES, discrete_joints=("grip",), v_max=2.0, a_max=10.0, j_max=100.0)
    base.update(kw)
    return StitcherConfig(**base)


def _ref(H=20):
    r = np.zeros((H, 4))
    r[:, 0] = np.linspace(0, 0.1, H)
    return r


@pytest.mark.parametrize("chunk, reason", [
    (Chunk(0.0, NAMES, DT, np.where(np.arange(80).reshape(20, 4) == 5, np.nan, _ref())), "non_finite"),
    (Chunk(0.0, NAMES, DT, np.where(np.arange(80).reshape(20, 4) == 5, np.inf, _ref())), "non_finite"),
    (Chunk(0.0, ("j0", "j1", "jX", "grip"), DT, _ref()), "joint_names"),
    (Chunk(0.0, NAMES[:3], DT, _ref()[:, :3]), "joint_names"),
    (Chunk(0.0, NAMES, 0.0, _ref()), "dt"),
    (Chunk(0.0, NAMES, -0.02, _ref()), "dt"),
    (Chunk(0.0, NAMES, DT, _ref(3)), "horizon"),
    (Chunk(-5.0, NAMES, DT, _ref()), "stale"),
    (Chunk(-0.37, NAMES, DT, _ref()), "stale"),  # only 2 samples left: not more than stitch_len
    (Chunk(-2.5, NAMES, DT, _ref(200)), "stale"),  # part of its span is left, but older than max_chunk_age_s
    (Chunk(1.5, NAMES, DT, _ref()), "future"),  # beyond max_chunk_lead_s: a wrong clock
    (Chunk(1e9, NAMES, DT, _ref()), "future"),
    (Chunk(0.0, NAMES, DT, _ref(501)), "horizon"),  # beyond max_horizon
    (Chunk(0.0, ("j0", "j0", "j2", "grip"), DT, _ref()), "joint_names"),  # duplicated
    (Chunk(0.0, NAMES, DT, _ref() + np.array([0.0, 0.0, 1.2, 0.0])), "position_limits"),
    (Chunk(0.0, NAMES, DT, _ref() - np.array([1e300, 0.0, 0.0, 0.0])), "position_limits"),
])
def test_bad_chunks_are_rejected_and_change_nothing(chunk, reason):
    s = Stitcher(_cfg(q_min=(-1.0, -1.0, -1.0), q_max=(1.0, 1.0, 1.0)))
    first = s.process(Chunk(0.0, NAMES, DT, _ref()), 0.0, (np.zeros(4), np.zeros(4), np.zeros(4)))
    assert first.status is StitchStatus.OK
    with pytest.raises(ChunkError, match=f"^{reason}") as info:
        s.process(chunk, 0.0)
    assert info.value.reason == reason
    assert s.active is first.trajectory


@pytest.mark.parametrize("backend", ["mpc", "ruckig"])
def test_samples_just_beyond_a_position_limit_are_held_there_and_counted(backend):
    s = Stitcher(_cfg(backend=backend, q_min=(-1.0, -1.0, -1.0), q_max=(1.0, 1.0, 1.0), position_tolerance=0.05))
    ref = _ref(30)
    ref[:, 1] = np.linspace(0.9, 1.04, 30)  # the last samples are up to 0.04 beyond q_max
    res = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (ref[0], np.zeros(4), np.zeros(4)))
    assert res.status is StitchStatus.OK
    assert res.clamped_samples == int(np.count_nonzero(ref[:, 1] > 1.0)) > 0
    assert any("clamped to the limit" in m for m in res.messages)
    assert res.trajectory.positions[:, 1].max() <= 1.0
    inside = s.process(Chunk(0.0, NAMES, DT, _ref()), 0.0)
    assert inside.clamped_samples == 0


def test_horizon_bounds_are_configurable():
    s = Stitcher(_cfg(min_horizon=10, max_horizon=12))
    state = (np.zeros(4), np.zeros(4), np.zeros(4))
    for H, ok in ((9, False), (10, True), (12, True), (13, False)):
        if ok:
            assert s.process(Chunk(0.0, NAMES, DT, _ref(H)), 0.0, state).status is StitchStatus.OK
        else:
            with pytest.raises(ChunkError, match="^horizon"):
                s.process(Chunk(0.0, NAMES, DT, _ref(H)), 0.0, state)


def test_process_is_validate_align_solve():
    """The three stages compose to `process` (an alignment is independent of how it is solved)."""
    state = (np.zeros(4), np.zeros(4), np.zeros(4))
    chunk = Chunk(0.0, NAMES, DT, _ref(30))
    whole = Stitcher(_cfg()).process(chunk, 0.05, state)
    s = Stitcher(_cfg())
    R, clamped = s.validate(chunk, 0.05)
    al = s.align(chunk, R, 0.05, state)
    assert al.t_start == pytest.approx(0.06) and al.trimmed == 3 and al.bridge_len == 1
    parts = s.solve(al, clamped=clamped)
    np.testing.assert_array_equal(parts.trajectory.positions, whole.trajectory.positions)
    assert s.active is parts.trajectory


def test_first_chunk_needs_a_state():
    with pytest.raises(ChunkError, match="^no_state"):
        Stitcher(_cfg()).process(Chunk(0.0, NAMES, DT, _ref()), 0.0)


def test_late_chunk_is_trimmed_not_replayed():
    s = Stitcher(_cfg(stitch_len=1))
    ref = _ref(30)
    res = s.process(Chunk(0.0, NAMES, DT, ref), 0.101, (ref[0], np.zeros(4), np.zeros(4)))
    assert res.trimmed_steps == 6 and len(res.trajectory.positions) == 24
    assert res.trajectory.t0_s == pytest.approx(0.12)


def test_reordered_joint_names_are_accepted():
    ref = _ref()
    perm = [3, 1, 0, 2]
    state = (np.zeros(4), np.zeros(4), np.zeros(4))
    plain = Stitcher(_cfg()).process(Chunk(0.0, NAMES, DT, ref), 0.0, state).trajectory
    shuffled = Stitcher(_cfg()).process(Chunk(0.0, tuple(NAMES[i] for i in perm), DT, ref[:, perm]), 0.0,
                                        state).trajectory
    assert shuffled.joint_names == NAMES
    np.testing.assert_array_equal(shuffled.positions, plain.positions)
    assert plain.positions[:, 0].max() > 0.05  # it did follow the ramp


def test_gripper_is_rate_limited_pass_through():
    s = Stitcher(_cfg(discrete_rate=1.0))
    ref = _ref(40)
    ref[:, 3] = 1.0
    tr = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (np.zeros(4), np.zeros(4), np.zeros(4))).trajectory
    # steps of 1.0/s * 0.02 s * 8/15 (at rest at every sample: the quintic between peaks at the rate)
    np.testing.assert_allclose(np.diff(tr.positions[:, 3]), 0.02 * 8 / 15)
    assert tr.positions[-1, 3] == pytest.approx(0.78 * 8 / 15)
    assert not np.any(tr.velocities[:, 3]) and not np.any(tr.accelerations[:, 3])


@pytest.mark.parametrize("backend", ["mpc", "ruckig"])
@pytest.mark.parametrize("v0, a0", [(1.0, 10.0), (1.5, 0.0), (-1.2, 3.0)])
def test_infeasible_start_brakes_at_once_and_says_so(backend, v0, a0):
    s = Stitcher(_cfg(backend=backend, v_max=1.0, a_max=10.0, j_max=10.0, stitch_len=1))
    # At (or above) max velocity and still accelerating: no generator can stay inside v_max. The
    # stitcher detects it before any solver runs and emits the jerk-limited stop.
    res = s.process(Chunk(0.0, NAMES, DT, _ref()), 0.0, (np.zeros(4), np.array([v0, 0, 0, 0]),
                                                        np.array([a0, 0, 0, 0])))
    assert res.status is StitchStatus.FALLBACK and res.generator == "brake" and s.active is res.trajectory
    assert any("infeasible start" in m for m in res.messages)
    assert not any(m.startswith(("mpc:", "ruckig:")) for m in res.messages)  # no solver was tried
    v, a = res.trajectory.velocities[:, 0], res.trajectory.accelerations[:, 0]
    assert v[0] == v0 and a[0] == a0 and v[-1] == 0.0 and a[-1] == 0.0  # exact start, ends at rest
    # never faster than braking from the start allows, never harder than the start or a_max, jerk-limited
    peak = abs(v0) + (a0 * a0 / (20.0 * (1 - 1e-3)) if v0 * a0 > 0 else 0.0)  # brake jerk: limit less margin
    assert np.abs(v).max() <= peak * (1 + 1e-6) and np.abs(a).max() <= max(10.0, abs(a0)) * (1 + 1e-6)
    assert np.abs(np.diff(a)).max() / DT <= 10.0 * (1 + 1e-9)
    # the next chunk stitches onto the stop
    nxt = s.process(Chunk(0.1, NAMES, DT, _ref()), 0.1)
    assert nxt.status is not StitchStatus.FAILED


def test_mpc_failure_falls_back_to_ruckig():
    # Resting just inside the true position limit but outside the QP's (margin-shrunk) box:
    # the QP is infeasible, the Ruckig chaser moves back inside and passes the check.
    s = Stitcher(_cfg(q_min=(-1.0, -1.0, -1.0), q_max=(1.0, 1.0, 1.0), stitch_len=1))
    ref = np.zeros((30, 4))
    ref[:, 0] = 1.0
    q0 = np.array([0.9995, 0.0, 0.0, 0.0])
    res = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (q0, np.zeros(4), np.zeros(4)))
    assert res.status is StitchStatus.FALLBACK and res.generator == "ruckig"
    assert res.report.ok and res.trajectory.positions[:, 0].max() <= 1.0
    assert any(m.startswith("mpc:") for m in res.messages)


def test_trajectory_sampling_is_exact_on_cubic_segments():
    # A constant-jerk segment: the quintic interpolation reproduces it.
    j, dt = 3.0, 0.1
    t = np.array([0.0, dt])
    q, v, a = j * t**3 / 6, j * t**2 / 2, j * t
    tr = Trajectory.on_grid(0.0, dt, ("x",), q[:, None], v[:, None], a[:, None])
    qs, vs, as_ = tr.sample(np.array([0.037]))
    assert qs[0, 0] == pytest.approx(j * 0.037**3 / 6, rel=1e-9)
    assert vs[0, 0] == pytest.approx(j * 0.037**2 / 2, rel=1e-9)
    assert as_[0, 0] == pytest.approx(j * 0.037, rel=1e-9)
    qs, vs, as_ = tr.sample(np.array([5.0]))  # after the end: hold at rest
    assert (qs[0, 0], vs[0, 0], as_[0, 0]) == (q[-1], 0.0, 0.0)


@pytest.mark.parametrize("kw, match", [
    (dict(joint_names=()), "joint_names"),
    (dict(joint_names=("a", "a")), "joint_names"),
    (dict(discrete_joints=("zz",)), "discrete_joints"),
    (dict(v_max=(1.0, 2.0)), "v_max"),
    (dict(q_min=(0.0, 0.0, 0.0)), "q_min"),
    (dict(q_min=(0.0,), q_max=(1.0,)), "q_min"),
    (dict(discrete_rate=(1.0, 2.0)), "discrete_rate"),
    (dict(backend="qp"), "backend"),
    (dict(mode="stop"), "mode"),
    (dict(stitch_len=0), "stitch_len"),
    (dict(ruckig_stride=6, ruckig_lookahead=3), "ruckig_lookahead"),
    (dict(j_max=-1.0), "j_max"),
    (dict(min_horizon=20, max_horizon=10), "min_horizon"),
    (dict(max_chunk_lead_s=-1.0), "max_chunk_lead_s"),
    (dict(position_tolerance=-0.1), "position_tolerance"),
])
def test_config_validation(kw, match):
    with pytest.raises(ConfigError, match=f"^{match}"):
        _cfg(**kw)


def test_prepare_builds_every_shape_a_chunk_can_need():
    s = Stitcher(_cfg())
    s.prepare(12)
    assert sorted(k[0] for k in s._mpc._shapes) == list(range(1, 12))


def test_chunk_with_another_period_is_resampled_onto_the_output_grid():
    s = Stitcher(_cfg(stitch_len=1))
    H = 11
    ref = np.zeros((H, 4))
    ref[:, 0] = np.linspace(0.0, 0.2, H)  # 0.2 rad over 0.4 s at dt 0.04
    res = s.process(Chunk(0.0, NAMES, 0.04, ref), 0.0, (np.zeros(4), np.array([0.5, 0, 0, 0]), np.zeros(4)))
    tr = res.trajectory
    assert tr.dt_s == DT and len(tr.positions) == 2 * (H - 1) + 1
    assert abs(tr.positions[10, 0] - 0.1) < 0.01  # halfway in time, about halfway along the ramp


@pytest.mark.parametrize("backend", ["mpc", "ruckig"])
def test_settle_ends_at_rest_with_grippers_at_their_target(backend):
    s = Stitcher(_cfg(backend=backend, mode="settle", discrete_rate=2.0))
    ref = np.zeros((10, 4))
    ref[:, 0] = 0.05
    ref[:, 3] = 1.0
    tr = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (np.zeros(4), np.zeros(4), np.zeros(4))).trajectory
    np.testing.assert_allclose(tr.positions[-1], [0.05, 0.0, 0.0, 1.0], atol=1e-12)
    assert not np.any(tr.velocities[-1]) and not np.any(tr.accelerations[-1])
    assert np.all(np.abs(np.diff(tr.positions[:, 3])) <= 2.0 * DT * (1 + 1e-12))


def test_modes_are_enums_that_read_from_their_strings():
    from plan_stack.trajectory.config import Backend, QpSolver, StitchMode

    cfg = StitcherConfig(joint_names=("a",), backend="ruckig", mode="settle", qp_solver="osqp")
    assert (cfg.backend, cfg.mode, cfg.qp_solver) == (Backend.RUCKIG, StitchMode.SETTLE, QpSolver.OSQP)
    with pytest.raises(ConfigError, match=r"^mode: 'stop' is not one of \['tracking', 'settle'\]"):
        StitcherConfig(joint_names=("a",), mode="stop")


def test_discrete_channel_interpolated_between_samples_stays_within_its_rate():
    """What a quintic-interpolating bridge follows between the samples (found by the ALOHA soak: with
    finite-difference velocities it overshot the rate by 1.5x where the rate limiter started or stopped)."""
    s = Stitcher(_cfg(discrete_rate=1.0, stitch_len=1))
    ref = _ref(40)
    ref[:, 3] = np.where(np.arange(40) < 10, 0.0, 0.3)  # the gripper ramps to 0.3 at 1/s, then stops
    tr = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (np.zeros(4), np.zeros(4), np.zeros(4))).trajectory
    t = np.linspace(tr.t0_s, tr.end_s, 40 * 50)
    q = tr.sample(t)[0][:, 3]
    v = np.abs(np.diff(q) / np.diff(t))
    assert v.max() <= 1.0 * 1.01


def test_discrete_joints_take_position_limits_when_they_list_every_joint():
    s = Stitcher(_cfg(q_min=(-1.0, -1.0, -1.0, 0.0), q_max=(1.0, 1.0, 1.0, 1.0), discrete_rate=10.0))
    ref = _ref(30)
    ref[:, 3] = np.linspace(0.5, 1.03, 30)  # the gripper reference ends 0.03 above its range
    res = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (np.r_[ref[0, :3], 0.5], np.zeros(4), np.zeros(4)))
    assert res.clamped_samples == int(np.count_nonzero(ref[:, 3] > 1.0)) > 0
    assert res.trajectory.positions[:, 3].max() <= 1.0
    np.testing.assert_array_equal(s.limits.q_max, [1.0, 1.0, 1.0])  # the continuous joints' own
    ref[:, 3] = 1.2
    with pytest.raises(ChunkError, match="^position_limits: .* grip "):
        s.process(Chunk(0.0, NAMES, DT, ref), 0.0)


@pytest.mark.parametrize("discrete", [False, True])
def test_saturate_joints_are_clamped_however_far_out_and_other_joints_still_reject(discrete):
    """A gripper commanded 0.19 past fully open saturates (clamped, counted); an arm joint 0.19 out rejects."""
    extra = dict(discrete_rate=10.0) if discrete else dict(discrete_joints=(), v_max=(2.0, 2.0, 2.0, 5.0))
    s = Stitcher(_cfg(q_min=(-1.0, -1.0, -1.0, 0.0), q_max=(1.0, 1.0, 1.0, 1.0), saturate_joints=("grip",),
                      **extra))
    ref = _ref(60)
    # the head's gripper output: up to 0.19 beyond [0, 1] on both sides
    ref[:, 3] = 0.5 + 0.69 * np.sin(2 * np.pi * np.arange(60) * DT / 1.2)
    res = s.process(Chunk(0.0, NAMES, DT, ref), 0.0, (np.r_[ref[0, :3], 0.5], np.zeros(4), np.zeros(4)))
    assert res.status is StitchStatus.OK
    assert res.clamped_samples == int(np.count_nonzero((ref[:, 3] > 1.0) | (ref[:, 3] < 0.0))) > 0
    assert any("clamped to the limit" in m for m in res.messages)
    q = res.trajectory.positions[:, 3]
    assert q.min() >= 0.0 and q.max() <= 1.0
    arm = _ref(30)
    arm[:, 1] = np.linspace(0.9, 1.19, 30)  # an arm joint as far out: still the whole chunk rejected
    with pytest.raises(ChunkError, match="^position_limits: sample .* of j1 is 0.19 beyond"):
        s.process(Chunk(0.02, NAMES, DT, arm), 0.02)
    assert s.active is res.trajectory


def test_saturate_joints_are_checked():
    with pytest.raises(ConfigError, match="saturate_joints: \\['nope'\\] not in joint_names"):
        _cfg(saturate_joints=("nope",))
    with pytest.raises(ConfigError, match="saturate_joints: a joint clamped into its range needs a range"):
        _cfg(saturate_joints=("grip",))


def test_a_start_outside_the_position_range_brakes_instead_of_failing():
    """A measured joint a hair outside its range (a gripper reading -0.01) must not make every chunk fail."""
    s = Stitcher(_cfg(q_min=(-1.0, -1.0, -1.0), q_max=(1.0, 1.0, 1.0)))
    res = s.process(Chunk(0.0, NAMES, DT, _ref()), 0.0, (np.array([-1.01, 0.0, 0.0, 0.0]), np.zeros(4), np.zeros(4)))
    assert res.status is StitchStatus.FALLBACK and res.generator == "brake"
    assert any("infeasible start" in m for m in res.messages)


def test_a_reported_trajectory_far_outside_the_limits_or_from_the_future_is_refused_as_a_start():
    from plan_stack.trajectory.limits import TrajectoryError

    s = Stitcher(StitcherConfig(joint_names=("a", "b"), backend="ruckig", q_min=(-1.0, -1.0), q_max=(1.0, 1.0),
                                position_tolerance=0.05))

    def reported(stamp_s, q):
        return Trajectory(("a", "b"), stamp_s, np.array([0.0, 0.5]), np.array([[0.0, 0.0], q]))

    s.check_reported(reported(-100.0, [0.5, -0.5]), now_s=10.0)  # long past: the bridge holds at its end
    s.check_reported(reported(10.0, [1.04, -0.5]), now_s=10.0)  # within position_tolerance
    with pytest.raises(TrajectoryError, match="position_limits: point 1 of a"):
        s.check_reported(reported(10.0, [1.2, 0.0]), now_s=10.0)
    with pytest.raises(TrajectoryError, match="future"):
        s.check_reported(reported(1e5, [0.0, 0.0]), now_s=10.0)


def _published(res, names):
    """The trajectory as the node publishes it: stamped `res.lead_s` before its first point."""
    tr = res.trajectory
    return Trajectory(names, tr.t0_s - res.lead_s, tr.times_s + res.lead_s, tr.positions, tr.velocities,
                      tr.accelerations)


def test_samples_within_limits_but_a_curve_the_bridge_refuses_is_never_emitted():
    # A start just above the lower bound, moving toward it and decelerating: the MPC's samples stay in range
    # (the sample-wise check passes), but its cubic dips below the bound between the first two samples,
    # where the bridge's dense check of the interpolated curve refuses it.
    cfg = StitcherConfig(joint_names=("a",), dt=DT, stitch_len=1, v_max=1.0, a_max=20.0, j_max=400.0,
                         q_min=(0.0,), q_max=(1.0,))
    s = Stitcher(cfg)
    x0 = np.array([[1e-4], [-0.05], [5.0]])
    ref = np.zeros((20, 1))
    mpc = s._mpc.solve(x0, ref, DT, s.limits)
    P, V, A = mpc.states
    raw = Trajectory.on_grid(0.0, DT, ("a",), P, V, A)
    initial = Reference(x0[0], x0[1], x0[2], True)
    assert check_limits(DT, P, V, A, s.limits).ok  # the samples pass
    assert not check_trajectory(raw, ("a",), s.accept_limits, 0.0, initial).ok  # the bridge refuses the curve
    res = s.process(Chunk(0.0, ("a",), DT, ref), 0.0, tuple(x0))
    assert res.interpolation_rejects >= 1 and any("interpolated" in m for m in res.messages)
    assert res.generator != "mpc"
    if res.trajectory is not None:  # a fallback that the bridge accepts, or nothing at all
        assert check_trajectory(_published(res, ("a",)), ("a",), s.accept_limits, 0.0, initial).ok
    else:
        assert res.status is StitchStatus.FAILED and s.active is None


def _aloha():
    """(stitcher config, bridge limits, lead) of config/aloha.yaml, limits derived by its limits_from."""
    from plan_stack.config import field_kinds, from_mapping
    from plan_stack.embodiments.registry import joint_limits
    from plan_stack.robot_config import load_robot_config
    from plan_stack.robots import profile

    nodes = {n.name: n for n in load_robot_config("aloha").nodes}
    params = nodes["stitcher"].parameters
    known = field_kinds(StitcherConfig)
    cfg = from_mapping(StitcherConfig, {k: v for k, v in params.items() if k in known})
    bridge = nodes["aloha_bridge"]
    return cfg, joint_limits(profile("aloha"), bridge.parameters), float(params["point_lead_s"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n_chunks=st.integers(1, 5), dv=st.floats(0.1, 1.0), jump=st.floats(0.0, 0.5),
       period=st.integers(2, 8))
def test_every_trajectory_the_stitcher_emits_passes_the_aloha_bridges_own_validation(seed, n_chunks, dv, jump,
                                                                                     period):
    from plan_stack.embodiments.arm_bridge import ArmBridge, ArmBridgeSettings

    cfg, blim, lead = _aloha()
    rng = np.random.default_rng(seed)
    names = cfg.joint_names
    D = len(names)
    s = Stitcher(cfg, lead_s=lead)
    s.prepare(50)
    lo, hi = np.asarray(cfg.q_min), np.asarray(cfg.q_max)
    bridge = ArmBridge(names, blim, ArmBridgeSettings(0.5, 0.02, 1.0, 0.05, 0.8, 1.0, lead),
                       np.ones(D, bool), np.full(D, np.inf))
    bridge.on_joint_state(rng.uniform(lo, hi), 0.0)
    now = delivered = 0.0
    for _ in range(n_chunks):
        now += period * DT + rng.uniform(0.0, DT)  # chunks arrive off the output grid
        here = bridge.follower.peek(now)
        # rough learned-head-like chunk from where the robot's reference is: a random walk of the velocity
        # plus a step, kept in the position range (the stitcher rejects chunks far beyond it)
        v = np.cumsum(rng.normal(0.0, dv, (50, D)), axis=0)
        ref = here.positions + np.cumsum(v * DT, axis=0) - v[0] * DT
        ref[rng.integers(1, 50):] += jump * rng.choice([-1.0, 1.0], D)
        ref = np.clip(ref, lo, hi)
        start = bridge.follower.peek(now + cfg.command_latency_s)
        measured = None if s.active is not None and now <= s.active.end_s else \
            (start.positions, start.velocities, start.accelerations)
        res = s.process(Chunk(now, names, DT, ref), now, measured)
        assert res.status is not StitchStatus.FAILED, res.messages
        # the message reaches the bridge before its first point is due: at once (before its stamp) or later,
        # and never before the previous message (one publisher, reliable: in order; the bridge's clock never
        # goes back)
        received = max(now + rng.choice([0.0, rng.uniform(0.0, lead)]), delivered)
        delivered = received
        verdict = bridge.accept(_published(res, names), received).verdict
        assert verdict.ok, (verdict.message, res.generator, res.messages)
