"""`--device` on every model-running command: the same names as the nodes' `device`, refused cleanly when unusable."""
from __future__ import annotations

import argparse
import importlib
import json

import pytest
import torch

from plan_stack.cli import SUBCOMMANDS, main
from plan_stack.eval.cli import with_device

MODEL_COMMANDS = ("train", "train-drafter", "train-action-head", "eval-plans", "eval")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: cuda is usable")


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=command)
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    return parser


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_every_model_command_takes_a_device(command):
    device = next(a for a in _parser(command)._actions if "--device" in a.option_strings)
    assert set(device.choices) == {"cpu", "cuda", "auto"}


@no_gpu
@pytest.mark.parametrize("argv", [
    ["train", "--robot", "aloha", "--data", "{tmp}/data", "--work", "{tmp}/work", "--out", "{tmp}/model"],
    ["train-drafter", "--tiny", "vl", "--out", "{tmp}/drafter", "--steps", "1"],
    ["train-action-head", "--synthetic", "3", "--out", "{tmp}/head", "--steps", "1", "--horizon", "8", "--width", "16",
     "--layers", "1", "--heads", "2"],
    ["eval-plans", "--robot", "aloha", "--demos", "{tmp}"],
], ids=lambda a: a[0])
def test_cuda_without_a_gpu_exits_2_naming_the_reason(argv, tmp_path, capsys):
    rc = main([a.format(tmp=tmp_path) for a in argv] + ["--device", "cuda"])
    out = capsys.readouterr()
    assert rc == 2
    assert "sees no GPU" in out.err + out.out
    assert not (tmp_path / "head" / "model.safetensors").exists()


def test_half_precision_on_the_cpu_is_refused_by_eval_plans(tmp_path, capsys):
    assert main(["eval-plans", "--robot", "aloha", "--demos", str(tmp_path), "--device", "cpu",
                 "--dtype", "float16"]) == 2
    assert "not supported" in capsys.readouterr().err


def test_an_explicit_cpu_device_trains(tmp_path):
    out = tmp_path / "head"
    rc = main(["train-action-head", "--synthetic", "4", "--out", str(out), "--steps", "2", "--batch-size", "4",
               "--horizon", "8", "--width", "16", "--layers", "1", "--heads", "2", "--log-every", "2",
               "--eval-every", "2", "--checkpoint-every", "2", "--threads", "1", "--device", "cpu"])
    assert rc == 0
    assert json.loads((out / "config.json").read_text())["head"]["width"] == 16


def test_eval_device_reaches_the_planner_and_the_chunker_only():
    given = {"stitcher": {"qp_solver": "osqp"}}
    got = with_device(given, "aloha", "cuda")
    assert got == {"stitcher": {"qp_solver": "osqp"}, "planner": {"device": "cuda"}, "chunker": {"device": "cuda"}}
    assert given == {"stitcher": {"qp_solver": "osqp"}}  # not mutated
    assert with_device(given, "aloha", None) is given
