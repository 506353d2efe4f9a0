"""Target training: loss falls on a tiny model, resume is exact and refuses other data, best model is kept."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plan_stack.planning.errors import PlanningError
from plan_stack.planning.model_dir import PlannerModel
from plan_stack.planning.target import tiny_target
from plan_stack.planning.training_target import TargetTrainConfig, TrainItem, collate, train_target


def _model(seed=5):
    target = tiny_target("vl", layers=2, seed=seed)
    return PlannerModel("unsaved", target, None, {"cameras": ["c"], "image_size": [32, 32]})


def _items(model, n=6):
    rng = np.random.default_rng(0)
    tok = model.target.tokenizer
    out = []
    for i in range(n):
        img = np.full((32, 32, 3), 40 * i, np.uint8)
        resp = tok.encode(f"move the cup {i}. ", add_special_tokens=False) + [tok.eos_token_id]
        out.append(TrainItem([img], "pick up", resp))
    rng.shuffle(out)
    return out


def test_collate_masks_prompt_and_padding():
    model = _model()
    items = _items(model, 2)
    items[1].response = items[1].response[:3]
    b = collate(model, items)
    n_prompt = model.encode("pick up", [items[0].images]).input_ids.numel()
    assert (b["labels"][:, :n_prompt] == -100).all()
    assert b["labels"][0, n_prompt:].tolist() == items[0].response
    assert (b["labels"][1, n_prompt + 3:] == -100).all() and (b["attention_mask"][1, n_prompt + 3:] == 0).all()
    assert int(b["mm_token_type_ids"].sum()) == 2 * int(b["image_grid_thw"][0].prod()) // 4


def test_training_lowers_the_loss_and_resume_refuses_other_data(tmp_path):
    model = _model()
    items = _items(model)
    cfg = TargetTrainConfig(steps=12, batch_size=3, lr=3e-3, checkpoint_every=6, eval_every=0, augment=False)
    with torch.no_grad():
        before = float(model.target.model(**collate(model, items)).loss)
    res = train_target(model, items, cfg, tmp_path, data_id={"d": 1}, log=lambda s: None)
    with torch.no_grad():
        after = float(model.target.model(**collate(model, items)).loss)
    assert after < 0.7 * before, (before, after)
    assert res["steps"] == 12 and len(res["losses"]) == 12
    assert not any(p.requires_grad for p in model.target.model.parameters())  # frozen again
    with pytest.raises(PlanningError, match="trained on data"):
        train_target(_model(), items, cfg, tmp_path, data_id={"d": 2}, resume=True, log=lambda s: None)
    forced = train_target(_model(), items, cfg, tmp_path, data_id={"d": 2}, resume=True, force_resume=True,
                          log=lambda s: None)
    assert forced["losses"] == []  # the checkpoint is already at 12 steps


def test_interrupted_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    import plan_stack.planning.training_target as TT

    items = _items(_model())
    cfg = TargetTrainConfig(steps=6, batch_size=3, lr=3e-3, checkpoint_every=3, eval_every=0)
    straight = _model()
    train_target(straight, items, cfg, tmp_path / "s", data_id={"d": 1}, log=lambda s: None)

    class Stop(Exception):
        pass

    calls = {"n": 0}
    orig = TT.collate

    def collate_then_stop(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # the 4th step, after the step-3 checkpoint
            raise Stop
        return orig(*a, **k)

    monkeypatch.setattr(TT, "collate", collate_then_stop)
    with pytest.raises(Stop):
        train_target(_model(), items, cfg, tmp_path / "i", data_id={"d": 1}, log=lambda s: None)
    monkeypatch.setattr(TT, "collate", orig)
    resumed = _model()
    train_target(resumed, items, cfg, tmp_path / "i", data_id={"d": 1}, resume=True, log=lambda s: None)
    for (name, a), (_, b) in zip(straight.target.model.state_dict().items(), resumed.target.model.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


def test_best_checkpoint_is_selected_by_the_evaluation(tmp_path):
    model = _model()
    items = _items(model)
    scores = iter([0.5, 0.2, 0.9])
    seen = []

    def evaluate(m):
        seen.append({k: v.clone() for k, v in m.target.model.state_dict().items()})
        return next(scores)

    cfg = TargetTrainConfig(steps=6, batch_size=3, lr=3e-3, checkpoint_every=0, eval_every=2, augment=False)
    res = train_target(model, items, cfg, tmp_path, evaluate=evaluate, log=lambda s: None)
    assert res["best_step"] == 4 and res["best_score"] == pytest.approx(0.2)
    for k, v in model.target.model.state_dict().items():  # the model ends with the step-4 weights
        torch.testing.assert_close(v, seen[1][k], msg=k)
