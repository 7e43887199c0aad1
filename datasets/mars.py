"""Reader of the MARS video re-identification dataset (Zheng et al. 2016).

``--dataset_dir`` is the MARS evaluation kit folder holding ``bbox_train/``,
``bbox_test/`` and ``info/``. File names are ``PPPPCcTttttFfff.jpg``: person
id (``00-1`` = junk, ``0000`` = distractor), camera, tracklet, frame.
"""

import os

import numpy as np
import scipy.io

from cosine_metric_learning.datasets import util
from cosine_metric_learning.errors import UsageError

MAX_LABEL = 1500
LAYOUT = ("the MARS evaluation kit layout (bbox_train/ and bbox_test/ with "
          "a folder per person id, e.g. bbox_test/0002/0002C1T0001F001.jpg, "
          "and info/train_name.txt, info/test_name.txt)")


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
    filenames, ids, cameras = [], [], []
    with open(list_file) as f:
        for line in f:
            name = line.strip()
            parsed = parse_filename(name)
            if parsed is None:
                continue
            filenames.append(os.path.join(image_dir, name[:4], name))
            ids.append(parsed[0])
            cameras.append(parsed[1])
    if not filenames:
        raise UsageError(f"no MARS image names in '{list_file}'; expected "
                         "one name like 0001C1T0001F001.jpg per line")
    return filenames, np.asarray(ids, np.int64), np.asarray(cameras,
                                                            np.int64)


def read_train_split_to_str(dataset_dir):
    """Training images (256x128 on disk) as a
    :class:`datasets.util.TrainSplit`."""
    return util.TrainSplit(*_read_split(dataset_dir, "train"))


def read_test_split_to_str(dataset_dir):
    """Test images in ``info/test_name.txt`` order, as for the train split."""
    return util.TrainSplit(*_read_split(dataset_dir, "test"))


def read_test_protocol(dataset_dir):
    """The test split for the standard protocol: query vs. gallery tracklets.

    Tracklets are the rows of ``info/tracks_test_info.mat`` (start and end
    index, 1-based into ``info/test_name.txt``, person id, camera); queries
    are the rows named by ``info/query_IDX.mat``; the gallery is every
    tracklet (the query's own is junk: same id and camera).

    Returns
    -------
    datasets.util.TestSplit
        ``exports``: ``feat_test.mat`` with one row per image in
        ``test_name.txt`` order.
    """
    filenames = read_test_split_to_str(dataset_dir).filenames
    util.require_files(filenames, "MARS test image", LAYOUT)
    tracks = _load_mat(dataset_dir, "tracks_test_info.mat",
                       "track_test_info").astype(np.int64)
    query_rows = _load_mat(dataset_dir, "query_IDX.mat",
                           "query_IDX").ravel().astype(np.int64) - 1
    if tracks.ndim != 2 or tracks.shape[1] < 4 or \
            tracks[:, :2].min() < 1 or tracks[:, :2].max() > len(filenames):
        raise UsageError("info/tracks_test_info.mat: expected rows of "
                         f"(start, end, id, camera) with indices in "
                         f"1..{len(filenames)}")
    if query_rows.min() < 0 or query_rows.max() >= len(tracks):
        raise UsageError(f"info/query_IDX.mat: expected rows in "
                         f"1..{len(tracks)}")
    groups = [np.arange(start - 1, end) for start, end in tracks[:, :2]]
    ids, cameras = tracks[:, 2], tracks[:, 3] - 1
    return util.TestSplit(
        filenames=np.asarray(filenames),
        query_groups=[groups[i] for i in query_rows],
        query_ids=ids[query_rows], query_cameras=cameras[query_rows],
        gallery_groups=groups, gallery_ids=ids, gallery_cameras=cameras,
        exports={"feat_test.mat": np.arange(len(filenames))})


def _load_mat(dataset_dir, name, key):
    path = os.path.join(dataset_dir, "info", name)
    util.require_file(path, "MARS evaluation file", LAYOUT)
    contents = scipy.io.loadmat(path)
    if key not in contents:
        raise UsageError(f"'{path}' has no '{key}'; expected the MARS kit's "
                         f"{name}")
    return contents[key]
