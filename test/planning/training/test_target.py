"""Target training: loss falls on a tiny model, resume is exact and refuses other data, best model is kept."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from plan_stack.planning.errors import PlanningError
from plan_stack.planning.model_dir import PlannerModel
from plan_stack.planning.target_build import tiny_target
from plan_stack.planning.training.target import TargetTrainConfig, TrainItem, collate, train_target


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
    import plan_stack.planning.training.target as TT

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


def test_response_loss_is_plain_cross_entropy_and_soft_over_coordinate_bins():
    import torch

    from plan_stack.planning.training.target import response_loss

    torch.manual_seed(0)
    logits = torch.randn(2, 6, 30)
    labels = torch.tensor([[-100, 3, 12, 14, 1, 25], [-100, -100, 10, 29, -100, -100]])
    coord = torch.arange(10, 30)  # bins 0..19 are token ids 10..29
    hard = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 30), labels[:, 1:].reshape(-1),
                                             ignore_index=-100)
    assert float(response_loss(logits, labels)) == pytest.approx(float(hard), rel=1e-6)
    assert float(response_loss(logits, labels, coord, 0.0)) == pytest.approx(float(hard), rel=1e-6)
    assert float(response_loss(logits, labels, coord, 1e-4)) == pytest.approx(float(hard), rel=1e-5)
    # a near miss costs less than a far one under the soft target, the same under the exact bin
    near, far = torch.full((1, 2, 30), -20.0), torch.full((1, 2, 30), -20.0)
    near[0, 0, 10 + 11], far[0, 0, 10 + 19] = 20.0, 20.0  # predicted bins 11 and 19 for a true bin 10
    lab = torch.tensor([[-100, 20]])
    assert float(response_loss(near, lab)) == pytest.approx(float(response_loss(far, lab)))
    assert float(response_loss(near, lab, coord, 2.0)) < float(response_loss(far, lab, coord, 2.0))
    # a text token keeps the exact target whatever the coordinate softening
    text_only = torch.tensor([[-100, 3]])
    assert float(response_loss(logits[:1, :2], text_only, coord, 3.0)) == pytest.approx(
        float(response_loss(logits[:1, :2], text_only)), rel=1e-6)


def test_soft_coordinate_targets_train_towards_the_labelled_bins(tmp_path):
    from plan_stack.planning import vocab as V

    model = _model()
    tok = model.target.tokenizer
    coord = tok.convert_tokens_to_ids(list(V.COORD_TOKENS))
    items = []
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)]
    for i in range(4):  # the image's colour says which bin follows
        img = np.zeros((32, 32, 3), np.uint8) + np.array(colours[i], np.uint8)
        items.append(TrainItem([img], "pick up", [coord[100 + 200 * i], tok.eos_token_id]))
    cfg = TargetTrainConfig(steps=60, batch_size=4, lr=3e-3, checkpoint_every=0, eval_every=0, augment=False,
                            coord_sigma_bins=4.0)
    res = train_target(model, items, cfg, tmp_path, log=lambda s: None)
    assert all(np.isfinite(res["losses"])) and res["losses"][-1] < 0.5 * res["losses"][0]
    with torch.no_grad():
        logits = model.target.model(**{k: v for k, v in collate(model, items).items() if k != "labels"}).logits
    n_prompt = model.encode("pick up", [items[0].images]).input_ids.numel()
    picked = logits[:, n_prompt - 1, coord].argmax(dim=1).tolist()
    assert all(abs(p - (100 + 200 * i)) <= 8 for i, p in enumerate(picked)), picked


def _located_items(model, n=16, seed=0):
    """A white square in one of the 4 quadrants of a black image; the response names nothing about it."""
    rng = np.random.default_rng(seed)
    tok = model.target.tokenizer
    out = []
    for _ in range(n):
        qx, qy = rng.integers(0, 2, size=2)
        img = np.zeros((32, 32, 3), np.uint8)
        img[16 * qy + 5:16 * qy + 11, 16 * qx + 5:16 * qx + 11] = 255
        resp = tok.encode("pick. ", add_special_tokens=False) + [tok.eos_token_id]
        out.append(TrainItem([img], "pick up", resp, ((16 * qx + 8) / 32, (16 * qy + 8) / 32)))
    return out


def _vl_model(patch=8, seed=5):
    target = tiny_target("vl", layers=2, vision_patch=patch, seed=seed)
    return PlannerModel("unsaved", target, None, {"cameras": ["c"], "image_size": [32, 32]})


def test_locate_head_places_the_centre_inside_the_chosen_token():
    from plan_stack.planning.training.target import LocateHead

    head = LocateHead(4)
    with torch.no_grad():
        head.proj.weight.zero_()
        head.proj.bias.zero_()
        head.proj.weight[0, 0] = 50.0  # the token whose feature 0 is large wins the softmax
        head.proj.weight[1, 1] = 1.0  # feature 1 moves u inside the token, saturating at its edge
    tokens = torch.zeros(6, 4)  # a 2 x 3 merged grid, row-major
    tokens[4, 0] = 1.0  # row 1, column 1: centre (0.5, 0.75)
    torch.testing.assert_close(head(tokens, (2, 3)), torch.tensor([0.5, 0.75]), atol=1e-4, rtol=0)
    tokens[4, 1] = 100.0
    u, v = head(tokens, (2, 3)).tolist()
    assert u == pytest.approx(0.5 + 0.5 / 3, abs=1e-3) and v == pytest.approx(0.75, abs=1e-4)


def test_localisation_loss_teaches_the_vision_tower_where_the_object_is(tmp_path):
    model = _vl_model()
    items = _located_items(model)
    cfg = TargetTrainConfig(steps=60, batch_size=8, lr=3e-3, checkpoint_every=0, eval_every=0, augment=False,
                            locate_weight=10.0)
    res = train_target(model, items, cfg, tmp_path, log=lambda s: None)
    first, last = np.mean(res["locate_losses"][:5]), np.mean(res["locate_losses"][-5:])
    assert last < 0.3 * first, (first, last)  # blind (the mean centre) is 0.125 in squared image fractions
    assert last < 0.03, last
    assert res["locate_rms"] == pytest.approx(np.sqrt(np.mean(res["locate_losses"][-50:])))
    hooks = model.target.model.model.visual._forward_hooks
    assert not hooks  # the training hook is gone: inference runs the plain model


def test_localisation_state_resumes_and_mismatches_are_refused(tmp_path):
    items = _located_items(_vl_model(), n=6)
    cfg = TargetTrainConfig(steps=4, batch_size=3, lr=3e-3, checkpoint_every=2, eval_every=0, locate_weight=1.0)
    straight = _vl_model()
    a = train_target(straight, items, cfg, tmp_path / "s", data_id={"d": 1}, log=lambda s: None)
    half = _vl_model()
    train_target(half, items, dataclasses.replace(cfg, steps=2), tmp_path / "h", data_id={"d": 1},
                 log=lambda s: None)
    state = torch.load(tmp_path / "h" / "target_state.pt", weights_only=False)
    assert state["locate_head"] is not None
    resumed = _vl_model()
    b = train_target(resumed, items, cfg, tmp_path / "h", data_id={"d": 1}, resume=True, log=lambda s: None)
    assert len(b["locate_losses"]) == 2
    np.testing.assert_allclose(b["locate_losses"], a["locate_losses"][2:], rtol=1e-4)
    plain = dataclasses.replace(cfg, locate_weight=0.0)
    train_target(_vl_model(), items, dataclasses.replace(plain, steps=2), tmp_path / "p", data_id={"d": 1},
                 log=lambda s: None)
    with pytest.raises(PlanningError, match="without the localisation head"):
        train_target(_vl_model(), items, cfg, tmp_path / "p", data_id={"d": 1}, resume=True, log=lambda s: None)
    unlocated = [TrainItem(it.images, it.instruction, it.response) for it in items]
    with pytest.raises(PlanningError, match="no training sample has a located object"):
        train_target(_vl_model(), unlocated, cfg, tmp_path / "u", log=lambda s: None)
