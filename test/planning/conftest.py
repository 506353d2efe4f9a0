"""Shared tiny models for the planning tests (built once per session)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tokenizer():
    from plan_stack.planning.vocab import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def text_target(tokenizer):
    from plan_stack.planning.target import tiny_target

    return tiny_target("text", layers=3, tokenizer=tokenizer, seed=1)


@pytest.fixture(scope="session")
def vl_target(tokenizer):
    from plan_stack.planning.target import tiny_target

    return tiny_target("vl", layers=3, tokenizer=tokenizer, seed=2)


@pytest.fixture(scope="session")
def small_drafter():
    """Factory: a small untrained drafter for a target."""
    import torch

    from plan_stack.planning.drafter import new_drafter

    def make(target, seed=0):
        torch.manual_seed(seed)
        return new_drafter(target, width=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64)

    return make
