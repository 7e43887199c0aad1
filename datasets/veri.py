"""Reader of the VeRi-776 vehicle re-identification dataset (Liu et al.
2016), the original's third dataset.

``--dataset_dir`` holds ``image_train/``, ``image_test/`` (the gallery)
and ``image_query/`` (with ``name_train.txt``, ``name_test.txt`` and
``name_query.txt`` beside them, which list the same files in the same
sorted order). File names are ``VVVV_cCCC_FFFFFFFF_N.jpg``: vehicle id,
camera (``c001``..``c020``), frame and index; a doubled extension is
accepted, anything else (``Thumbs.db``, a stray text file) is skipped and
counted. Vehicle ids are the labels, as the original's (``MAX_LABEL =
769``).

The test protocol is the field's (torchreid, fast-reid, the VeRi papers):
each query of ``image_query/`` against ``image_test/``; gallery images of
the query's vehicle *and* camera are junk; there are no distractor ids.
"""

import os
import re

import numpy as np
from absl import logging

from cosine_metric_learning.datasets import util
from cosine_metric_learning.errors import UsageError

MAX_LABEL = 769
NAME_PATTERN = "VVVV_cCCC_FFFFFFFF_N.jpg"
LAYOUT = ("the VeRi layout (image_train/, image_test/, image_query/ with "
          f"files named {NAME_PATTERN})")

_FILENAME = re.compile(r"^(\d{4})_c(\d{3})_(\d+)_(\d+)(\.jpg)+$")


def parse_filename(name):
    """``(vehicle_id, camera_index)`` of a file name (camera ``c001`` is
    0), or None."""
    match = _FILENAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)) - 1


def read_split_to_str(directory):
    """One split folder, sorted by file name: ``(filenames, ids,
    camera_indices)``; names that do not parse are skipped, and counted
    in a warning."""
    filenames, ids, cameras, skipped = util.read_named_split(
        directory, parse_filename, "VeRi", NAME_PATTERN, LAYOUT)
    if skipped:
        logging.warning("%s: skipped %d files whose names are not %s (e.g. "
                        "%s)", directory, len(skipped), NAME_PATTERN,
                        skipped[0])
    return filenames, ids, cameras


def read_train_split_to_str(dataset_dir):
    """``image_train/`` as a :class:`datasets.util.TrainSplit`; a vehicle
    id above :data:`MAX_LABEL` (no classifier row) is refused."""
    util.require_dir(dataset_dir, "VeRi dataset folder", LAYOUT)
    split = util.TrainSplit(*read_split_to_str(
        os.path.join(dataset_dir, "image_train")))
    if split.ids.max() > MAX_LABEL:
        raise UsageError(
            f"vehicle id {split.ids.max()} in {dataset_dir}/image_train is "
            f"above {MAX_LABEL}: the classifier has a row per id 0..."
            f"{MAX_LABEL}, as the original's")
    return split


def read_test_protocol(dataset_dir):
    """The test split: queries of ``image_query/`` against
    ``image_test/``.

    Returns
    -------
    datasets.util.TestSplit
        ``exports``: ``feat_test.mat`` (gallery) and ``feat_query.mat``, in
        the sorted order of ``name_test.txt`` and ``name_query.txt``.
    """
    util.require_dir(dataset_dir, "VeRi dataset folder", LAYOUT)
    gallery, g_ids, g_cams = read_split_to_str(
        os.path.join(dataset_dir, "image_test"))
    query, q_ids, q_cams = read_split_to_str(
        os.path.join(dataset_dir, "image_query"))
    absent = np.setdiff1d(q_ids, g_ids)
    if len(absent) == len(np.unique(q_ids)):
        raise UsageError(f"no query vehicle of {dataset_dir}/image_query is "
                         "in image_test/; expected " + LAYOUT)
    if len(absent):
        logging.warning("%d query vehicles are not in image_test/ (e.g. "
                        "%04d); their queries have no match and are left "
                        "out", len(absent), absent[0])
    return util.image_test_split((gallery, g_ids, g_cams),
                                 (query, q_ids, q_cams))
