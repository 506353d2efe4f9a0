"""Stitcher workloads where bounds bind, and the public reference design rebuilt, measured in one run.

Used by `bench/stitch.py --suite binding`. The workloads and their limits (`offset`, `rough`, `tight`,
`rough+stitch`, `infeasible`; 12 DoF or ALOHA's 14) are `stitch_workloads.py`'s.

Every row's trajectories are checked twice: at the samples (`check_limits`) and as the bridge checks
them, on the interpolated curve (`trajectory.checks.check_trajectory`, the bridge's own function,
against the bridge's limits on 14 DoF and the stitcher's on 12): `violations` counts either.

Backends: ours through `Stitcher.process` (everything a chunk costs, including the stitcher's own
bridge check): `mpc` (closed form, DAQP where a bound binds, move blocking as configured:
`mpc_free_steps` 8, `mpc_block` 6), `mpc-unblocked` (the same with one jerk per step, the QP of the
code before move blocking), `mpc-active-set` (the numpy dual active set), `mpc-osqp`, `ruckig`
(the chaser); and the public reference's design rebuilt here, on the same chunks:
`ref-osqp` (one OSQP QP per joint on an Euler triple integrator, eps 1e-2, no polishing,
set up once and warm-started: the fastest way to run that design) and `ref-ruckig` (one
Ruckig update per waypoint: our stitcher with stride 1, lookahead 1).
"""
from __future__ import annotations

import time

import numpy as np
import osqp
import scipy.sparse as sp
from stitch_workloads import DT, ChunkSource, aloha_stitcher, limits_for, names_for  # bench/stitch_workloads.py

from plan_stack.trajectory.checks import check_trajectory
from plan_stack.trajectory.config import StitcherConfig
from plan_stack.trajectory.core import Trajectory
from plan_stack.trajectory.limits import Limits, check_limits
from plan_stack.trajectory.stitching import Chunk, Stitcher, StitchStatus, accept_limits

BACKENDS = ("mpc", "mpc-unblocked", "mpc-active-set", "mpc-osqp", "ruckig", "ref-osqp", "ref-ruckig")


def interpolated_ok(names, q, v, a, lim: Limits) -> bool:
    """The bridge's own check of the curve a quintic-interpolating controller follows through samples
    [T, D] from the first one (its joints `names`, limits `lim` in that order)."""
    traj = Trajectory.on_grid(0.0, DT, names, q, v, a)
    return check_trajectory(traj, names, lim, 0.0).ok


