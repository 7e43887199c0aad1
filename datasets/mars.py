"""Reader of the MARS video re-identification dataset (Zheng et al. 2016).

``--dataset_dir`` is the MARS evaluation kit folder holding ``bbox_train/``,
``bbox_test/`` and ``info/``. File names are ``PPPPCcTttttFfff.jpg``: person
id (``00-1`` = junk, ``0000`` = distractor), camera, tracklet, frame.
"""

import os

import numpy as np

from datasets import util
from cosine_metric_learning.errors import UsageError

MAX_LABEL = 1500
IMAGE_SHAPE = (128, 64, 3)  # images are 256x128 on disk, resized for the net
LAYOUT = ("the MARS evaluation kit layout (bbox_train/, bbox_test/, "
          "info/train_name.txt, info/test_name.txt)")


def parse_filename(name):
    """Return ``(person_id, camera_index, tracklet_index)`` of a file name.

    ``camera_index`` is 0-based; returns None when the name does not parse.
    """
    if len(name) < 15 or name[4] != "C" or name[6] != "T":
        return None
    try:
        person_id = -1 if name[:4] == "00-1" else int(name[:4])
        return person_id, int(name[5]) - 1, int(name[7:11])
    except ValueError:
        return None


def _read_split(dataset_dir, split):
    """Read ``info/<split>_name.txt`` and the images it lists, in its order."""
    util.require_dir(dataset_dir, "MARS dataset folder", LAYOUT)
    list_file = os.path.join(dataset_dir, "info", f"{split}_name.txt")
    image_dir = os.path.join(dataset_dir, f"bbox_{split}")
    util.require_file(list_file, "MARS image list", LAYOUT)
    util.require_dir(image_dir, "MARS image folder", LAYOUT)
    filenames, ids, cameras, tracklets = [], [], [], []
    with open(list_file) as f:
        for line in f:
            name = line.strip()
            parsed = parse_filename(name)
            if parsed is None:
                continue
            filenames.append(os.path.join(image_dir, name[:4], name))
            ids.append(parsed[0])
            cameras.append(parsed[1])
            tracklets.append(parsed[2])
    if not filenames:
        raise UsageError(f"no MARS image names in '{list_file}'; expected "
                         "one name like 0001C1T0001F001.jpg per line")
    return (filenames, np.asarray(ids, np.int64),
            np.asarray(cameras, np.int64), np.asarray(tracklets, np.int64))


def read_train_split_to_str(dataset_dir):
    """Training images: ``(filenames, ids, camera_indices, tracklet_indices)``."""
    return _read_split(dataset_dir, "train")


def read_test_split_to_str(dataset_dir):
    """Test images in ``info/test_name.txt`` order, as for the train split."""
    return _read_split(dataset_dir, "test")
