"""`plan-stack train-drafter`: a tiny end-to-end run writes a paired target and drafter."""
from __future__ import annotations


def test_train_drafter_cli(tmp_path, capsys):
    from plan_stack import cli

    out = tmp_path / "drafter"
    rc = cli.main(["train-drafter", "--tiny", "text", "--out", str(out), "--steps", "2", "--samples", "2",
                   "--batch-size", "2", "--waypoints", "2", "--max-text-anchors", "2", "--width", "32",
                   "--layers", "1", "--heads", "2", "--head-dim", "16", "--threads", "1"])
    assert rc == 0 and (out / "model.safetensors").is_file() and (out / "target" / "config.json").is_file()
    assert "trained 2 steps" in capsys.readouterr().out
    # resuming a finished run trains nothing and keeps the paired target
    rc = cli.main(["train-drafter", "--tiny", "text", "--out", str(out), "--steps", "2", "--samples", "2",
                   "--batch-size", "2", "--waypoints", "2", "--max-text-anchors", "2", "--threads", "1", "--resume"])
    assert rc == 0 and "nothing to do" in capsys.readouterr().out
