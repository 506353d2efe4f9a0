"""Device and dtype selection: one rule for every model-running node."""
from __future__ import annotations

import sys

import pytest
import torch

from plan_stack.device import EngineError, onnx_providers, resolve_placement


def test_auto_is_float32_cpu_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: auto picks cuda")
    p = resolve_placement("auto", "auto")
    assert p.device.type == "cpu" and p.dtype is torch.float32 and not p.is_cuda


def test_cuda_without_a_gpu_is_refused_with_the_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(EngineError, match="sees no GPU"):
        resolve_placement("cuda")


@pytest.mark.parametrize("device, dtype, match", [
    ("tpu", "auto", "device must be one of"),
    ("cpu", "int8", "dtype must be one of"),
    ("cpu", "float16", "on the CPU is not supported"),
])
def test_bad_names_are_refused(device, dtype, match):
    with pytest.raises(EngineError, match=match):
        resolve_placement(device, dtype)


def test_cpu_provider_for_onnx_and_no_provider_for_tensorrt():
    p = resolve_placement("cpu")
    assert onnx_providers("onnx", p) == ["CPUExecutionProvider"]
    with pytest.raises(EngineError, match="does not run through onnxruntime"):
        onnx_providers("tensorrt", p)


def test_backend_onnx_without_onnxruntime_names_the_package_to_install(monkeypatch):
    """onnxruntime is optional (an apt ROS 2 install's requirements leave it out): without it the `onnx`
    backend is refused with what to install, which a node reports as a parameter error."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(EngineError, match="needs the onnxruntime package.*pip install onnxruntime"):
        onnx_providers("onnx", resolve_placement("cpu"))
