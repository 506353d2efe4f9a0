"""Frame conversion: encodings to rgb8, resize modes, compressed decoding."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from plan_stack.ingest.errors import FrameError
from plan_stack.ingest.preprocess import Preprocessor, decode_compressed, fit, to_rgb8


def _rgb(h=6, w=8, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def test_each_encoding_becomes_the_same_rgb():
    rgb = _rgb()
    np.testing.assert_array_equal(to_rgb8(rgb, "rgb8"), rgb)
    np.testing.assert_array_equal(to_rgb8(rgb[:, :, ::-1].copy(), "bgr8"), rgb)
    alpha = np.full(rgb.shape[:2] + (1,), 7, np.uint8)
    np.testing.assert_array_equal(to_rgb8(np.concatenate([rgb, alpha], 2), "rgba8"), rgb)
    np.testing.assert_array_equal(to_rgb8(np.concatenate([rgb[:, :, ::-1], alpha], 2), "bgra8"), rgb)
    mono = rgb[:, :, 0].copy()
    out = to_rgb8(mono, "mono8")
    assert out.shape == (6, 8, 3) and all((out[:, :, c] == mono).all() for c in range(3))


@pytest.mark.parametrize("arr, enc, match", [
    (np.zeros((4, 4, 3), np.uint8), "yuv422", "unsupported encoding 'yuv422'"),
    (np.zeros((4, 4, 3), np.uint16), "rgb8", "must be uint8"),
    (np.zeros((4, 4), np.uint8), "rgb8", r"rgb8 frame has shape \(4, 4\)"),
    (np.zeros((4, 4, 3), np.uint8), "mono8", "mono8 frame has shape"),
    (np.zeros((0, 4, 3), np.uint8), "rgb8", "rgb8 frame has shape"),
])
def test_bad_frames_raise(arr, enc, match):
    with pytest.raises(FrameError, match=match):
        to_rgb8(arr, enc)


def test_crop_takes_the_centre_with_the_output_aspect():
    img = np.zeros((480, 640, 3), np.uint8)
    img[:, 80:560] = 255  # the centre 480x480 square is white, the side bands black
    out = fit(img, 224, 224, "crop")
    assert out.shape == (224, 224, 3) and out.min() == 255
    tall = fit(img, 100, 200, "crop")  # portrait output from a landscape frame
    assert tall.shape == (200, 100, 3)


def test_stretch_and_pad_keep_the_whole_frame():
    img = np.full((480, 640, 3), 200, np.uint8)
    assert fit(img, 224, 224, "stretch").min() == 200
    pad = fit(img, 224, 224, "pad")
    assert pad.shape == (224, 224, 3)
    assert pad[0].max() == 0 and pad[-1].max() == 0 and pad[112].min() == 200  # letterbox bars top/bottom
    up = fit(np.full((10, 10, 3), 9, np.uint8), 20, 30, "stretch")
    assert up.shape == (30, 20, 3) and (up == 9).all()
    with pytest.raises(ValueError, match="mode"):
        fit(img, 10, 10, "zoom")


def test_preprocessor_returns_an_owned_array_even_without_work():
    buf = bytearray(_rgb(4, 4).tobytes())
    view = np.frombuffer(buf, np.uint8).reshape(4, 4, 3)
    out = Preprocessor(4, 4).raw(view, "rgb8")
    buf[0] ^= 0xFF
    assert out[0, 0, 0] != view[0, 0, 0]
    with pytest.raises(ValueError, match="positive"):
        Preprocessor(0, 4)


@pytest.mark.parametrize("ext, fmt", [(".png", "png"), (".jpg", "rgb8; jpeg compressed bgr8")])
def test_compressed_frames_decode_to_rgb(ext, fmt):
    rgb = np.zeros((32, 48, 3), np.uint8)
    rgb[..., 0] = 250  # pure red survives jpeg closely
    ok, data = cv2.imencode(ext, rgb[:, :, ::-1])
    assert ok
    out = decode_compressed(data.tobytes(), fmt)
    assert out.shape == (32, 48, 3)
    assert np.abs(out.astype(int) - rgb).max() <= 8
    assert Preprocessor(24, 16).compressed(data.tobytes(), fmt).shape == (16, 24, 3)


@pytest.mark.parametrize("data, fmt, match", [
    (b"\x89PNG garbage", "png", "cannot decode"),
    (b"", "jpeg", "empty"),
    (b"abc", "tiff", "unsupported compressed format"),
])
def test_bad_compressed_frames_raise(data, fmt, match):
    with pytest.raises(FrameError, match=match):
        decode_compressed(data, fmt)