class ReferenceOsqp:
    """The public reference's post-processing, rebuilt: per joint one OSQP QP on the Euler triple
    integrator q+ = q + dt v, v+ = v + dt a, a+ = a + dt j, states and jerks as variables, box
    limits on v, a, j, cost sum (q - r)^2 + 1e-6 |z|^2, eps 1e-2, no polishing. One solver per
    joint, set up once and warm-started (favourable to the reference)."""

    def __init__(self, H: int, lim: Limits) -> None:
        self.H, self.lim = H, lim
        self.solvers = []
        n = H  # samples 0..H-1, jerks 0..H-2
        nx = 3 * n + (n - 1)
        self.nx = nx
        P = sp.diags(np.concatenate([np.full(n, 2.0), np.full(2 * n + n - 1, 2e-6)]), format="csc")
        iq, iv, ia, ij = 0, n, 2 * n, 3 * n
        rows, cols, vals = [], [], []
        r = 0
        for k in range(n - 1):  # dynamics: x_{k+1} - x_k - dt * (next derivative) = 0
            for base, der in ((iq, iv), (iv, ia), (ia, ij)):
                rows += [r, r, r]
                cols += [base + k + 1, base + k, der + k]
                vals += [1.0, -1.0, -DT]
                r += 1
        for base in (iq, iv, ia):  # start state
            rows.append(r), cols.append(base), vals.append(1.0)
            r += 1
        n_eq = r
        for k in range(nx):  # bounds on every variable
            rows.append(r), cols.append(k), vals.append(1.0)
            r += 1
        self.A = sp.csc_matrix((vals, (rows, cols)), shape=(r, nx))
        self.n_eq, self.P = n_eq, P

    def solve(self, x0: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x0 [3, D], ref [H, D] -> q, v, a [H, D]."""
        H, D = ref.shape
        n, lim = self.H, self.lim
        out = np.empty((3, H, D))
        for d in range(D):
            if len(self.solvers) <= d:
                s = osqp.OSQP()
                s.setup(self.P, np.zeros(self.nx), self.A, np.zeros(self.A.shape[0]), np.zeros(self.A.shape[0]),
                        eps_abs=1e-2, eps_rel=1e-2, polishing=False, verbose=False, warm_starting=True)
                self.solvers.append(s)
            q = np.zeros(self.nx)
            q[:n] = -2.0 * ref[:, d]
            lo = np.concatenate([np.zeros(self.n_eq - 3), x0[:, d], np.full(n, -1e9), np.full(n, -lim.v_max[d]),
                                 np.full(n, -lim.a_max[d]), np.full(n - 1, -lim.j_max[d])])
            hi = np.concatenate([np.zeros(self.n_eq - 3), x0[:, d], np.full(n, 1e9), np.full(n, lim.v_max[d]),
                                 np.full(n, lim.a_max[d]), np.full(n - 1, lim.j_max[d])])
            s = self.solvers[d]
            s.update(q=q, l=lo, u=hi)
            res = s.solve(raise_error=False)
            x = res.x if res.x is not None else np.full(self.nx, np.nan)
            out[0, :, d], out[1, :, d], out[2, :, d] = x[:n], x[n:2 * n], x[2 * n:3 * n]
        return out


class BindingCase:
    """One (workload, backend, dof) row, run a few calls at a time (interleaved rounds)."""

    def __init__(self, workload: str, backend: str, dof: int, H: int, seed: int) -> None:
        self.workload, self.backend, self.dof, self.H = workload, backend, dof, H
        names, discrete = names_for(dof)
        lim = limits_for(workload, dof)
        self.mask = np.array([n in discrete for n in names])
        self.src = ChunkSource(workload, dof, H, seed, lim, self.mask)
        per_sample = backend == "ref-ruckig"
        base = aloha_stitcher() if dof == 14 else dict(joint_names=names, discrete_joints=discrete, **lim)
        base.update(dt=DT, backend="ruckig" if backend in ("ruckig", "ref-ruckig") else "mpc",
                    qp_solver={"mpc-osqp": "osqp", "mpc-active-set": "active_set"}.get(backend, "daqp"),
                    command_latency_s=0.0, stitch_len=3)
        if per_sample:
            base.update(ruckig_stride=1, ruckig_lookahead=1)
        if backend == "mpc-unblocked":
            base.update(mpc_block=1)
        self.cfg = StitcherConfig(**base)
        self.accept = accept_limits(self.cfg)
        self.interp_viol = 0
        self.st = Stitcher(self.cfg)
        self.st.prepare(H)
        self.ref = ReferenceOsqp(H, self.st.limits) if backend == "ref-osqp" else None
        self.times: list[float] = []
        self.viol = self.fallbacks = self.failed = self.constrained = self.calls = 0
        self.ratios: list[tuple[float, float, float]] = []
        self.rms: list[float] = []

    def run(self, calls: int, record: bool = True, period_s: float = 0.0) -> None:
        """`period_s` > 0: one call per period, as chunks arrive (caches and the CPU cool down in between)."""
        for _ in range(calls):
            if period_s > 0:
                time.sleep(period_s)
            chunk, now, measured = self.src.next()
            if measured is not None:
                self.st.reset()
            if self.ref is not None:
                self._run_reference(chunk, now, measured, record)
                continue
            t0 = time.perf_counter()
            res = self.st.process(chunk, now, measured)
            elapsed = (time.perf_counter() - t0) * 1e3
            if res.status is not StitchStatus.FAILED and self.workload == "rough+stitch":
                self.src.last = None if res.trajectory is None else self.src.last
            if not record:
                continue
            self.calls += 1
            self.times.append(elapsed)
            self.constrained += res.constrained_joints
            if res.status is StitchStatus.FAILED:
                self.failed += 1
                continue
            self.fallbacks += res.status is StitchStatus.FALLBACK
            if not res.report.ok:
                self.viol += 1
            if self.workload != "infeasible":
                # the emitted trajectory against the real limits (the infeasible start is outside them)
                c = ~self.mask
                tr = res.trajectory
                rep = check_limits(DT, tr.positions[:, c], tr.velocities[:, c], tr.accelerations[:, c],
                                   self.st.limits)
                interp = interpolated_ok(self.cfg.joint_names, tr.positions, tr.velocities, tr.accelerations,
                                         self.accept)
                self.interp_viol += not interp
                self.viol += (not rep.ok or not interp) and res.report.ok
                self.ratios.append((rep.v_ratio, rep.a_ratio, rep.j_ratio))
                k = round((tr.t0_s - chunk.stamp_s) / DT)
                n = min(len(tr.positions), len(chunk.positions) - k)
                self.rms.append(float(np.sqrt(np.mean((tr.positions[:n, c] - chunk.positions[k:k + n, c]) ** 2))))

    def _run_reference(self, chunk, now, measured, record) -> None:
        c = ~self.mask
        if measured is None:  # consecutive: start from the previous output at the new chunk's start
            prev = self._prev
            x0 = prev[:, 10]
        else:
            x0 = np.asarray(measured)[:, c]
        ref = chunk.positions[:, c]
        t0 = time.perf_counter()
        out = self.ref.solve(x0, ref)
        elapsed = (time.perf_counter() - t0) * 1e3
        self._prev = out
        if not record:
            return
        self.calls += 1
        self.times.append(elapsed)
        self.constrained += int(c.sum())  # every joint goes through the QP
        if not np.all(np.isfinite(out)):
            self.failed += 1
            return
        rep = check_limits(DT, out[0], out[1], out[2], self.st.limits)
        if self.workload != "infeasible":
            names = tuple(np.asarray(self.cfg.joint_names)[c])
            interp = interpolated_ok(names, out[0], out[1], out[2], self.accept.subset(np.flatnonzero(c)))
            self.interp_viol += not interp
            self.viol += not rep.ok or not interp
            self.ratios.append((rep.v_ratio, rep.a_ratio, rep.j_ratio))
            self.rms.append(float(np.sqrt(np.mean((out[0] - ref) ** 2))))
        else:
            self.viol += not rep.ok

    def row(self) -> dict:
        t = np.array(self.times)
        r = np.array(self.ratios) if self.ratios else np.full((1, 3), np.nan)
        n_cont = int((~self.mask).sum())
        return {
            "workload": self.workload, "backend": self.backend, "dof": self.dof, "horizon": self.H,
            "median_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)),
            "p99_ms": float(np.percentile(t, 99)), "min_ms": float(t.min()),
            "constrained_frac": self.constrained / max(1, self.calls * n_cont),
            "rms_error": float(np.mean(self.rms)) if self.rms else float("nan"),
            "max_v_ratio": float(r[:, 0].max()), "max_a_ratio": float(r[:, 1].max()),
            "max_j_ratio": float(r[:, 2].max()), "violations": self.viol, "interp_violations": self.interp_viol,
            "fallbacks": self.fallbacks,
            "failed": self.failed, "samples": self.calls,
        }


COLUMNS = ["workload", "backend", "dof", "median_ms", "p90_ms", "p99_ms", "min_ms", "constrained_frac", "rms_error",
           "max_v_ratio", "max_a_ratio", "max_j_ratio", "violations", "interp_violations", "fallbacks", "failed",
           "x_reference", "paced_hz",
           "samples"]

#: The slow exact numpy active set gets fewer calls (it takes ~100x longer on binding chunks).
SLOW_BACKENDS = {"mpc-active-set": 0.1}


def run_binding(workloads, backends, dofs, H, reps, warmup, seed, rounds=5, paced_hz: float = 0.0) -> list[dict]:
    """`paced_hz` > 0: each case's calls come at that rate instead of back to back."""
    period_s = 1.0 / paced_hz if paced_hz > 0 else 0.0
    cases = [BindingCase(w, b, d, H, seed) for d in dofs for w in workloads for b in backends]
    for case in cases:
        case.run(max(2, warmup if case.backend not in SLOW_BACKENDS else 2), record=False)
    for _ in range(rounds):
        for case in cases:
            n = max(1, round(reps * SLOW_BACKENDS.get(case.backend, 1.0) / rounds))
            case.run(n, period_s=period_s)
    rows = [{**case.row(), "paced_hz": paced_hz} for case in cases]
    ref = {(r["workload"], r["dof"], "mpc" if r["backend"] == "ref-osqp" else "ruckig"): r["median_ms"]
           for r in rows if r["backend"] in ("ref-osqp", "ref-ruckig")}
    for r in rows:
        family = "ruckig" if "ruckig" in r["backend"] else "mpc"
        base = ref.get((r["workload"], r["dof"], family), float("nan"))
        r["x_reference"] = base / r["median_ms"]
    return rows


DDS_COLUMNS = ["suite", "workload", "dof", "chunks", "received", "p50_ms", "p95_ms", "p99_ms", "solve_p50_ms",
               "convert_p50_ms", "convert_share", "to_callback_p50_ms", "callback_to_publish_p50_ms",
               "publish_to_receipt_p50_ms", "publish_to_return_p50_ms", "publish_call_p50_ms", "solve_p95_ms",
               "to_callback_p95_ms", "callback_to_publish_p95_ms", "publish_to_receipt_p95_ms", "generators"]


def run_dds(n_chunks: int = 60, rate_hz: float = 10.0, seed: int = 0) -> list[dict]:
    """Chunk -> trajectory latency of the `stitcher` node over DDS (config/aloha.yaml's stitcher
    parameters): a publisher node sends rough 14-DoF chunks, a subscriber node receives the
    JointTrajectory; each node spins on its own executor in its own thread (as `plan-stack up`).
    Latency = publish call -> receipt. Conversion = ActionChunk -> Chunk, Trajectory ->
    the serialized JointTrajectory (the node publishes CDR built from the arrays; the receiver reads it raw
    into a Trajectory, as the bridges do, and the latency ends there), timed on the same messages; its share
    is of the median latency."""
    import threading

    import rclpy
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from plan_stack.config import field_kinds
    from plan_stack.msg import ActionChunk
    from plan_stack.robot_config import load_robot_config
    from plan_stack.ros.lifecycle import executor_for
    from plan_stack.ros.qos import RELIABLE_QOS, SENSOR_QOS
    from plan_stack.ros.testing import ros_context
    from plan_stack.ros.trajectory import trajectory_from_cdr, trajectory_to_cdr
    from plan_stack.trajectory.stitcher_node import StitcherNode
    from plan_stack.trajectory.stitching import discrete_bounds, joint_columns, limits_from_config

    spec = next(s for s in load_robot_config("aloha").nodes if s.name == "stitcher")
    # no bridge here: every chunk starts from the measured state (`initial_state: bridge` would wait for a report)
    params = {**spec.parameters, "use_sim_time": False, "joint_state_timeout_s": 1e6,
              "initial_state": "joint_states"}
    names = tuple(params["joint_names"])
    discrete = np.array([n in params.get("discrete_joints", []) for n in names])
    src = ChunkSource("rough", len(names), 50, seed, {k: params[k] for k in ("v_max", "a_max")}, discrete)
    # The stitcher's own position range (the bridge's moved inward by the LimitRule margin): a measured start
    # outside it is an infeasible start (braked, the chunk ignored), not the binding solve this bench times.
    known = field_kinds(StitcherConfig)
    cfg = StitcherConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items() if k in known})
    own, _ = limits_from_config(cfg)
    cidx, didx = joint_columns(cfg)
    q_lo, q_hi = np.full(len(names), -np.inf), np.full(len(names), np.inf)
    q_lo[cidx], q_hi[cidx] = own.q_min, own.q_max
    q_lo[didx], q_hi[didx] = discrete_bounds(cfg)
    sent: list[float] = []
    got: list[float] = []
    conv_in: list[float] = []
    conv_out: list[float] = []
    conv_recv: list[float] = []  # the receiver's trajectory_from_cdr, as a bridge reads the stream
    entered: list[float] = []  # the chunk callback starts
    published: list[float] = []  # the stitcher's publish call returns
    returned: list[float] = []  # the chunk callback returns (diagnostics done)
    publish_call: list[float] = []  # rclpy's publish call (the message's conversion to C and the DDS write), ms
    on_chunk = StitcherNode._on_chunk

    def timed_callback(self, msg):  # the callback as the subscription calls it (bound at node creation)
        entered.append(time.perf_counter())
        on_chunk(self, msg)
        returned.append(time.perf_counter())

    with ros_context() as ctx, _patched(StitcherNode, "_on_chunk", timed_callback):
        node = StitcherNode(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        pub_call = node.pub.publish

        def timed_publish(m):
            t0 = time.perf_counter()
            pub_call(m)
            published.append(time.perf_counter())
            publish_call.append((published[-1] - t0) * 1e3)

        node.pub.publish = timed_publish
        peer = rclpy.create_node("dds_bench_peer", context=ctx)
        pub = peer.create_publisher(ActionChunk, "action_chunk", RELIABLE_QOS)
        js = peer.create_publisher(JointState, "joint_states", SENSOR_QOS)
        arrived = threading.Event()  # the main thread blocks on it (polling would take the GIL every wake-up)

        def on_trajectory(data: bytes) -> None:  # as the bridges read it: raw, then the arrays with numpy
            t0 = time.perf_counter()
            trajectory_from_cdr(data)
            got.append(time.perf_counter())
            conv_recv.append((got[-1] - t0) * 1e3)
            arrived.set()

        peer.create_subscription(JointTrajectory, "trajectory", on_trajectory, RELIABLE_QOS, raw=True)
        solve_ms: list[float] = []
        generators: dict[str, int] = {}  # which generator made the trajectories (mpc: the binding solve timed)
        orig = node.stitcher.process
        emitted: list = []

        def timed(*a, **k):
            r = orig(*a, **k)
            solve_ms.append(r.solve_ms)
            generators[r.generator or "failed"] = generators.get(r.generator or "failed", 0) + 1
            if r.trajectory is not None:  # converted again after the run: not in the latency measured here
                emitted.append((r.trajectory, r.lead_s))
            return r

        node.stitcher.process = timed
        executors, threads = [], []

        def spin(ex):
            try:
                ex.spin()
            except Exception:  # shutdown while spinning
                pass

        for n in (node, peer):
            ex = executor_for(n)
            ex.add_node(n)
            executors.append(ex)
            threads.append(threading.Thread(target=spin, args=(ex,), daemon=True))
            threads[-1].start()
        deadline = time.time() + 20
        while (pub.get_subscription_count() == 0 or peer.count_publishers("trajectory") == 0) and \
                time.time() < deadline:
            time.sleep(0.05)
        chunk, _, measured = src.next()
        q0 = np.minimum(np.maximum(measured[0], q_lo), q_hi)  # a measured state inside the robot's range
        q_js = q0  # joint_states units (e.g. gripper metres): the node maps them by state_scale / state_offset
        if params.get("state_scale"):
            q_js = q0 / np.asarray(params["state_scale"], float) + np.asarray(params["state_offset"], float)
        for _ in range(20):
            js.publish(JointState(name=list(names), position=q_js.tolist(), velocity=[0.0] * len(names)))
            time.sleep(0.01)
        for _ in range(n_chunks):
            chunk, _, measured = src.next()
            node.stitcher.reset()  # every chunk from the measured state: a fresh rough solve each time
            msg = ActionChunk()
            stamp = node.get_clock().now().nanoseconds
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
            msg.joint_names = list(names)
            msg.dt = DT
            msg.horizon = 50
            # inside the robot's range, as a head trained on its demonstrations is (the stitcher rejects
            # samples beyond q_min/q_max by more than position_tolerance)
            ref = np.minimum(np.maximum(chunk.positions - chunk.positions[0] + q0, q_lo), q_hi)
            msg.positions = ref.ravel().tolist()
            c0 = time.perf_counter()
            Chunk.from_flat(0.0, msg.joint_names, msg.dt, msg.horizon, msg.positions)
            conv_in.append((time.perf_counter() - c0) * 1e3)
            arrived.clear()
            t0 = time.perf_counter()
            pub.publish(msg)
            sent.append(t0)
            arrived.wait(2.0)
            time.sleep(max(0.0, 1.0 / rate_hz - (time.perf_counter() - t0)))
        for n, ex in zip((node, peer), executors):
            ex.remove_node(n)
            ex.shutdown(timeout_sec=1.0)
        for t in threads:
            t.join(timeout=2.0)
        peer.destroy_node()
        node.close()
        node.destroy_node()
    for traj, lead_s in emitted:  # the node's conversion, timed on the same trajectories after the run
        t0 = time.perf_counter()
        trajectory_to_cdr(traj, 0, lead_s=lead_s)
        conv_out.append((time.perf_counter() - t0) * 1e3)
    lat = np.array([g - s for s, g in zip(sent, got)]) * 1e3
    convert_p50 = float(np.median(conv_in) + np.median(conv_out) + np.median(conv_recv)) if conv_recv else float("nan")
    p50 = float(np.percentile(lat, 50)) if len(lat) else float("nan")
    pct = (lambda q: float(np.percentile(lat, q))) if len(lat) else (lambda q: float("nan"))
    n = min(len(sent), len(entered), len(published), len(returned), len(got))

    def med(a, b, q: float = 50) -> float:  # percentile q of b - a over the chunks (ms)
        return float(np.percentile((np.asarray(b[:n]) - np.asarray(a[:n])) * 1e3, q)) if n else float("nan")

    return [{"suite": "dds", "workload": "rough", "dof": len(names), "chunks": n_chunks, "received": len(lat),
             "p50_ms": p50, "p95_ms": pct(95), "p99_ms": pct(99),
             "solve_p50_ms": float(np.median(solve_ms)) if solve_ms else float("nan"),
             "convert_p50_ms": convert_p50, "convert_share": convert_p50 / p50 if p50 else float("nan"),
             "to_callback_p50_ms": med(sent, entered), "callback_to_publish_p50_ms": med(entered, published),
             "publish_to_receipt_p50_ms": med(published, got), "publish_to_return_p50_ms": med(published, returned),
             "publish_call_p50_ms": float(np.median(publish_call)) if publish_call else float("nan"),
             # where the tail is: each part's own p95 (the parts' p95s do not add up to the latency's)
             "solve_p95_ms": float(np.percentile(solve_ms, 95)) if solve_ms else float("nan"),
             "to_callback_p95_ms": med(sent, entered, 95), "callback_to_publish_p95_ms": med(entered, published, 95),
             "publish_to_receipt_p95_ms": med(published, got, 95),
             "generators": " ".join(f"{k}:{v}" for k, v in sorted(generators.items()))}]


class _patched:
    """Set `owner.name = value` for the duration of a with block (a class attribute: a bound method that a
    node registers as a callback at creation)."""

    def __init__(self, owner, name: str, value) -> None:
        self.owner, self.name, self.value = owner, name, value

    def __enter__(self):
        self.saved = self.owner.__dict__[self.name]
        setattr(self.owner, self.name, self.value)
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.owner, self.name, self.saved)


