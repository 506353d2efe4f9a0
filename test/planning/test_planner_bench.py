"""bench/planner.py keeps working: a brief run writes the documented JSON columns (figures are not asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "planner.py"
COLUMNS = {"target", "decoder", "streaming", "window", "vision_ms", "prefill_ms", "decode_ms", "total_ms",
           "target_forwards", "drafter_forwards", "speedup_vs_ar", "prefill_x_fresh", "saved_prefill_pct"}


def test_planner_bench_runs_and_writes_its_rows(tmp_path):
    out = tmp_path / "planner.json"
    res = subprocess.run([sys.executable, str(BENCH), "--robot", str(tmp_path / "no_model"), "--size", "tiny",
                          "--primitive", "box", "--cameras", "1", "--image", "64", "--window", "2", "--steps", "1",
                          "--warmup", "0", "--prefill-reps", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=240,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "shipped model skipped" in res.stdout
    rows = json.loads(out.read_text())
    prefill = [r for r in rows if r.get("kind") == "prefill"]
    assert {r["mode"] for r in prefill} == {"streaming", "fresh_frame_local", "fresh_causal"}
    streamed = next(r for r in prefill if r["mode"] == "streaming")
    assert streamed["prefilled_tokens"] < streamed["prompt_tokens"] and "x_vs_fresh_causal" in streamed
    rows = [r for r in rows if r.get("kind") != "prefill"]
    assert len(rows) == 6 and all(COLUMNS <= set(r) for r in rows)
    assert {(r["decoder"], r["streaming"]) for r in rows} == {(d, s) for d in ("ar", "dflash", "vflash")
                                                              for s in (True, False)}
    vflash = next(r for r in rows if r["decoder"] == "vflash" and r["streaming"])
    assert vflash["target_forwards"] == 1 and vflash["drafter_forwards"] == 1  # one primitive, one pass each
    assert all(r["tokens_out"] == rows[0]["tokens_out"] for r in rows)  # same work for every decoder
