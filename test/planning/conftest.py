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
    from plan_stack.planning.target_build import tiny_target

    return tiny_target("text", layers=3, tokenizer=tokenizer, seed=1)


@pytest.fixture(scope="session")
def vl_target(tokenizer):
    from plan_stack.planning.target_build import tiny_target

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


# The coordinate vocabulary and its token sets (layouts, grammar, selection, fields tests).
@pytest.fixture(scope="session")
def tok():
    from plan_stack.planning import vocab as V

    return V.build_tokenizer()


@pytest.fixture(scope="session")
def vocab(tok):
    from plan_stack.planning import vocab as V

    return V.Vocab.from_tokenizer(tok)


@pytest.fixture(scope="session")
def sets(vocab):
    from plan_stack.planning.grammar import TokenSets

    return TokenSets(vocab)


#: image size (width, height) of the layout tests' pixel fields
IMAGE = (640, 480)


@pytest.fixture(scope="session")
def random_fields():
    """`f(kind, P, rng)` -> random PrimitiveFields of a layout kind (2D pairs sometimes out of frame)."""
    return _random_fields


def _apart(rng, size, gap):
    """Two sorted uniform draws on [0, size] at least `gap` apart."""
    while True:
        a, b = sorted(rng.uniform(0, size) for _ in range(2))
        if b - a >= gap:
            return a, b


def _random_fields(kind, p, rng):
    from plan_stack.planning.fields import PrimitiveFields
    from plan_stack.planning.layouts import KINDS
    from plan_stack.planning.quantisation import RANGES
    from plan_stack.planning.vocab import N_BINS

    parts, arms, msg_kind = KINDS[kind]
    out = []
    for _ in range(arms):
        has_2d = any(pt.space == "image" for pt in parts)
        uv, pts = (), ()
        if kind == "box":
            # corners at least two bins apart: closer ones share a bin and are pushed one bin apart by design
            # (`test_box_encoding_enforces_order`), beyond the half-bin round trip asserted for the rest
            u1, u2 = _apart(rng, IMAGE[0], 2 * IMAGE[0] / N_BINS)
            v1, v2 = _apart(rng, IMAGE[1], 2 * IMAGE[1] / N_BINS)
            uv = (u1, v1, u2, v2)
        else:
            space = parts[-1].space
            rx, ry = RANGES[space]["x"], RANGES[space]["y"]
            rz = RANGES[space].get("z", (0.0, 0.0))
            pts = tuple((rng.uniform(*rx), rng.uniform(*ry), rng.uniform(*rz) if space == "robot" else 0.0)
                        for _ in range(p))
            if has_2d:
                vals = []
                for _ in range(p):
                    if rng.random() < 0.2:
                        vals += [float("nan"), float("nan")]
                    else:
                        vals += [rng.uniform(0, IMAGE[0] - 1), rng.uniform(0, IMAGE[1] - 1)]
                uv = tuple(vals)
        out.append(PrimitiveFields(kind=msg_kind, points=pts, uv=uv))
    return out