BRIDGE_COLUMNS = ["suite", "robot", "seed", "delay_max_ms", "late_join_s", "chunks", "published", "refused",
                  "accepted_late", "fallbacks", "interpolation_rejects", "failed", "first_refusal"]


def run_bridge(robots=("aloha", "franka"), seeds=(0, 1), delays_ms=(0.0, 5.0, 30.0, 90.0), n_chunks=300,
               late_joins_s=(0.1,)) -> list[dict]:
    """The stitcher and its bridge's decisions (`ArmBridge`, the bridge nodes' library) in one process, with
    the robot config's parameters: rough chunks every 0.10-0.12 s (off the output grid) from where the
    bridge's reference is, each trajectory published with the node's lead and accepted by the bridge up to
    `delay` after the chunk; the stitcher keeps stitching onto what the bridge executes (after a refusal, the
    bridge's last accepted command). Counts the bridge's refusals (goal: 0) and the commands it accepted late,
    joined over `late_join_s` (each value in `late_joins_s` is a row; 0: late commands refused as they are)."""
    import dataclasses

    from plan_stack.config import field_kinds, from_mapping
    from plan_stack.embodiments.arm_bridge import ArmBridge, ArmBridgeSettings
    from plan_stack.embodiments.registry import joint_limits
    from plan_stack.robot_config import load_robot_config
    from plan_stack.robots import profile_of_bridge

    rows = []
    for robot in robots:
        nodes = {n.name: n for n in load_robot_config(robot).nodes}
        spec = next(n for n in nodes.values() if n.executable == "stitcher")
        bnode, bridge_robot = next((n, r) for n in nodes.values() if (r := profile_of_bridge(n.executable)) is not None
                                   and r.parts.bridge_limits is not None)
        known = field_kinds(StitcherConfig)
        cfg = from_mapping(StitcherConfig, {k: v for k, v in spec.parameters.items() if k in known})
        lead = float(spec.parameters.get("point_lead_s", 0.0))
        blim = joint_limits(bridge_robot, bnode.parameters)
        names = cfg.joint_names
        D = len(names)
        blim = blim.subset([blim.joint_names.index(n) for n in names])
        lo = np.asarray(cfg.q_min, float) if len(cfg.q_min) == D else blim.q_min
        hi = np.asarray(cfg.q_max, float) if len(cfg.q_max) == D else blim.q_max
        for seed, delay_ms, late_join in ((a, b, c) for a in seeds for b in delays_ms for c in late_joins_s):
            rng = np.random.default_rng(seed)
            st = Stitcher(cfg, lead_s=lead)
            st.prepare(50)
            br = ArmBridge(names, blim, ArmBridgeSettings(0.5, float(bnode.parameters.get("jump_tolerance", 0.02)),
                                                          1.0, 0.05, 0.8, 1.0, cfg.command_latency_s,
                                                          late_join_s=late_join),
                           np.ones(D, bool), np.full(D, np.inf))
            br.on_joint_state(np.clip(rng.uniform(-0.5, 0.5, D), lo, hi), 0.0)
            now, last_cmd = 0.0, None
            row = dict(suite="bridge", robot=robot, seed=seed, delay_max_ms=delay_ms, late_join_s=late_join,
                       chunks=n_chunks, published=0, refused=0, accepted_late=0, fallbacks=0,
                       interpolation_rejects=0, failed=0, first_refusal="")
            for _ in range(n_chunks):
                now += 0.1 + rng.uniform(0.0, DT)
                assert br.follower is not None
                here = br.follower.peek(now)
                v = np.cumsum(rng.normal(0.0, 0.5, (50, D)), axis=0)
                ref = here.positions + np.cumsum(v * DT, axis=0) - v[0] * DT
                ref[rng.integers(1, 50):] += 0.3 * rng.choice([-1.0, 1.0], D)
                start = br.follower.peek(now + cfg.command_latency_s)
                measured = None if st.active is not None and now <= st.active.end_s else \
                    (start.positions, start.velocities, start.accelerations)
                res = st.process(Chunk(now, names, DT, np.clip(ref, lo, hi)), now, measured)
                row["interpolation_rejects"] += res.interpolation_rejects
                if res.trajectory is None:
                    row["failed"] += 1
                    continue
                row["fallbacks"] += res.status is StitchStatus.FALLBACK
                tr = res.trajectory
                msg = dataclasses.replace(tr, stamp_s=tr.t0_s - res.lead_s, times_s=tr.times_s + res.lead_s,
                                          dt_s=None)
                acc = br.accept(msg, now + rng.uniform(0.0, delay_ms * 1e-3))
                row["published"] += 1
                if acc.verdict.ok:
                    last_cmd = acc.command
                    row["accepted_late"] += bool(acc.verdict.message)
                else:
                    row["refused"] += 1
                    row["first_refusal"] = row["first_refusal"] or acc.verdict.message
                    st.adopt(last_cmd)  # stitch onto what the bridge executes
            rows.append(row)
    return rows
