"""What `plan-stack train` chooses on the validation split: the gate bounds, the text block, the selection keyframes."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.data.episodes import Keyframe
from plan_stack.recipes.selection import gate_bound, true_steps
from plan_stack.robots import Recipe


def test_gate_stage_without_a_trained_model_is_a_clear_error(tmp_path, capsys):
    from plan_stack.cli import main

    assert main(["train", "--robot", "drive", "--data", str(tmp_path), "--work", str(tmp_path / "w"),
                 "--out", str(tmp_path / "none"), "--stages", "gate"]) == 2
    err = capsys.readouterr().err
    assert "gate" in err and "does not exist" in err and str(tmp_path / "none") in err


def _kf(tracks: list[list[list[float]]]) -> Keyframe:
    pts = [np.asarray(t, dtype=float) for t in tracks]
    return Keyframe("ep", 0, 0, 0.0, "do it", "reach", [], pts, [np.full((len(p), 2), np.nan) for p in pts], {},
                    (64, 64))


def test_gate_bound_is_the_factor_times_the_largest_true_step():
    a = _kf([[[0, 0, 0], [0.03, 0, 0], [0.03, 0.04, 0]], [[0, 0, 0], [0, 0, 0.01]]])  # steps 0.03, 0.04, 0.01
    b = _kf([[[1, 1, 1], [1, 1, 1.02]]])  # 0.02
    assert sorted(true_steps([a, b]).round(6).tolist()) == [0.01, 0.02, 0.03, 0.04]
    bound, info = gate_bound([a, b], 1.5)
    assert bound == pytest.approx(0.06)
    assert info["split"] == "val" and info["steps"] == 4 and info["true_step_m"]["max"] == pytest.approx(0.04)
    assert gate_bound([a, b], 2.0)[0] == pytest.approx(0.08)


def test_step_change_bound_is_the_factor_times_the_largest_true_second_difference():
    from plan_stack.recipes.selection import gate_manifest

    a = _kf([[[0, 0, 0], [0.03, 0, 0], [0.03, 0.04, 0]], [[0, 0, 0], [0, 0, 0.01]]])  # change |(-0.03, 0.04)|
    b = _kf([[[0, 0, 0], [0.01, 0, 0], [0.03, 0, 0], [0.06, 0, 0]]])  # changes 0.01, 0.01
    assert sorted(true_steps([a, b], order=2).round(6).tolist()) == [0.01, 0.01, 0.05]
    bound, info = gate_bound([a, b], 1.5, order=2)
    assert bound == pytest.approx(0.075) and info["true_step_change_m"]["max"] == pytest.approx(0.05)
    assert gate_manifest([a, b], Recipe())["gate_max_step_change_m"] == 0.0  # not asked for: none
    gate = gate_manifest([a, b], Recipe(gate_step_change_factor=2.0))
    assert gate["gate_max_step_change_m"] == pytest.approx(0.1) and gate["gate_max_step_m"] == pytest.approx(0.06)
    assert gate["gate_rule"]["step_change"]["rule"] == "2.0 x max true step change"
    with pytest.raises(ValueError, match="3 waypoints"):
        gate_bound([_kf([[[0, 0, 0], [1, 0, 0]]])], 1.5, order=2)


def test_the_text_block_is_the_smallest_within_tolerance_of_the_fewest_text_passes():
    """Counted passes, not timings: a response one token past two blocks of 16 needs a third pass."""
    from types import SimpleNamespace

    from plan_stack.recipes.selection import choose_text_block

    passes = {16: 4.0, 17: 3.0, 18: 3.0, 20: 2.99, 24: 2.9}

    class Model:
        manifest = {"budget": 64}

        def encode(self, instruction, frames):
            return instruction

        def decoder(self, config):
            stats = SimpleNamespace(target_forwards_text=passes[config.text_block])
            return SimpleNamespace(generate=lambda prompt, **kw: SimpleNamespace(stats=stats))

    kfs = [_kf([[[0, 0, 0]]])] * 3
    best, info = choose_text_block(Model(), kfs)
    assert best == 24 and info["mean_text_passes"][17] == 3.0 and info["keyframes"] == 3  # 2.9 is > 2 % fewer
    assert choose_text_block(Model(), kfs, candidates=(16, 17, 18, 20))[0] == 17  # 2.99 is within 2 % of 3


def test_gate_bound_refuses_a_split_without_tracks():
    with pytest.raises(ValueError, match="validation"):
        gate_bound([_kf([[[0, 0, 0]]])], 1.5)


def test_selection_keeps_every_episode_start_besides_the_spaced_keyframes():
    from types import SimpleNamespace

    from plan_stack.recipes.selection import selection_keyframes

    val = [SimpleNamespace(episode=e, index=i) for e in range(5) for i in range(10)]
    sel = selection_keyframes(val, 8)
    assert len(sel) == len({id(k) for k in sel})  # no keyframe twice
    assert {k.episode for k in sel if k.index == 0} == set(range(5))  # every start, spaced or not
    assert sel[:8] == val[::6][:8]  # the spaced ones first, as before
