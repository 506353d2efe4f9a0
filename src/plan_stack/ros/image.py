"""numpy <-> sensor_msgs/Image, exact for the encodings the stack uses.

ROS 2 `cv_bridge` is not installable here and PyPI's `cv-bridge` is ROS 1 code
that breaks on numpy 2, so this is our own converter. Contract:

* `image_to_numpy` returns an (H, W) or (H, W, C) array that views the
  message's buffer when rows are not padded (copy with `.copy()` to keep it
  past the message's life); padded rows (`step > width * pixel bytes`) are
  cropped. Multi-byte encodings honour `is_bigendian`.
* `numpy_to_image` writes a tightly packed, little-endian message, or pads
  each row to `step` when asked; `data` is set from bytes (a list is 40x
  slower).
* Anything inconsistent (unknown encoding, zero size, `step` too small,
  data length not `step * height`, wrong array shape or dtype) raises
  `ImageError` naming the problem; nothing is guessed.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from sensor_msgs.msg import Image
from std_msgs.msg import Header

__all__ = ["ImageError", "ENCODINGS", "image_to_numpy", "numpy_to_image"]


class ImageError(ValueError):
    """An Image message or array that cannot be converted faithfully."""


#: encoding -> (numpy dtype, channels)
ENCODINGS: dict[str, tuple[np.dtype, int]] = {
    "rgb8": (np.dtype(np.uint8), 3),
    "bgr8": (np.dtype(np.uint8), 3),
    "rgba8": (np.dtype(np.uint8), 4),
    "bgra8": (np.dtype(np.uint8), 4),
    "mono8": (np.dtype(np.uint8), 1),
    "8UC1": (np.dtype(np.uint8), 1),
    "8UC3": (np.dtype(np.uint8), 3),
    "mono16": (np.dtype(np.uint16), 1),
    "16UC1": (np.dtype(np.uint16), 1),
    "32FC1": (np.dtype(np.float32), 1),
}


def _layout(encoding: str) -> tuple[np.dtype, int]:
    try:
        return ENCODINGS[encoding]
    except KeyError:
        raise ImageError(f"unsupported image encoding {encoding!r} (supported: {sorted(ENCODINGS)})") from None


def image_to_numpy(msg: Image) -> np.ndarray:
    """Decode an Image message; raises ImageError on any inconsistency."""
    dtype, channels = _layout(msg.encoding)
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height == 0 or width == 0:
        raise ImageError(f"image has zero size ({width}x{height})")
    row_bytes = width * channels * dtype.itemsize
    if step < row_bytes:
        raise ImageError(
            f"step {step} is smaller than width*channels*bytes = {row_bytes} for {msg.encoding} {width}x{height}"
        )
    if step % dtype.itemsize:
        raise ImageError(f"step {step} is not a multiple of the {dtype.itemsize}-byte pixel element")
    data = msg.data
    buf = memoryview(data) if not isinstance(data, np.ndarray) else data
    n = len(buf)
    if n != step * height:
        raise ImageError(f"data length {n} != step*height = {step}*{height} = {step * height}")
    flat = np.frombuffer(buf, dtype=np.uint8)
    rows = flat.reshape(height, step)[:, :row_bytes]
    order: Literal[">", "<"] = ">" if msg.is_bigendian else "<"
    typed = np.ascontiguousarray(rows) if step != row_bytes else rows
    arr = typed.view(dtype.newbyteorder(order) if dtype.itemsize > 1 else dtype)
    arr = arr.reshape(height, width, channels) if channels > 1 else arr.reshape(height, width)
    if dtype.itemsize > 1 and msg.is_bigendian:
        arr = arr.astype(dtype)  # native byte order for downstream maths
    return arr


def numpy_to_image(array: np.ndarray, encoding: str, header: Header | None = None, step: int | None = None) -> Image:
    """Encode an array as an Image message; `step` pads each row when given."""
    dtype, channels = _layout(encoding)
    arr = np.asarray(array)
    expected_ndim = 2 if channels == 1 else 3
    if arr.ndim == 3 and channels == 1 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim != expected_ndim or (channels > 1 and arr.shape[2] != channels):
        raise ImageError(f"{encoding} needs shape (H, W{f', {channels}' if channels > 1 else ''}), got {arr.shape}")
    if arr.dtype != dtype:
        raise ImageError(f"{encoding} needs dtype {dtype}, got {arr.dtype}")
    height, width = arr.shape[:2]
    if height == 0 or width == 0:
        raise ImageError(f"image has zero size ({width}x{height})")
    row_bytes = width * channels * dtype.itemsize
    step = row_bytes if step is None else int(step)
    if step < row_bytes:
        raise ImageError(f"step {step} is smaller than the row size {row_bytes}")
    little = np.ascontiguousarray(arr, dtype=dtype.newbyteorder("<"))
    if step == row_bytes:
        payload = little.tobytes()
    else:
        padded = np.zeros((height, step), dtype=np.uint8)
        padded[:, :row_bytes] = little.view(np.uint8).reshape(height, row_bytes)
        payload = padded.tobytes()
    msg = Image(height=height, width=width, encoding=encoding, is_bigendian=0, step=step)
    if header is not None:
        msg.header = header
    msg.data = payload
    return msg
