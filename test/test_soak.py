"""The soak (`make soak`, scripts/soak.py): its bounds, and a short run of the ALOHA stack doing task after task.

The short run is the 30-minute soak in miniature: `plan-stack up` of config/aloha.yaml (`--processes`,
unpaced, the shipped models) with a shorter task time limit, 60 s of sim time. Relaxed bounds, only where a
minute makes the soak's own meaningless: the real-time factor (a loaded test machine; 0.25 still catches a
stalled simulator), RSS growth 10 % (growth right after start-up includes the allocators' warm-up; the 5 %
bound is for 28 minutes after it) and the learned policy's safety events (`--allow-safety-events`: in a
handful of tasks, a policy that protective-stops in a measured share of its episodes may or may not). Everything
else is the soak's: no ERROR report of the stack, no node restarted, every task's outcome published and
logged, as many tasks as the time limit allows.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _soak():
    spec = importlib.util.spec_from_file_location("soak_script", ROOT / "scripts" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(**kw):
    base = dict(sim_seconds=100.0, max_rss_growth=0.05, max_errors=0, min_rtf=0.9, allow_safety_events=False,
                require_tasks=True)
    return argparse.Namespace(**{**base, **kw})


def _report(**kw):
    tasks = [dict(episode=i + 1, success=i % 2 == 0) for i in range(10)]
    node = dict(node="stitcher", rss_growth_pct=1.0, restarts=0)
    base = dict(sim_s=100.0, rtf=0.95, died=[], nodes=[node], reports={"OK": 50}, stack_errors=0, safety_errors=0,
                errors=[], tasks=tasks)
    return {**base, **kw}


def test_a_soak_within_its_bounds_passes():
    assert _soak().evaluate(_report(), _args(), time_limit_s=10.0, logged=10) == []


@pytest.mark.parametrize("change, logged, words", [
    (dict(rtf=0.5), 10, "real-time factor 0.5 below 0.9"),
    (dict(sim_s=60.0, tasks=[dict(episode=i + 1) for i in range(6)]), 6, "ran 60 s of sim time, not 100 s"),
    (dict(nodes=[dict(node="planner", rss_growth_pct=7.5, restarts=0)]), 10, "planner: RSS grew 7.5 %"),
    (dict(nodes=[dict(node="chunker", rss_growth_pct=0.1, restarts=1)]), 10, "node chunker restarted 1 time"),
    (dict(stack_errors=2, errors=[dict(status="stitcher: solve", message="no feasible", kind="stack")]),
     10, "2 ERROR diagnostics (bound 0); the first: stitcher: solve: no feasible"),
    (dict(tasks=[dict(episode=e) for e in (1, 2, 4, 5, 6, 7, 8, 9, 10, 11)]), 10, "task outcomes missing"),
    ({}, 9, "10 task outcomes published but 9 logged"),
    (dict(tasks=[dict(episode=i + 1) for i in range(5)]), 5, "5 tasks ended in 100 s of sim time"),
    (dict(died=["bring-up exited with 1"]), 10, "bring-up exited with 1"),
])
def test_each_missed_bound_is_named(change, logged, words):
    failures = _soak().evaluate(_report(**change), _args(), time_limit_s=10.0, logged=logged)
    assert any(words in f for f in failures), failures


def test_safety_events_count_apart_only_when_allowed():
    report = _report(safety_errors=3,
                     errors=[dict(status="aloha_bridge: protective_stop", message="protective stop", kind="safety")])
    soak = _soak()
    assert soak.evaluate(report, _args(), 10.0, 10)  # by default an ERROR like any other
    assert soak.evaluate(report, _args(allow_safety_events=True), 10.0, 10) == []
    report["stack_errors"] = 1
    assert soak.evaluate(report, _args(allow_safety_events=True), 10.0, 10)  # the stack's own always count


def test_sim_time_sums_the_scenes_of_a_resetting_simulator():
    t = _soak().SimTime()
    for s in (0.0, 5.0, 10.0, 0.02, 3.0, 0.01):
        t.update(s)
    assert t.total_s == pytest.approx(13.01) and t.resets == 2


@pytest.mark.slow
@pytest.mark.ros
@pytest.mark.timeout(900)
def test_a_short_soak_of_the_aloha_stack_doing_task_after_task(tmp_path):
    config = tmp_path / "aloha_soak.yaml"
    config.write_text("extends: aloha\nnodes:\n  aloha_sim:\n    parameters:\n      task_time_limit_s: 10.0\n")
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--config", str(config),
                           "--sim-seconds", "60", "--warmup-s", "20", "--sample-s", "10", "--min-rtf", "0.25",
                           "--max-rss-growth", "0.10", "--allow-safety-events", "--max-wall-s", "600",
                           "--json", str(out)], capture_output=True, text=True, timeout=800)
    assert out.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert done.returncode == 0, (report["failures"], done.stdout[-3000:])
    assert report["passed"] and report["sim_s"] >= 60.0
    nodes = {n["node"]: n for n in report["nodes"]}
    assert set(nodes) == {"aloha_sim", "aloha_bridge", "ingest", "chunker", "stitcher", "planner", "viz"}
    assert all(n["rss_start_mib"] and n["rss_end_mib"] and n["restarts"] == 0 for n in nodes.values())
    tasks = report["tasks"]
    assert len(tasks) >= 5 and [t["episode"] for t in tasks] == list(range(1, len(tasks) + 1))
    assert [t["seed"] for t in tasks] == list(range(len(tasks)))  # config/aloha.yaml's seed 0, then the next
    assert report["resets"] >= len(tasks) - 1 and report["tasks_logged"] >= len(tasks)
    assert report["rtf"] > 0 and report["wall_s"] > 0
    assert report["bounds"]["max_errors"] == 0 and report["stack_errors"] == 0
    assert all(t["safety_reports"] >= 0 for t in tasks)
    log = Path(report["log"]).read_text()
    # the chunker's wait for plan features is said once per wait (start-up, each reset), not once a second
    assert log.count("[chunker]: no chunk until the planner sends plan features") <= len(tasks) + 1
