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


def test_train_drafter_on_two_ranks_and_refuses_a_batch_they_cannot_share(tmp_path, capsys):
    from plan_stack import cli

    out = tmp_path / "drafter"
    common = ["train-drafter", "--tiny", "text", "--out", str(out), "--samples", "4", "--waypoints", "2",
              "--max-text-anchors", "2", "--width", "32", "--layers", "1", "--heads", "2", "--head-dim", "16"]
    assert cli.main([*common, "--steps", "2", "--batch-size", "4", "--ranks", "2"]) == 0
    assert "trained 2 steps on 2 ranks" in capsys.readouterr().out
    assert (out / "model.safetensors").is_file()
    assert cli.main([*common, "--steps", "3", "--batch-size", "3", "--ranks", "2"]) == 2
    assert "2 ranks cannot share a batch of 3 evenly" in capsys.readouterr().err
