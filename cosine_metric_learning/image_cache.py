"""``--cache_images``: decode every training image once, into memory.

The images are read and decoded as the producers read them
(``preprocessing.read_image``: uint8 RGB at the network's input size), in
parallel, before training; the producers then only gather, flip and
enqueue. The memory it takes is reported before filling, and refused
above ``--cache_max_gb``. Unreadable images are handled as the producers
handle them: each is named once and skipped, and more than the run allows
stop it.
"""

import os
import time

import numpy as np
import tensorflow as tf
from absl import logging

from cosine_metric_learning import preprocessing, queued_trainer
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.errors import first_line

PROGRESS_SECS = 10.0


def machine_memory_gb():
    """Physical memory of this machine in GB (0 where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return 0.0


# the default limit: a quarter of the machine's memory (the model, the
# queue and TensorFlow need the rest)
DEFAULT_MAX_GB = round(machine_memory_gb() / 4, 1) or 4.0


def cache_gb(num_images, image_shape):
    """GB that ``num_images`` uint8 images of ``image_shape`` take."""
    return num_images * int(np.prod(image_shape)) / 1e9


def fill(filenames, image_shape, max_gb, max_unreadable):
    """Decode ``filenames`` into one uint8 array.

    Returns
    -------
    (ndarray, ndarray)
        The images ``(M, H, W, 3)`` and the indices into ``filenames`` of
        the ``M`` readable ones, in order.

    Raises
    ------
    UsageError
        If the images would take more than ``max_gb``.
    queued_trainer.UnreadableDataError
        If more than ``max_unreadable`` images cannot be read (a
        TrainingError, as when the producers find them).
    """
    image_shape = tuple(image_shape[:2]) + (3,)
    size = cache_gb(len(filenames), image_shape)
    if size > max_gb:
        raise UsageError(
            f"--cache_images: the {len(filenames)} training images take "
            f"{size:.2f} GB at {image_shape[0]}x{image_shape[1]}, more than "
            f"--cache_max_gb={max_gb:g}; raise it if the machine has the "
            "memory, or train without --cache_images")
    logging.info("Caching %d training images at %dx%d: %.2f GB in memory "
                 "(limit %g GB)", len(filenames), image_shape[0],
                 image_shape[1], size, max_gb)
    images = np.empty((len(filenames),) + image_shape, np.uint8)
    filled = np.zeros(len(filenames), bool)
    start = last = time.time()
    for index, image in _decoded(filenames, image_shape):
        images[index] = image
        filled[index] = True
        if time.time() - last >= PROGRESS_SECS:
            last = time.time()
            logging.info("cached %d/%d images (%.0f images/s)",
                         filled.sum(), len(filenames),
                         filled.sum() / (last - start))
    missing = np.flatnonzero(~filled)
    _report_unreadable(filenames, missing, image_shape, max_unreadable)
    kept = np.flatnonzero(filled)
    # close the gaps in place: a copy would hold the cache twice
    for row in range(missing[0] if len(missing) else len(kept), len(kept)):
        images[row] = images[kept[row]]
    logging.info("Cached %d images in %.1f s", len(kept), time.time() - start)
    return images[:len(kept)], kept


def _decoded(filenames, image_shape):
    """``(index, image)`` of every readable file, read in parallel; the
    files that cannot be read are left out."""
    dataset = tf.data.Dataset.from_tensor_slices(
        (np.arange(len(filenames)), np.asarray(filenames, str)))
    dataset = dataset.map(
        lambda i, f: (i, preprocessing.read_image(f, image_shape)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    dataset = dataset.ignore_errors().prefetch(tf.data.AUTOTUNE)
    for index, image in dataset.as_numpy_iterator():
        yield index, image


def _report_unreadable(filenames, missing, image_shape, max_unreadable):
    if not len(missing):
        return
    names = [str(filenames[i]) for i in missing]
    errors = preprocessing.unreadable_files(names, image_shape)
    for j, name in enumerate(names):
        reason = first_line(errors[j]) if j in errors else "unreadable"
        logging.warning("Skipping unreadable image '%s': %s", name, reason)
    if len(missing) > max_unreadable:
        raise queued_trainer.UnreadableDataError(
            queued_trainer.too_many_unreadable(names, max_unreadable))


def feed(cache, batches):
    """Batches of cached images for the producers: ``batches`` yields
    ``(rows, labels)`` with rows into ``cache``."""
    for rows, batch_labels in batches:
        yield cache[rows], batch_labels
