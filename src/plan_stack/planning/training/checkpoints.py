"""Writing and reading the trainers' checkpoint files, each file whole or not at all.

A trainer stopped mid-write (out of memory, Ctrl-C, a machine taken back) must leave its previous checkpoint
readable, so every file is written beside its final name as `<name>.tmp` and moved over it with `os.replace`
(atomic within a directory on POSIX). The temporary name is part of the format: `torch.save` names the records
inside its zip archive after the file it writes (`trainer_state.pt/data.pkl` for `trainer_state.pt.tmp`), so
another temporary name would change the bytes of every state file.

Three formats, as the trainers have always written them:
* `save_state`: a pickled dict (torch zip format) for the target and drafter trainers' state (optimiser,
  Python and NumPy RNG states, step, data fingerprint); read back with `load_state`.
* `save_tensors`: safetensors, made readable by everyone (safetensors writes owner-only files, and
  checkpoints are meant to be shared); `save_optimizer`/`load_optimizer` keep an optimiser that way, its
  parameter groups as JSON metadata, so the action head's directory holds no pickles.
* `save_json`: a JSON document, with `json.dump`'s options.

`check_resume` is the target and drafter trainers' guard against resuming onto other data.

Used by `planning.training.{drafter,target}`, `planning.drafter` (the drafter is its trainer's checkpoint) and
`actions.{train,head}`.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from plan_stack.planning.errors import PlanningError

if TYPE_CHECKING:
    import torch

__all__ = ["TMP_SUFFIX", "write_atomically", "save_state", "load_state", "check_resume", "save_tensors",
           "save_json", "save_optimizer", "load_optimizer"]

TMP_SUFFIX = ".tmp"
#: files the safetensors writer leaves owner-only are opened up to this
SHARED_MODE = 0o644


def write_atomically(path: str | os.PathLike, write: Callable[[str], None], *, mode: int | None = None) -> None:
    """Call `write(tmp)` to fill `path` + `.tmp`, give it `mode` (None: as created), then move it over `path`."""
    path = os.fspath(path)
    tmp = path + TMP_SUFFIX
    write(tmp)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def save_state(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """A trainer's resumable state, pickled (RNG states are Python objects, not tensors)."""
    import torch

    write_atomically(path, lambda tmp: torch.save(dict(state), tmp))


def load_state(path: str | os.PathLike) -> dict[str, Any]:
    """What `save_state` wrote, on the CPU (the resuming trainer moves it to its device). Unpickles: read only
    checkpoints you wrote."""
    import torch

    return torch.load(os.fspath(path), weights_only=False, map_location="cpu")


def check_resume(saved: dict | None, current: dict | None, force: bool, what: str = "checkpoint") -> None:
    """Refuse to resume onto another data set (PlanningError naming both) unless `force`: a run resumed onto
    other episodes silently trains a different model."""
    if force or saved == current:
        return
    raise PlanningError(f"{what} was trained on data {saved} but the data now is {current}; "
                        "resume with the same episodes, start a new output directory, or force the resume")


def save_tensors(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor],
                 metadata: Mapping[str, str] | None = None) -> None:
    """Tensors (contiguous, any device) as safetensors with string `metadata`, readable by everyone."""
    from safetensors.torch import save_file

    write_atomically(path, lambda tmp: save_file(dict(tensors), tmp, metadata=None if metadata is None
                                                 else dict(metadata)), mode=SHARED_MODE)


def save_json(path: str | os.PathLike, doc: Any, **dump_options: Any) -> None:
    """`doc` as JSON (`dump_options`: `json.dump`'s, e.g. indent, sort_keys)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, **dump_options)

    write_atomically(path, write)


def save_optimizer(path: str | os.PathLike, opt: torch.optim.Optimizer) -> None:
    """Per-parameter state as tensors named `<index>.<name>` (0-d ones stored with one element, which
    safetensors needs), the parameter groups as JSON in the metadata under `param_groups`."""
    sd = opt.state_dict()
    tensors = {f"{i}.{k}": v.detach().reshape(-1).clone() if v.ndim == 0 else v.detach().clone()
               for i, st in sd["state"].items() for k, v in st.items()}
    save_tensors(path, tensors, {"param_groups": json.dumps(sd["param_groups"])})


def load_optimizer(path: str | os.PathLike, opt: torch.optim.Optimizer) -> None:
    """Load what `save_optimizer` wrote into `opt` (built over the same parameters); `step` is 0-d again."""
    from safetensors import safe_open

    state: dict[int, dict[str, torch.Tensor]] = {}
    with safe_open(os.fspath(path), "pt") as fh:
        groups = json.loads(fh.metadata()["param_groups"])
        for key in fh.keys():
            i, name = key.split(".", 1)
            v = fh.get_tensor(key)
            state.setdefault(int(i), {})[name] = v.reshape(()) if name == "step" else v
    opt.load_state_dict({"state": state, "param_groups": groups})
