"""Features of image files: with a restored Keras encoder in one graph
for the evaluator, and with any loaded :class:`encoder.Encoder` for the
test protocol, the kits' feature files, ``encode`` and ``search``."""

import glob
import os
import time

import numpy as np
import tensorflow as tf
from absl import logging

from cosine_metric_learning import files, preprocessing, sampling
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line


def make_encode_fn(encoder, image_shape, batch_size, flip_test=False):
    """A function mapping file names to features ``(N, D)``, in batches.

    With ``flip_test`` the features of each image and its mirror image are
    summed and re-normalised.
    """
    load = preprocessing.make_batch_loader(image_shape, training=False)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode(filenames):
        images = load(filenames)
        features = encoder(images, training=False)
        if flip_test:
            features += encoder(tf.reverse(images, axis=[2]), training=False)
            features = tf.math.l2_normalize(features, axis=1)
        return features

    return lambda filenames: sampling.run_in_batches(
        lambda batch: encode(batch).numpy(), filenames, batch_size)


def make_patch_encode_fn(encoder, batch_size, flip_test=False):
    """:func:`make_encode_fn` for an :class:`encoder.Encoder` (a checkpoint
    or an exported model on its runtime): the files are read as uint8 BGR
    patches (:func:`preprocessing.read_patches`) and passed to it."""
    def encode(filenames):
        patches = preprocessing.read_patches(filenames, encoder.image_shape)
        features = encoder(patches)
        if flip_test:
            features = features + encoder(np.ascontiguousarray(
                patches[:, :, ::-1]))
            features /= np.linalg.norm(features, axis=1, keepdims=True)
        return features

    return lambda filenames: sampling.run_in_batches(encode, filenames,
                                                     batch_size)


def encode_or_blame(encode, filenames, image_shape):
    """``(features, {})``, or ``(None, {index: error})`` naming the files
    that cannot be read when encoding failed because of them; a failure no
    file is to blame for is raised."""
    try:
        return encode(filenames), {}
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError):
        bad = preprocessing.unreadable_files(filenames, image_shape)
        if not bad:
            raise
        return None, bad


def pool_groups(features, groups):
    """Average each group's features and L2-normalise: (len(groups), D)."""
    pooled = np.stack([features[g].mean(axis=0) for g in groups])
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.maximum(norms, 1e-12)


def list_images(pattern):
    """Sorted image files of a folder or a glob pattern."""
    if os.path.isdir(pattern):
        paths = [os.path.join(pattern, n) for n in os.listdir(pattern)
                 if n.lower().endswith(files.IMAGE_EXTENSIONS)]
    else:
        paths = [f for f in glob.glob(pattern) if os.path.isfile(f)]
    if not paths:
        raise ArgumentError("pattern", pattern, "no image files found "
                            "(expected a folder or a glob of "
                            f"{'/'.join(files.IMAGE_EXTENSIONS)} "
                            "files)")
    return sorted(paths)


def _read_patches(paths, shape):
    """Image files as uint8 BGR patches of ``shape``, read as the training
    pipeline reads them; UsageError naming the first unreadable one."""
    try:
        return preprocessing.read_patches(paths, shape)
    except (tf.errors.OpError, ValueError) as e:
        bad = preprocessing.unreadable_files(paths, shape)
        if not bad:
            raise
        index, error = next(iter(bad.items()))
        raise UsageError(f"cannot read image '{paths[index]}': "
                         f"{first_line(error)}") from e


def encode_files(encoder, paths, batch_size=32, progress_every_secs=5.0):
    """Features of image files, with a progress line now and then."""
    features, start, last = [], time.time(), 0.0
    for i in range(0, len(paths), batch_size):
        batch = _read_patches(paths[i:i + batch_size], encoder.image_shape)
        features.append(encoder(batch))
        done = min(i + batch_size, len(paths))
        if time.time() - last >= progress_every_secs or done == len(paths):
            last = time.time()
            logging.info("encoded %d/%d images (%.1f images/s)", done,
                         len(paths), done / max(last - start, 1e-9))
    return np.concatenate(features)
