"""Reader of the Market-1501 dataset (Zheng et al. 2015).

File names are ``PPPP_cCsS_FFFFFF_DD.jpg``: person id ``PPPP`` (``0000`` =
distractor, ``-1`` = junk detection), camera ``C`` (1..6), sequence ``S``,
frame and detection number. Anything else (``Thumbs.db``) is skipped; a
doubled extension (``x.jpg.jpg``) is accepted.
"""

import os
import re

from cosine_metric_learning.datasets import util

MAX_LABEL = 1501
LAYOUT = ("the Market-1501 layout (bounding_box_train/, bounding_box_test/, "
          "query/ with files named PPPP_cCsS_FFFFFF_DD.jpg)")

_FILENAME = re.compile(r"^(-1|\d{4})_c(\d)s(\d+)_\d+_\d+(\.jpg)+$")


def parse_filename(name):
    """Return ``(person_id, camera_index)`` of a file name, or None.

    ``camera_index`` is 0-based (camera ``c1`` is 0).
    """
    match = _FILENAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)) - 1


def read_split_to_str(directory):
    """Read one split folder, sorted by file name.

    Returns
    -------
    (filenames, ids, camera_indices)
        A list of paths and two int64 arrays.
    """
    return util.read_named_split(directory, parse_filename, "Market-1501",
                                 "PPPP_cCsS_FFFFFF_DD.jpg", LAYOUT)[:3]


def read_train_split_to_str(dataset_dir):
    """The ``bounding_box_train`` split as a :class:`datasets.util.TrainSplit`."""
    util.require_dir(dataset_dir, "Market-1501 dataset folder", LAYOUT)
    return util.TrainSplit(*read_split_to_str(
        os.path.join(dataset_dir, "bounding_box_train")))


def read_test_split_to_str(dataset_dir):
    """Gallery and query splits.

    Returns
    -------
    (gallery, query)
        Each ``(filenames, ids, camera_indices)``: ``bounding_box_test`` and
        ``query``.
    """
    util.require_dir(dataset_dir, "Market-1501 dataset folder", LAYOUT)
    return (read_split_to_str(os.path.join(dataset_dir, "bounding_box_test")),
            read_split_to_str(os.path.join(dataset_dir, "query")))


def read_test_protocol(dataset_dir):
    """The test split for the standard protocol: query vs. gallery images.

    Returns
    -------
    datasets.util.TestSplit
        ``exports``: ``feat_test.mat`` (gallery) and ``feat_query.mat``, in
        the sorted file order the Market-1501 kit reads.
    """
    return util.image_test_split(*read_test_split_to_str(dataset_dir))
