"""Image decoding and preprocessing, eagerly and inside tf.function."""

import io

import numpy as np
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import preprocessing


def _encode(array, fmt="PNG"):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


def _gradient(h, w):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                     (x + y) % 256], axis=-1).astype(np.uint8)


def test_decode_keeps_size_and_resizes_other_sizes_eager_and_traced():
    shape = (128, 64, 3)
    same = _gradient(128, 64)
    large = _gradient(256, 128)
    traced = tf.function(lambda c: preprocessing.decode_image(c, shape))
    for fn in (lambda c: preprocessing.decode_image(c, shape), traced):
        np.testing.assert_array_equal(fn(_encode(same)).numpy(), same)
        resized = fn(_encode(large)).numpy()
        assert resized.shape == shape and resized.dtype == np.uint8
        # a 2x bilinear downscale of a linear ramp is close to the ramp
        expected = np.asarray(Image.fromarray(large).resize(
            (64, 128), Image.Resampling.BILINEAR), np.float64)
        assert np.abs(resized[..., :2] - expected[..., :2]).max() <= 3


def test_grayscale_is_forced_to_three_channels():
    gray = np.arange(8 * 4, dtype=np.uint8).reshape(8, 4)
    image = preprocessing.decode_image(_encode(gray), (8, 4, 3)).numpy()
    assert image.shape == (8, 4, 3)
    for c in range(3):
        np.testing.assert_array_equal(image[..., c], gray)


def test_preprocess_scales_flips_in_training_only_and_reverses_bgr():
    image = _gradient(8, 4)
    out = preprocessing.preprocess(image).numpy()
    np.testing.assert_allclose(out, image / 255.0, rtol=1e-6)
    bgr = preprocessing.preprocess(image[..., ::-1], input_is_bgr=True)
    np.testing.assert_allclose(bgr.numpy(), out, rtol=1e-6)
    flips = set()
    for _ in range(40):
        train = preprocessing.preprocess(image, training=True).numpy()
        if np.allclose(train, out):
            flips.add(False)
        else:
            np.testing.assert_allclose(train, out[:, ::-1], rtol=1e-6)
            flips.add(True)
    assert flips == {False, True}
