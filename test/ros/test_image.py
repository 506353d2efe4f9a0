"""numpy <-> sensor_msgs/Image: exact round trips and clear errors."""
import numpy as np
import pytest
from sensor_msgs.msg import Image

from plan_stack.ros.image import ENCODINGS, ImageError, image_to_numpy, numpy_to_image

ROUND_TRIP = ["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "mono16", "16UC1", "32FC1"]


def _random(encoding, h=5, w=7, seed=0):
    dtype, ch = ENCODINGS[encoding]
    rng = np.random.default_rng(seed)
    shape = (h, w) if ch == 1 else (h, w, ch)
    if dtype.kind == "f":
        arr = rng.standard_normal(shape).astype(dtype)
        arr.flat[0] = np.inf  # special values survive bit-exactly
        arr.flat[1] = -0.0
        return arr
    return rng.integers(0, np.iinfo(dtype).max, size=shape, endpoint=True, dtype=dtype)


@pytest.mark.parametrize("encoding", ROUND_TRIP)
@pytest.mark.parametrize("pad", [0, 3, 16])
def test_round_trip_is_exact_including_padded_rows(encoding, pad):
    arr = _random(encoding)
    dtype, ch = ENCODINGS[encoding]
    row = arr.shape[1] * ch * dtype.itemsize
    step = row + pad * dtype.itemsize
    msg = numpy_to_image(arr, encoding, step=step)
    assert msg.step == step and len(msg.data) == step * arr.shape[0]
    back = image_to_numpy(msg)
    assert back.dtype == dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()


def test_big_endian_message_decodes_to_native_values():
    arr = _random("mono16")
    msg = Image(height=arr.shape[0], width=arr.shape[1], encoding="mono16", is_bigendian=1,
                step=arr.shape[1] * 2)
    msg.data = arr.astype(">u2").tobytes()
    np.testing.assert_array_equal(image_to_numpy(msg), arr)


def test_unpadded_decode_views_the_buffer_without_copy():
    msg = numpy_to_image(_random("rgb8", 240, 320), "rgb8")
    out = image_to_numpy(msg)
    assert not out.flags.owndata


def _msg(encoding="rgb8", h=4, w=6, step=None, n=None):
    dtype, ch = ENCODINGS.get(encoding, (np.dtype(np.uint8), 3))
    step = w * ch * dtype.itemsize if step is None else step
    m = Image(height=h, width=w, encoding=encoding, step=step)
    m.data = bytes(step * h if n is None else n)
    return m


@pytest.mark.parametrize("msg, match", [
    (_msg(encoding="yuv422_weird"), "unsupported image encoding 'yuv422_weird'"),
    (_msg(h=0), "zero size"),
    (_msg(w=0, step=0), "zero size"),
    (_msg(step=10), "step 10 is smaller than width\\*channels\\*bytes = 18"),
    (_msg(n=17), "data length 17 != step\\*height"),
    (_msg(encoding="mono16", step=13, n=13 * 4), "not a multiple"),
])
def test_inconsistent_messages_raise_clear_errors(msg, match):
    with pytest.raises(ImageError, match=match):
        image_to_numpy(msg)


@pytest.mark.parametrize("arr, encoding, match", [
    (np.zeros((4, 4), np.uint8), "rgb8", "needs shape"),
    (np.zeros((4, 4, 3), np.float32), "rgb8", "needs dtype uint8"),
    (np.zeros((0, 4, 3), np.uint8), "rgb8", "zero size"),
    (np.zeros((4, 4), np.uint8), "jpeg", "unsupported image encoding"),
])
def test_bad_arrays_raise_clear_errors(arr, encoding, match):
    with pytest.raises(ImageError, match=match):
        numpy_to_image(arr, encoding)


def test_step_smaller_than_row_is_refused_on_encode():
    with pytest.raises(ImageError, match="step 5 is smaller than the row size 12"):
        numpy_to_image(np.zeros((2, 4, 3), np.uint8), "rgb8", step=5)
