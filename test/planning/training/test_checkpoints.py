"""Checkpoint files: written whole or not at all, byte for byte what the trainers wrote before they shared one
writer, and read back (also when the trainers' own code wrote them) so that a run resumes exactly."""
from __future__ import annotations

import json
import os
import random
import stat

import numpy as np
import pytest
import torch

from plan_stack.planning.errors import PlanningError
from plan_stack.planning.training.checkpoints import (
    check_resume,
    load_optimizer,
    load_state,
    save_json,
    save_optimizer,
    save_state,
    save_tensors,
    write_atomically,
)

# --- the trainers' writers as they were written, the reference for the files' bytes ------------------------


def old_save_trainer_state(out_dir: str, name: str, state: dict) -> None:
    """The target and drafter trainers' state writer."""
    tmp = os.path.join(out_dir, name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, os.path.join(out_dir, name))


def old_save_optimizer(path: str, opt: torch.optim.Optimizer, name: str = "optimizer.safetensors") -> None:
    """The action head trainer's optimiser writer."""
    from safetensors.torch import save_file

    sd = opt.state_dict()
    tensors = {f"{i}.{k}": v.detach().reshape(-1).clone() if v.ndim == 0 else v.detach().clone()
               for i, st in sd["state"].items() for k, v in st.items()}
    tmp = os.path.join(path, name + ".tmp")
    save_file(tensors, tmp, metadata={"param_groups": json.dumps(sd["param_groups"])})
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(path, name))


def old_save_weights(path: str, tensors: dict, name: str = "model.safetensors") -> None:
    """The action head's weights writer."""
    from safetensors.torch import save_file

    tmp = os.path.join(path, name + ".tmp")
    save_file(tensors, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(path, name))


def old_write_json(path: str, name: str, doc: dict, **options) -> None:
    """The action head trainer's `train_state.json` and the head's `config.json` writer."""
    tmp = os.path.join(path, name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(doc, fh, **options)
    os.replace(tmp, os.path.join(path, name))


# --- fixtures ----------------------------------------------------------------------------------------------


def _trained_optimizer(seed: int = 0, steps: int = 3) -> tuple[torch.nn.Module, torch.optim.AdamW]:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    decay = [p for p in net.parameters() if p.ndim >= 2]
    no_decay = [p for p in net.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.98))
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(5, 4)).square().sum().backward()
        opt.step()
    return net, opt


def _trainer_state(opt: torch.optim.Optimizer) -> dict:
    rng, nrng = random.Random(3), np.random.default_rng(4)
    rng.random()
    nrng.random()
    return {"optimizer": opt.state_dict(), "step": 12, "rng": rng.getstate(), "nrng": nrng.bit_generator.state,
            "torch_rng": torch.get_rng_state(), "order": [3, 1], "data_id": {"episodes": 4}}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _same_optimizer(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> bool:
    """Same moments and step counts, and the same groups once through JSON (which makes tuples lists)."""
    sa, sb = a.state_dict(), b.state_dict()
    return (json.dumps(sa["param_groups"]) == json.dumps(sb["param_groups"])
            and sa["state"].keys() == sb["state"].keys()
            and all(_same(dict(sorted(sa["state"][i].items())), dict(sorted(sb["state"][i].items())))
                    for i in sa["state"]))


# --- tests ---------------------------------------------------------------------------------------------------


def test_trainer_state_round_trips_with_its_rng_states(tmp_path):
    _, opt = _trained_optimizer()
    state = _trainer_state(opt)
    save_state(tmp_path / "trainer_state.pt", state)
    back = load_state(tmp_path / "trainer_state.pt")
    assert _same(back, state)
    assert random.Random().setstate(back["rng"]) is None  # a Python RNG state, usable as one
    assert sorted(os.listdir(tmp_path)) == ["trainer_state.pt"]  # no temporary file left


def test_trainer_state_bytes_equal_what_the_trainers_wrote_before(tmp_path):
    """torch.save names its archive's records after the file it writes, so the temporary name is format."""
    _, opt = _trained_optimizer()
    state = _trainer_state(opt)
    for name in ("trainer_state.pt", "target_state.pt"):
        (tmp_path / "old").mkdir(exist_ok=True)
        old_save_trainer_state(str(tmp_path / "old"), name, state)
        save_state(tmp_path / name, state)
        assert (tmp_path / name).read_bytes() == (tmp_path / "old" / name).read_bytes()


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / "trainer_state.pt"
    save_state(path, {"step": 1})

    def half_then_fail(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, half_then_fail)
    assert load_state(path) == {"step": 1}


def test_tensors_round_trip_readable_by_everyone_and_equal_to_the_old_bytes(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    tensors = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3, dtype=torch.float64)}
    save_tensors(tmp_path / "model.safetensors", tensors, {"note": "x"})
    assert _same(dict(sorted(load_file(tmp_path / "model.safetensors").items())), dict(sorted(tensors.items())))
    with safe_open(tmp_path / "model.safetensors", "pt") as fh:
        assert fh.metadata() == {"note": "x"}
    assert stat.S_IMODE(os.stat(tmp_path / "model.safetensors").st_mode) == 0o644
    save_tensors(tmp_path / "plain.safetensors", tensors)
    with safe_open(tmp_path / "plain.safetensors", "pt") as fh:
        assert fh.metadata() is None
    (tmp_path / "old").mkdir()
    old_save_weights(str(tmp_path / "old"), tensors, "plain.safetensors")
    assert (tmp_path / "plain.safetensors").read_bytes() == (tmp_path / "old" / "plain.safetensors").read_bytes()


