"""Training: held-out evaluation improves, checkpoints resume exactly, misuse is refused, CLI works."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from plan_stack.actions.data import ChunkWindows, Episode, split_episodes, synthetic_episodes
from plan_stack.actions.errors import CheckpointError, DatasetError
from plan_stack.actions.head import HeadConfig, load_checkpoint
from plan_stack.actions.train import HeadTrainConfig, train
from plan_stack.config import ConfigError

HEAD = HeadConfig(action_dim=3, state_dim=3, horizon=8, cond_width=5, width=16, layers=1, heads=2, num_steps=4)


@pytest.fixture(scope="module")
def episodes():
    return split_episodes(synthetic_episodes(8, length=40, action_dim=3, cond_width=5), 0.25)


def _cfg(**kw) -> HeadTrainConfig:
    base = dict(steps=60, batch_size=16, lr=3e-3, warmup_steps=5, eval_every=20, checkpoint_every=20,
                log_every=20, eval_windows=32)
    return HeadTrainConfig(**{**base, **kw})


def test_training_improves_held_out_loss_and_writes_a_loadable_checkpoint(episodes, tmp_path):
    lines = []
    res = train(HEAD, _cfg(rtc_max_delay=3), *episodes, str(tmp_path), log=lines.append)
    hist = json.loads((tmp_path / "train_state.json").read_text())["history"]
    assert [h["step"] for h in hist] == [20, 40, 60]
    assert hist[-1]["eval_flow_loss"] < hist[0]["eval_flow_loss"]
    assert res.step == 60 and res.resumed_from == 0 and "eval_chunk_rmse" in res.eval
    assert any(line.startswith("step 60/60 loss") for line in lines)
    head, meta = load_checkpoint(str(tmp_path))
    assert meta["rtc_max_delay"] == 3 and head.cfg == HEAD
    # normalisation statistics travel with the weights
    assert head.normaliser.action_std.min().item() > 0.01


def test_resume_after_interruption_equals_an_uninterrupted_run(episodes, tmp_path):
    cfg = _cfg(steps=12, checkpoint_every=3, log_every=1, eval_every=100)
    train(HEAD, cfg, *episodes, str(tmp_path / "a"), log=lambda s: None)

    def crash_at_step_8(line: str) -> None:
        if line.startswith("step 8/"):
            raise KeyboardInterrupt  # last checkpoint was written at step 6

    with pytest.raises(KeyboardInterrupt):
        train(HEAD, cfg, *episodes, str(tmp_path / "b"), log=crash_at_step_8)
    lines = []
    res = train(HEAD, cfg, *episodes, str(tmp_path / "b"), log=lines.append)
    assert res.resumed_from == 6 and lines[0].startswith("resumed from step 6")
    a, _ = load_checkpoint(str(tmp_path / "a"))
    b, _ = load_checkpoint(str(tmp_path / "b"))
    for k, v in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[k], v, rtol=0, atol=1e-6, msg=k)


def test_resume_refuses_a_different_setup_and_data_mismatch(episodes, tmp_path):
    train(HEAD, _cfg(steps=2, log_every=1), *episodes, str(tmp_path), log=lambda s: None)
    with pytest.raises(CheckpointError, match="another head config or RTC setting"):
        train(HEAD, _cfg(steps=4, rtc_max_delay=2), *episodes, str(tmp_path), log=lambda s: None)
    other = HeadConfig(action_dim=4, state_dim=3, horizon=8, cond_width=5, width=16, layers=1, heads=2)
    with pytest.raises(ConfigError, match="action_dim"):
        train(other, _cfg(steps=2), *episodes, str(tmp_path / "x"), log=lambda s: None)


def test_resume_refuses_other_data_unless_forced(episodes, tmp_path):
    train(HEAD, _cfg(steps=2, log_every=1), *episodes, str(tmp_path), log=lambda s: None,
          meta={"data": {"sha256": "a"}})
    with pytest.raises(CheckpointError, match="other data"):
        train(HEAD, _cfg(steps=4, log_every=1), *episodes, str(tmp_path), log=lambda s: None,
              meta={"data": {"sha256": "b"}})
    res = train(HEAD, _cfg(steps=4, log_every=1), *episodes, str(tmp_path), log=lambda s: None,
                meta={"data": {"sha256": "b"}}, force_resume=True)
    assert res.resumed_from == 2 and res.step == 4


def test_windows_hold_the_last_command_and_reject_bad_episodes():
    ep = Episode("e", 0.02, [[0.0], [1.0], [2.0]], [[0.0], [0.0], [1.0]], [[1.0, 0.0]])
    w = ChunkWindows([ep], horizon=4)
    b = w.batch(w.index.shape[0] - 1 - torch.arange(1).numpy())  # last window starts at the final step
    assert b["actions"][0, :, 0].tolist() == [2.0, 2.0, 2.0, 2.0]
    with pytest.raises(DatasetError, match="non-finite"):
        Episode("n", 0.02, [[0.0], [float("nan")]], [[0.0], [0.0]], [[1.0]])
    with pytest.raises(DatasetError, match="inconsistent"):
        ChunkWindows([ep, Episode("f", 0.02, [[0.0, 1], [1, 1]], [[0.0], [0.0]], [[1.0, 0.0]])], 4)


def test_cli_trains_on_synthetic_demonstrations(tmp_path):
    from plan_stack.cli import main

    out = tmp_path / "ckpt"
    rc = main(["train-action-head", "--synthetic", "6", "--out", str(out), "--steps", "4", "--batch-size", "8",
               "--horizon", "8", "--width", "16", "--layers", "1", "--heads", "2", "--log-every", "2",
               "--eval-every", "4", "--checkpoint-every", "4", "--threads", "1"])
    assert rc == 0
    assert {"config.json", "model.safetensors", "optimizer.safetensors", "train_state.json"} <= set(os.listdir(out))
    head, meta = load_checkpoint(str(out))
    assert head.cfg.horizon == 8 and meta["data"]["source"] == "synthetic"


def test_state_noise_changes_training_per_channel_and_rejects_a_wrong_length(episodes, tmp_path):
    """Noise on the input state (one std, or one per channel) changes what is learned; the target chunks
    stay the demonstration's. A length that matches neither is refused before training."""
    quiet = train(HEAD, _cfg(steps=20, eval_every=20), *episodes, str(tmp_path / "quiet"))
    noisy = train(HEAD, _cfg(steps=20, eval_every=20, state_noise=(0.3, 0.3, 0.0)), *episodes, str(tmp_path / "noisy"))
    assert quiet.train_loss != noisy.train_loss
    meta = load_checkpoint(str(tmp_path / "noisy"))[1]
    assert meta["train"]["state_noise"] == [0.3, 0.3, 0.0]
    with pytest.raises(ConfigError, match="state_noise"):
        train(HEAD, _cfg(state_noise=(0.1, 0.1)), *episodes, str(tmp_path / "bad"))
    with pytest.raises(ConfigError, match="state_noise"):
        _cfg(state_noise=(-0.1,))


def test_plan_shift_conditions_windows_on_neighbouring_plans_of_the_same_episode():
    eps = synthetic_episodes(2, length=12, action_dim=3, cond_width=5)
    # three plans per episode, in force from steps 0, 4 and 8
    eps = [Episode(e.name, e.dt_s, e.actions, e.states, np.stack([e.cond[0] * (i + 1) for i in range(3)]),
                   np.repeat(np.arange(3), 4)) for e in eps]
    w = ChunkWindows(eps, 4)
    rows = np.array([0, 5, 11, 12])  # episode 0 at steps 0, 5, 11; episode 1 at step 0
    plain = w.batch(rows)["cond"]
    np.testing.assert_array_equal(w.batch(rows, np.array([1, 1, 1, 0]))["cond"][[0, 1]], plain[[1, 2]])
    # shifts stop at the episode's first and last plan, never reaching into the other episode
    shifted = w.batch(rows, np.array([-5, 5, 5, -1]))["cond"]
    np.testing.assert_array_equal(shifted[0], plain[0])
    np.testing.assert_array_equal(shifted[1], plain[2])
    np.testing.assert_array_equal(shifted[3], plain[3])
    with pytest.raises(ConfigError):
        _cfg(plan_shift_prob=1.5)
