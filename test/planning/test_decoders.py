"""Decoding names and DecoderConfig: declared once, validated by the config, importable without torch."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from plan_stack.config import ConfigError
from plan_stack.planning.decoders import DECODINGS, DecoderChoice, DecoderConfig, Decoding


def test_the_decodings_are_ar_dflash_and_vflash_and_their_names_are_the_cli_choices():
    assert DECODINGS == ("ar", "dflash", "vflash") == tuple(Decoding)
    assert all(type(name) is str for name in DECODINGS)  # argparse quotes the choices' reprs when it refuses


def test_the_decoder_choice_is_declared_once_and_shared_with_the_runtime_config():
    from plan_stack.planning.runtime import RuntimeConfig

    for cls in (DecoderConfig, RuntimeConfig):
        assert issubclass(cls, DecoderChoice)
        first = dataclasses.fields(cls)[0]
        assert first.name == "decoder" and first.metadata == dataclasses.fields(DecoderChoice)[0].metadata
    assert RuntimeConfig(decoder="ar").decoder is Decoding.AR
    assert DecoderConfig().decoder is Decoding.VFLASH


def test_bad_options_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"^decoder: 'greedy' is not one of \['ar', 'dflash', 'vflash'\]"):
        DecoderConfig(decoder="greedy")
    with pytest.raises(ConfigError, match="^box_guard"):
        DecoderConfig(box_guard=2.0)
    with pytest.raises(ConfigError, match="^text_block"):
        DecoderConfig(text_block=1)
    with pytest.raises(ConfigError, match="^gate_max_step_change_m"):
        DecoderConfig(gate_max_step_change_m=-1.0)


def test_the_decodings_import_without_torch():
    code = "import sys, plan_stack.planning.decoders; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