def test_json_keeps_the_dump_options_and_equals_the_old_bytes(tmp_path):
    doc = {"step": 6, "history": [{"step": 3, "eval_flow_loss": 0.5}], "a": {"z": 1, "b": [1.5, None]}}
    for name, options in (("train_state.json", {}), ("config.json", {"indent": 2, "sort_keys": True})):
        (tmp_path / "old").mkdir(exist_ok=True)
        old_write_json(str(tmp_path / "old"), name, doc, **options)
        save_json(tmp_path / name, doc, **options)
        assert (tmp_path / name).read_text() == (tmp_path / "old" / name).read_text()
        assert json.loads((tmp_path / name).read_text()) == doc


def test_optimizer_round_trip_continues_training_exactly(tmp_path):
    net, opt = _trained_optimizer(steps=3)
    save_optimizer(tmp_path / "optimizer.safetensors", opt)
    (tmp_path / "old").mkdir()
    old_save_optimizer(str(tmp_path / "old"), opt)
    name = "optimizer.safetensors"
    assert (tmp_path / name).read_bytes() == (tmp_path / "old" / name).read_bytes()
    assert stat.S_IMODE(os.stat(tmp_path / "optimizer.safetensors").st_mode) == 0o644

    twin, twin_opt = _trained_optimizer(seed=1, steps=0)  # other weights and an empty optimiser
    twin.load_state_dict(net.state_dict())
    load_optimizer(tmp_path / "optimizer.safetensors", twin_opt)
    assert _same_optimizer(twin_opt, opt)
    x = torch.randn(5, 4)
    for model, o in ((net, opt), (twin, twin_opt)):
        o.zero_grad()
        model(x).square().sum().backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), twin.state_dict().values()))


def test_files_the_trainers_wrote_before_are_read_back(tmp_path):
    _, opt = _trained_optimizer()
    state = _trainer_state(opt)
    old_save_trainer_state(str(tmp_path), "trainer_state.pt", state)
    assert _same(load_state(tmp_path / "trainer_state.pt"), state)
    old_save_optimizer(str(tmp_path), opt)
    _, fresh = _trained_optimizer(seed=2, steps=0)
    load_optimizer(tmp_path / "optimizer.safetensors", fresh)
    assert _same_optimizer(fresh, opt)


def test_a_drafter_run_resumes_from_a_state_file_the_old_writer_wrote(vl_target, small_drafter, tmp_path):
    from plan_stack.planning.training import drafter as TR

    samples = TR.synthetic_samples(vl_target, 4, kinds=("robot_2d3d",), waypoints=3, seed=1)
    cfg = TR.DrafterTrainConfig(steps=4, batch_size=2, lr=1e-2, max_text_anchors=2, checkpoint_every=2, seed=0)
    first = small_drafter(vl_target, seed=4)
    TR.train(first, vl_target, samples, cfg, out_dir=tmp_path / "new", data_id={"d": 1})
    # the same checkpoint with its state written by the old code path: the resumed run does the same
    state = load_state(tmp_path / "new" / TR.STATE_FILE)
    (tmp_path / "old").mkdir()
    for name in os.listdir(tmp_path / "new"):
        if name != TR.STATE_FILE:
            (tmp_path / "old" / name).write_bytes((tmp_path / "new" / name).read_bytes())
    old_save_trainer_state(str(tmp_path / "old"), TR.STATE_FILE, state)
    longer = TR.DrafterTrainConfig(steps=6, batch_size=2, lr=1e-2, max_text_anchors=2, checkpoint_every=0, seed=0)
    runs = []
    for where in ("new", "old"):
        d = small_drafter(vl_target, seed=9)
        losses = TR.train(d, vl_target, samples, longer, out_dir=tmp_path / where, resume=True, data_id={"d": 1})
        runs.append((losses, d.state_dict()))
    assert len(runs[0][0]) == 2 and runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1].values(), runs[1][1].values()))


def test_resume_onto_other_data_is_refused_unless_forced():
    check_resume({"episodes": 3}, {"episodes": 3}, force=False)
    check_resume({"episodes": 3}, {"episodes": 4}, force=True)
    with pytest.raises(PlanningError, match=r"state.pt was trained on data \{'episodes': 3\} but the data now is"):
        check_resume({"episodes": 3}, {"episodes": 4}, force=False, what="state.pt")
