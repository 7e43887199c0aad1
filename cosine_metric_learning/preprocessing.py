"""Image reading and preprocessing: the one place both are defined.

The network sees ``float32(image) / 255`` in RGB order; training adds a
random left-right flip. ``input_is_bgr`` reverses the channels first (Deep
SORT feeds OpenCV's BGR frames to the exported encoder).
"""

import functools
import math

import numpy as np
import tensorflow as tf


def resize(image, image_shape):
    """uint8 ``(h, w, 3)`` images (a tensor or array, batched or not)
    resized to ``image_shape[:2]``: bilinear with half-pixel centres and no
    antialiasing, rounded back to uint8; unchanged at that size already.

    The one resize of the project: training, the test protocol, the encode
    command, ``Encoder.predict`` and the box encoder all use it. It is the
    original pipeline's (``tf.image.resize_images``, bilinear) and, like
    OpenCV's ``INTER_LINEAR`` in Deep SORT's feature tool, it does not
    antialias when it shrinks.
    """
    image = tf.convert_to_tensor(image)
    height, width = image_shape[0], image_shape[1]
    size = tf.shape(image)[-3:-1]
    same_size = tf.logical_and(size[0] == height, size[1] == width)
    return tf.cond(
        same_size,
        lambda: image,
        lambda: tf.cast(tf.round(tf.clip_by_value(tf.image.resize(
            image, (height, width)), 0.0, 255.0)), tf.uint8))


def decode_image(contents, image_shape):
    """Decode encoded image bytes to uint8 RGB of ``image_shape[:2]``.

    Any channel count is forced to 3; images of another size are resized
    (:func:`resize`).
    """
    image = tf.io.decode_image(contents, channels=3, expand_animations=False)
    image = resize(image, image_shape)
    image.set_shape((image_shape[0], image_shape[1], 3))
    return image


def read_image(filename, image_shape):
    """Read and decode one image file (a scalar string tensor)."""
    return decode_image(tf.io.read_file(filename), image_shape)


@functools.lru_cache(maxsize=None)
def _patch_reader(image_shape):
    shape = (image_shape[0], image_shape[1], 3)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def read(filenames):
        images = tf.map_fn(lambda f: read_image(f, shape), filenames,
                           parallel_iterations=16,
                           fn_output_signature=tf.TensorSpec(shape,
                                                             tf.uint8))
        return tf.reverse(images, axis=[-1])

    return read


def read_patches(filenames, image_shape):
    """Image files as uint8 BGR patches ``(N, H, W, 3)`` of
    ``image_shape``, as a tracker would pass them: read, decoded and
    resized as the training pipeline reads them. A file that cannot be
    read raises a ``tf.errors.OpError`` (:func:`unreadable_files` tells
    which)."""
    if len(filenames) == 0:
        return np.zeros((0, image_shape[0], image_shape[1], 3), np.uint8)
    return _patch_reader(tuple(image_shape[:2]))(
        tf.constant([str(f) for f in filenames])).numpy()


def preprocess(image, training=False, input_is_bgr=False):
    """Map uint8 images (..., H, W, 3) to the network's float32 input."""
    if input_is_bgr:
        image = tf.reverse(image, axis=[-1])
    image = tf.cast(image, tf.float32) / 255.0
    if training:
        image = tf.image.random_flip_left_right(image)
    return image


def make_batch_loader(image_shape, training=False):
    """A function mapping a batch of inputs to preprocessed float32 images.

    The inputs are either file names (a string vector: read, decode and
    resize each) or uint8 images already in memory ``(N, H, W, 3)``.
    """
    out_shape = tuple(image_shape[:2]) + (3,)

    def load(inputs):
        if inputs.dtype == tf.string:
            def load_one(filename):
                return preprocess(read_image(filename, out_shape), training)
            return tf.map_fn(
                load_one, inputs, parallel_iterations=16,
                fn_output_signature=tf.TensorSpec(out_shape, tf.float32))
        if training:  # flip per image, not the batch as a whole
            return tf.map_fn(lambda x: preprocess(x, training=True), inputs,
                             fn_output_signature=tf.TensorSpec(out_shape,
                                                               tf.float32))
        return preprocess(inputs)

    return load


def unreadable_files(filenames, image_shape):
    """``{index: error}`` of the files that cannot be read and decoded.

    One file at a time, to find which files of a batch that failed as a
    whole are to blame.
    """
    bad = {}
    for index, filename in enumerate(filenames):
        try:
            read_image(tf.constant(filename), image_shape)
        except (tf.errors.OpError, ValueError) as e:
            bad[index] = e
    return bad


# random erasing (Zhong et al. 2020): the share of the image a rectangle
# covers and its aspect ratio (height / width, drawn log-uniformly)
ERASING_AREA = (0.02, 0.4)
ERASING_ASPECT = (0.3, 1 / 0.3)


def random_erasing(images, probability):
    """Each of the float images ``(N, H, W, C)`` has, with
    ``probability``, one rectangle inside it replaced by uniform noise in
    [0, 1] (Zhong et al., "Random Erasing Data Augmentation", AAAI 2020).

    The rectangle covers :data:`ERASING_AREA` of the image at an aspect
    ratio in :data:`ERASING_ASPECT`, shrunk to fit the image, at a
    uniformly drawn place where it fits whole. Returns ``(images, mask)``:
    the erased pixels are where ``mask`` (N, H, W) is True.
    """
    shape = tf.shape(images)
    n = shape[0]
    h, w = tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)

    def uniform(low=0.0, high=1.0):
        return tf.random.uniform((n,), low, high)

    area = uniform(*ERASING_AREA) * h * w
    aspect = tf.exp(uniform(math.log(ERASING_ASPECT[0]),
                            math.log(ERASING_ASPECT[1])))
    eh = tf.clip_by_value(tf.round(tf.sqrt(area * aspect)), 1.0, h)
    ew = tf.clip_by_value(tf.round(tf.sqrt(area / aspect)), 1.0, w)
    top = tf.minimum(tf.floor(uniform() * (h - eh + 1.0)), h - eh)
    left = tf.minimum(tf.floor(uniform() * (w - ew + 1.0)), w - ew)
    erase = uniform() < probability
    rows = tf.range(h)[None, :, None]
    cols = tf.range(w)[None, None, :]

    def column(v):
        return v[:, None, None]

    mask = ((rows >= column(top)) & (rows < column(top + eh))
            & (cols >= column(left)) & (cols < column(left + ew))
            & column(erase))
    noise = tf.random.uniform(shape, dtype=images.dtype)
    return tf.where(mask[..., None], noise, images), mask
