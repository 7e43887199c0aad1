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


def test_one_image_gives_one_feature_on_every_path(trained, tmp_path):
    """A 256x128 image through the encode command, ``Encoder.predict`` (a
    crop in memory), the box encoder and the test protocol's reading path:
    one reader and one resize, so one feature."""
    from cosine_metric_learning import encoder as encoder_lib
    from cosine_metric_learning import features
    from tests.conftest import run_script
    checkpoint, _ = trained
    rng = np.random.default_rng(4)
    rgb = (_gradient(256, 128).astype(int) + rng.integers(
        -40, 40, (256, 128, 3))).clip(0, 255).astype(np.uint8)
    path = tmp_path / "crop.png"
    Image.fromarray(rgb).save(path)
    result = run_script("-m", "cosine_metric_learning.encode",
                        f"--model={checkpoint}", f"--images={tmp_path}",
                        f"--output={tmp_path / 'f.npy'}")
    assert result.returncode == 0, result.stderr[-2000:]
    command = np.load(tmp_path / "f.npy")[0]
    model = encoder_lib.load(checkpoint)
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    predicted = model.predict([bgr])[0]
    boxed = encoder_lib.create_box_encoder(model)(
        np.pad(bgr, ((10, 10), (84, 84), (0, 0))), [[84, 10, 128, 256]])[0]
    protocol_path = features.make_patch_encode_fn(model, 8)([str(path)])[0]
    for name, values in (("predict", predicted), ("box encoder", boxed),
                         ("test protocol", protocol_path)):
        np.testing.assert_allclose(values, command, atol=1e-5,
                                   err_msg=name)
    # a resize that antialiases (PIL's bilinear shrinks so) would differ
    pil = np.asarray(Image.fromarray(bgr).resize((64, 128),
                                                 Image.Resampling.BILINEAR))
    assert np.abs(model(pil[None])[0] - command).max() > 1e-3


def test_resize_is_bilinear_with_half_pixel_centres():
    """Against an independent resize, up and down, batched or not; no
    antialiasing when shrinking."""
    from tests.reference import bilinear_resize
    image = (_gradient(37, 23).astype(int) * 7 % 256).astype(np.uint8)
    for height, width in ((128, 64), (16, 8), (37, 23)):
        expected = bilinear_resize(image, height, width)
        got = preprocessing.resize(image, (height, width, 3)).numpy()
        assert np.abs(got.astype(int) - expected).max() <= 1, (height, width)
        batch = preprocessing.resize(image[None], (height, width)).numpy()
        np.testing.assert_array_equal(batch[0], got)
    np.testing.assert_array_equal(preprocessing.resize(image, (37, 23)),
                                  image)


def test_random_erasing_puts_one_rectangle_inside_each_chosen_image():
    tf.random.set_seed(3)
    images = tf.random.uniform((400, 128, 64, 3), seed=1)
    erased, mask = preprocessing.random_erasing(images, 0.5)
    erased, mask, images = erased.numpy(), mask.numpy(), images.numpy()
    chosen = mask.any(axis=(1, 2))
    # about half the images (binomial: 0.5 +- 0.025), the rest untouched
    assert 0.35 < chosen.mean() < 0.65
    np.testing.assert_array_equal(erased[~mask], images[~mask])
    low, high = preprocessing.ERASING_AREA
    for m in mask[chosen]:
        rows, cols = m.any(axis=1), m.any(axis=0)
        # one rectangle: the outer product of its rows and columns
        np.testing.assert_array_equal(m, rows[:, None] & cols[None, :])
        for line in (rows, cols):  # contiguous, hence inside the image
            ends = np.flatnonzero(np.diff(np.r_[0, line.astype(int), 0]))
            assert len(ends) == 2
        # its area: shrunk to fit the 64-pixel width, never larger
        assert 0.5 * low <= m.mean() <= high + 0.01
    # the erased pixels are noise in [0, 1], not the images'
    values = erased[mask]
    assert 0 <= values.min() and values.max() <= 1
    assert abs(values.mean() - 0.5) < 0.01
    none, mask = preprocessing.random_erasing(tf.constant(images[:8]), 0.0)
    assert not mask.numpy().any()
    np.testing.assert_array_equal(none.numpy(), images[:8])


def test_patches_are_cut_at_once_as_one_cut_at_a_time():
    from cosine_metric_learning import encoder as encoder_lib
    from tests.reference import bilinear_resize
    rng = np.random.default_rng(4)
    frame = rng.integers(0, 256, (360, 640, 3), dtype=np.uint8)
    regions = [(10, 20, 74, 148),  # the patch's size: the pixels as they are
               (0, 0, 1, 1), (600, 300, 639, 359)]  # one pixel; an edge
    for _ in range(40):  # shrunk, enlarged, stretched
        w, h = int(rng.integers(2, 300)), int(rng.integers(2, 350))
        x, y = int(rng.integers(0, 640 - w)), int(rng.integers(0, 360 - h))
        regions.append((x, y, x + w, y + h))
    patches = encoder_lib.cut_patches(frame, regions, (128, 64, 3))
    assert patches.shape == (len(regions), 128, 64, 3)
    assert patches.dtype == np.uint8
    np.testing.assert_array_equal(patches[0], frame[20:148, 10:74])
    for patch, (x1, y1, x2, y2) in zip(patches, regions):
        expected = bilinear_resize(frame[y1:y2, x1:x2], 128, 64)
        assert np.abs(patch.astype(int) - expected).max() <= 1
