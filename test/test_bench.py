"""Benchmarks keep working: each runs briefly and writes the documented JSON columns.

Only that the scripts run and report what the issues ask for is checked
here; their figures are read from full runs, never asserted in tests.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

CASES = {
    "rtc": (["--synthetic", "4", "--synthetic-length", "60", "--train-steps", "2", "--horizon", "16",
             "--execution-steps", "8", "--delays", "0,4", "--max-episodes", "1", "--head", "plain",
             "--rtc-head", "rtc", "--stitcher"],
            {"method", "delay_steps", "seam_jump_pos", "seam_jump_vel", "jerk_rms", "tracking_rmse", "inference_ms"}),
    "stitch": (["--suite", "easy", "--reps", "5", "--warmup", "1", "--dof", "12"],
               {"backend", "mode", "dof", "horizon", "median_ms", "p99_ms", "rms_error", "max_v_ratio",
                "max_a_ratio", "max_j_ratio", "seam_jump_pos", "seam_jump_vel", "seam_jump_acc", "x_per_sample"}),
    "engines": (["--reps", "2", "--context", "16", "--image-px", "64"],
                {"model", "backend", "p50_ms", "p95_ms", "max_abs_diff", "speedup_vs_eager", "note"}),
    "stitch:binding": (["--suite", "binding", "--reps", "2", "--warmup", "1", "--dof", "14", "--binding-backends",
                        "mpc", "ruckig", "ref-osqp", "ref-ruckig"],
                       {"workload", "backend", "dof", "median_ms", "p90_ms", "constrained_frac", "violations",
                        "failed", "x_reference"}),
    "stitch:binding-paced": (["--suite", "binding", "--reps", "2", "--warmup", "1", "--dof", "12", "--workloads",
                              "rough", "--binding-backends", "mpc", "--paced-hz", "50"],
                             {"workload", "backend", "median_ms", "paced_hz", "violations"}),
    "stitch:bridge": (["--suite", "bridge", "--bridge-chunks", "5"],
                      {"suite", "robot", "seed", "delay_max_ms", "published", "refused", "interpolation_rejects"}),
    "stitch_ab": (["--reps", "2", "--warmup", "1", "--rounds", "1", "--dof", "12", "--workloads", "rough",
                   "--backends", "mpc"],
                  {"workload", "backend", "dof", "base_median_ms", "new_median_ms", "x_median", "max_sample_diff",
                   "verdicts_differ", "violations"}),
    "stitch:dds": (["--suite", "dds", "--dds-chunks", "5"],
                   {"suite", "dof", "chunks", "received", "p50_ms", "p95_ms", "p99_ms", "convert_share",
                    "solve_p95_ms", "to_callback_p95_ms", "callback_to_publish_p95_ms", "publish_to_receipt_p95_ms"}),
    "graph": (["--parts", "idle", "--executors", "per_node", "--idle-nodes", "stitcher", "--idle-window", "1",
               "--startup", "3"], {"part", "executor", "node", "cpu_percent", "x_cpu", "load1"}),
    "sim": (["--seconds", "0.05"], {"sim", "cameras", "width", "height", "steps_per_s", "sets_per_s"}),
    "ingest": (["--duration", "1.5", "--warmup", "0.3", "--methods", "sync,naive", "--transports", "default"],
               {"method", "sets_per_s", "matched_fraction", "latency_p50_ms", "latency_p99_ms", "e2e_p50_ms",
                "e2e_p99_ms", "cpu_percent", "transport"}),
    "viz": (["--reps", "5", "--rounds", "1", "--warmup", "1"],
            {"case", "calls", "mean_us", "median_us", "p95_us", "worst_us", "x_idle", "x_idle_median",
             "cpu_at_10hz_percent"}),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ("engines", "ingest", "rtc") else n
                                  for n in sorted(CASES)])
def test_benchmark_prints_a_table_and_writes_its_json_rows(name, tmp_path):
    args, columns = CASES[name]
    out = tmp_path / f"{name.replace(':', '_')}.json"
    res = subprocess.run([sys.executable, str(BENCH / f"{name.split(':')[0]}.py"), *args, "--json", str(out)],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{name}: {c} is not JSON"))
    assert rows and all(columns <= set(r) for r in rows), columns - set(rows[0])
    header = res.stdout.splitlines()[0].split()
    assert set(header) & columns  # the printed table carries the same columns


@pytest.fixture(scope="module")
def aloha_heldout(tmp_path_factory):
    """Two held-out ALOHA episodes recorded as the shipped model's data (its manifest's `recorded_with`)."""
    import shlex

    from plan_stack.cli import main
    from plan_stack.paths import find_data

    out = tmp_path_factory.mktemp("aloha_heldout")
    manifest = json.loads((find_data("models", "aloha") / "manifest.json").read_text())
    argv = shlex.split(manifest["data"]["recorded_with"])[1:]
    assert main([*argv, "--episodes", "2", "--seed", "100000", "--out", str(out)]) == 0
    return out


def _shipped_head(variant: str) -> str:
    from plan_stack.paths import find_data

    return str(find_data("models", f"aloha/action_head/{variant}"))


@pytest.mark.slow
def test_rtc_bench_runs_the_shipped_heads_on_the_plan_features_they_were_trained_on(aloha_heldout, tmp_path):
    """The shipped heads are conditioned on their target's plan features ([tokens, 192]), not on the
    ground-truth plan tokens ([tokens, 16]) the demos alone give: the bench builds those features with the
    target of the model directory the heads lie in."""
    out = tmp_path / "rtc.json"
    res = subprocess.run([sys.executable, str(BENCH / "rtc.py"), "--demos", str(aloha_heldout),
                          "--head", _shipped_head("plain"), "--rtc-head", _shipped_head("rtc"), "--delays", "0,4",
                          "--methods", "naive,training_time", "--max-episodes", "1", "--stitcher", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "conditioning: plan features of" in res.stderr
    rows = json.loads(out.read_text())
    assert {(r["method"], r["stage"], r["delay_steps"]) for r in rows} == {
        (m, st, d) for m in ("naive", "training_time") for st in ("chunks", "stitched") for d in (0, 4)}
    assert set(CASES["rtc"][1]) <= set(rows[0])


def test_rtc_bench_refuses_episodes_that_cannot_carry_a_heads_conditioning(tmp_path):
    """Said before anything is computed, naming what to pass: synthetic episodes carry no plan features,
    and another model's target makes other features than the head was trained on."""
    from plan_stack.paths import find_data

    heads = ["--head", _shipped_head("plain"), "--rtc-head", _shipped_head("rtc"), "--methods", "naive"]
    res = subprocess.run([sys.executable, str(BENCH / "rtc.py"), "--synthetic", "2", *heads],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0 and "use --demos DIR" in res.stderr, res.stderr[-2000:]
    (tmp_path / "demos").mkdir()
    res = subprocess.run([sys.executable, str(BENCH / "rtc.py"), "--demos", str(tmp_path / "demos"), *heads,
                          "--model", str(find_data("models", "franka"))],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0, res.stderr[-2000:]
    (line,) = [x for x in res.stderr.splitlines() if x.strip()]
    assert "sha256" in line and "pass --model with the model directory the head was trained with" in line


def test_graph_bench_brings_up_aloha_without_its_models(tmp_path):
    """bench/graph.py's `--sim-models without` rows run config/aloha.yaml less the planner and the chunker,
    as a file `plan-stack up --config` accepts, with every other node unchanged."""
    from plan_stack.robot_config import load_robot_config

    graph = _graph_module()
    full = {s.name: s for s in load_robot_config("aloha").nodes}
    lean = {s.name: s for s in load_robot_config(graph._config_without_models(str(tmp_path))).nodes}
    assert set(graph.MODEL_NODES) <= set(full)
    assert set(lean) == set(full) - set(graph.MODEL_NODES)
    assert all(lean[n].parameters == full[n].parameters for n in lean)


def test_graph_bench_leaves_out_the_events_rows_where_rclpy_has_no_events_executor(tmp_path):
    """Jazzy's rclpy has no `rclpy.experimental.EventsExecutor`: bench/graph.py runs the other executors' rows
    and says why the `events` ones are missing, instead of failing them. A `sitecustomize` on PYTHONPATH makes
    the import fail in the bench and in every process it starts, as on Jazzy."""
    shim = tmp_path / "jazzy_rclpy"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['rclpy.experimental'] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "graph.json"
    res = subprocess.run([sys.executable, str(BENCH / "graph.py"), "--parts", "idle", "--executors", "per_node",
                          "events", "--idle-nodes", "stitcher", "--idle-window", "1", "--startup", "3",
                          "--json", str(out)], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "no EventsExecutor" in res.stderr and "`events` rows are left out" in res.stderr, res.stderr[-2000:]
    rows = json.loads(out.read_text(), parse_constant=lambda c: c)
    assert [(r["executor"], r["mode"]) for r in rows] == [("per_node", "process")], rows


def test_graph_bench_runs_per_node_when_only_events_was_asked_for_and_rclpy_lacks_it(monkeypatch, capsys):
    graph = _graph_module()
    monkeypatch.setitem(sys.modules, "rclpy.experimental", None)
    assert graph.events_executor_class() is None
    assert graph.usable_executors(["events"]) == ["per_node"]
    assert "running `per_node` instead" in capsys.readouterr().err
    assert graph.usable_executors(["mt_spin_once", "per_node"]) == ["mt_spin_once", "per_node"]
    assert capsys.readouterr().err == ""
    with pytest.raises(RuntimeError, match="no EventsExecutor"):
        graph.spin_nodes([], "events", threading.Event())


def _graph_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("graph_bench", BENCH / "graph.py")
    graph = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))  # graph.py imports bench/report.py
    try:
        spec.loader.exec_module(graph)
    finally:
        sys.path.remove(str(BENCH))
    return graph


@pytest.mark.slow
def test_train_bench_compares_one_process_with_ranks(tmp_path):
    """bench/train.py trains the recipe's target and drafter on a recorded split, one process against ranks,
    and times the heads' plan-feature pass one keyframe against several per target pass."""
    from plan_stack.embodiments.drive.recording import DriveRecordOptions, record_episode

    record_episode(7, tmp_path / "split", DriveRecordOptions(width=112, height=112, duration_s=2.0,
                                                             camera_rate_hz=2.0, keyframe_period_s=0.5))
    out = tmp_path / "train.json"
    res = subprocess.run([sys.executable, str(BENCH / "train.py"), "--robot", "drive", "--data",
                          str(tmp_path / "split"), "--steps", "2", "--reps", "1", "--threads", "2", "--json", str(out),
                          "--stages", "target,drafter,selection,features", "--selection-keyframes", "3",
                          "--feature-batches", "1,3"],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = json.loads(out.read_text())
    runs = [(r["stage"], r["ranks"], r["per_pass"]) for r in rows if r["rep"] != "median"]
    assert sorted(runs) == [("drafter", 1, 8), ("drafter", 2, 8), ("features", 1, 1), ("features", 1, 3),
                            ("selection", 1, 1), ("selection", 2, 1), ("target", 1, 16), ("target", 2, 16)]
    assert {r["steps"] for r in rows if r["stage"] == "selection"} == {3}  # keyframes decoded by the shipped model
    assert {r["steps"] for r in rows if r["stage"] == "features"} == {5}  # every keyframe of the 2 s drive
    assert all(r["steps_per_s"] > 0 for r in rows)
    first = {"target": (1, 16), "drafter": (1, 8), "selection": (1, 1), "features": (1, 1)}
    ratios = {r["stage"]: r["x_vs_first"] for r in rows
              if r["rep"] == "median" and (r["ranks"], r["per_pass"]) == first[r["stage"]]}
    assert ratios == {"target": 1.0, "drafter": 1.0, "selection": 1.0, "features": 1.0}


@pytest.mark.slow
def test_decode_bench_runs_the_target_steps_both_ways_and_they_decode_the_same(tmp_path):
    """bench/decode.py with `--target-steps direct,model`: a row per decoder, output and variant, the same
    target forwards either way (the bench itself refuses variants that decode different tokens)."""
    out = tmp_path / "decode.json"
    res = subprocess.run([sys.executable, str(BENCH / "decode.py"), "--sizes", "2m", "--reps", "1",
                          "--target-steps", "direct,model", "--text-tokens", "8", "--speculation-probe-every", "0",
                          "--json", str(out)],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert len(rows) == 5 * 3 * 2
    by = {(r["decoder"], r["output"], r["target_steps"]): r for r in rows}
    for (decoder, output, steps), r in by.items():
        other = by[decoder, output, "model" if steps == "direct" else "direct"]
        assert r["target_forwards"] == other["target_forwards"]
        assert r["decode_ms"] > 0 and r["x_vs_model_steps"] > 0
    assert all(r["x_vs_model_steps"] == 1.0 for r in rows if r["target_steps"] == "model")
