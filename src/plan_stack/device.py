"""Which device and dtype a model runs on, and which backend runs it.

One rule for every model-running node and command: `device` is `cpu`,
`cuda` or `auto` (CUDA when this torch build sees a GPU, else CPU); `dtype`
is `auto` (float32 on CPU, bfloat16 on GPUs that support it, else float16) or
an explicit `float32` / `float16` / `bfloat16`. Half precision on CPU is
refused: CPU kernels for it are slow or missing, and it buys nothing here.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a placement is resolved: `--help` stays fast
    import torch

__all__ = ["BACKENDS", "DEVICES", "DTYPES", "EngineError", "Placement", "resolve_placement", "onnx_providers",
           "import_onnxruntime", "add_device_arguments", "placement_from_args"]

DEVICES = ("cpu", "cuda", "auto")
DTYPES = ("auto", "float32", "float16", "bfloat16")
BACKENDS = ("torch", "onnx", "tensorrt")


class EngineError(ValueError):
    """A device, dtype, backend or exported model cannot be used (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Placement:
    device: torch.device
    dtype: torch.dtype

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def resolve_placement(device: str = "auto", dtype: str = "auto") -> Placement:
    """The device and dtype for `device`/`dtype` names; raises EngineError when unusable."""
    if device not in DEVICES:
        raise EngineError(f"device must be one of {DEVICES}, got {device!r}")
    if dtype not in DTYPES:
        raise EngineError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    import torch

    cuda = torch.cuda.is_available()
    if device == "cuda" and not cuda:
        raise EngineError(f"device 'cuda' requested but this torch build ({torch.__version__}) sees no GPU")
    dev = torch.device("cuda" if device == "cuda" or (device == "auto" and cuda) else "cpu")
    if dtype == "auto":
        if dev.type == "cpu":
            dt = torch.float32
        else:
            dt = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        dt = getattr(torch, dtype)
        if dev.type == "cpu" and dt is not torch.float32:
            raise EngineError(f"dtype {dtype} on the CPU is not supported: use float32 (or auto)")
    return Placement(dev, dt)


def add_device_arguments(parser: Any, *, dtype: bool = True, default: str = "cpu") -> None:
    """`--device` (and `--dtype`) for a command, with the same names and rule as the nodes' parameters.

    Training commands take no `--dtype`: they keep float32 weights and
    optimiser state on every device (half-precision training needs loss
    scaling and buys little at these model sizes).
    """
    parser.add_argument("--device", choices=DEVICES, default=default,
                        help=f"where the models run: cpu, cuda, or auto (cuda when torch sees a GPU); "
                             f"default {default}")
    if dtype:
        parser.add_argument("--dtype", choices=DTYPES, default="auto",
                            help="model dtype: auto (float32 on CPU, bfloat16/float16 on GPU) or explicit")


def placement_from_args(args: Any) -> Placement:
    """The Placement named by `--device`/`--dtype` (EngineError when unusable, e.g. cuda without a GPU)."""
    return resolve_placement(getattr(args, "device", "cpu"), getattr(args, "dtype", "auto"))


def import_onnxruntime() -> Any:
    """The onnxruntime module; EngineError naming what to install where it is missing (an optional package:
    only the `onnx` backend needs it, and an apt ROS 2 install's requirements leave it out)."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise EngineError(f"backend onnx needs the onnxruntime package ({exc}): pip install onnxruntime "
                          "(onnxruntime-gpu for CUDA)") from None
    return onnxruntime


def onnx_providers(backend: str, placement: Placement) -> list[str]:
    """onnxruntime execution providers for a backend, checked against what this install has."""
    ort = import_onnxruntime()
    available = ort.get_available_providers()
    if backend == "onnx":
        wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"] if placement.is_cuda else ["CPUExecutionProvider"]
    else:
        raise EngineError(f"backend {backend!r} does not run through onnxruntime")
    missing = [p for p in wanted[:1] if p not in available]
    if missing:
        raise EngineError(f"onnxruntime here lacks {missing[0]} (available: {available}); "
                          "install onnxruntime-gpu for CUDA")
    return wanted
