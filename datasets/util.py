"""Helpers shared by the dataset readers: identity split and image loading."""

import dataclasses
import os
from typing import Optional

import numpy as np

from cosine_metric_learning.errors import UsageError

VALIDATION_FRACTION = 0.1
VALIDATION_SEED = 1234


def validation_ids(ids, fraction=VALIDATION_FRACTION, seed=VALIDATION_SEED):
    """Identities held out for validation, drawn as the original does.

    ``n = int(fraction * len(unique))`` identities are drawn without
    replacement by ``np.random.RandomState(seed).choice`` from the sorted
    unique ids, so runs compare with the original's validation numbers.
    """
    unique = np.unique(ids)
    num_validation = int(fraction * len(unique))
    return np.random.RandomState(seed).choice(
        unique, num_validation, replace=False)


def split_validation(ids, fraction=VALIDATION_FRACTION, seed=VALIDATION_SEED):
    """Boolean masks ``(train, validation)`` over ``ids`` by identity."""
    ids = np.asarray(ids)
    is_validation = np.isin(ids, validation_ids(ids, fraction, seed))
    return ~is_validation, is_validation


def require_dir(path, what, layout):
    """Raise a UsageError naming ``path`` unless it is a directory."""
    if not os.path.isdir(path):
        raise UsageError(
            f"{what} not found: '{path}' is not a directory; expected {layout}")


def require_file(path, what, layout):
    """Raise a UsageError naming ``path`` unless it is a file."""
    if not os.path.isfile(path):
        raise UsageError(f"{what} not found: '{path}'; expected {layout}")


def require_files(paths, what, layout):
    """Raise a UsageError naming the first of ``paths`` that is missing.

    Lists each folder once instead of asking for every file.
    """
    listed = {}
    missing = []
    for path in paths:
        folder, name = os.path.split(path)
        if folder not in listed:
            try:
                listed[folder] = set(os.listdir(folder))
            except OSError:
                listed[folder] = set()
        if name not in listed[folder]:
            missing.append(path)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UsageError(f"{what} not found: '{missing[0]}'{more}; expected "
                         f"{layout}")


def read_named_split(directory, parse_filename, dataset, pattern, layout):
    """The images of a split folder whose names carry id and camera,
    sorted by file name.

    ``parse_filename(name)`` returns ``(id, camera_index)`` or None for a
    name to skip. Returns ``(filenames, ids, cameras, skipped)``: a list
    of paths, two int64 arrays and the skipped names. UsageError naming
    ``dataset``, the expected name ``pattern`` and ``layout`` for a
    missing folder or one without such images.
    """
    require_dir(directory, f"{dataset} split folder", layout)
    filenames, ids, cameras, skipped = [], [], [], []
    for name in sorted(os.listdir(directory)):
        parsed = parse_filename(name)
        if parsed is None:
            skipped.append(name)
            continue
        filenames.append(os.path.join(directory, name))
        ids.append(parsed[0])
        cameras.append(parsed[1])
    if not filenames:
        raise UsageError(f"no {dataset} images in '{directory}'; expected "
                         f"files named {pattern}")
    return (filenames, np.asarray(ids, np.int64),
            np.asarray(cameras, np.int64), skipped)


def image_test_split(gallery, query):
    """The :class:`TestSplit` of single-image entries from a gallery and a
    query folder, each ``(filenames, ids, cameras)``; exports
    ``feat_test.mat`` (gallery) and ``feat_query.mat`` in their order."""
    (gallery, g_ids, g_cams), (query, q_ids, q_cams) = gallery, query
    num_gallery = len(gallery)
    gallery_index = np.arange(num_gallery)
    query_index = np.arange(num_gallery, num_gallery + len(query))
    return TestSplit(
        filenames=np.asarray(list(gallery) + list(query)),
        query_groups=[np.array([i]) for i in query_index],
        query_ids=q_ids, query_cameras=q_cams,
        gallery_groups=[np.array([i]) for i in gallery_index],
        gallery_ids=g_ids, gallery_cameras=g_cams,
        exports={"feat_test.mat": gallery_index,
                 "feat_query.mat": query_index})


@dataclasses.dataclass
class TrainSplit:
    """A dataset's training images, as every reader returns them.

    Attributes
    ----------
    filenames : ndarray of str
    ids : int64 ndarray
        Person ids (0-based labels for custom data).
    cameras : int64 ndarray
        0-based camera indices, -1 where unknown.
    label_names : list of str or None
        Custom data: the identity name of each label.
    """
    filenames: np.ndarray
    ids: np.ndarray
    cameras: np.ndarray
    label_names: Optional[list] = None

    def __post_init__(self):
        self.filenames = np.asarray(self.filenames)
        self.ids = np.asarray(self.ids, np.int64)
        self.cameras = np.asarray(self.cameras, np.int64)


@dataclasses.dataclass
class TestSplit:
    """A test split as the standard protocol sees it.

    Every image to encode is in ``filenames``; a query or gallery *entry* is
    a group of images (one image for Market-1501, a tracklet for MARS)
    whose features are averaged and re-normalised.

    Attributes
    ----------
    filenames : ndarray of str
    query_groups, gallery_groups : list of int ndarray
        Indices into ``filenames`` of each entry's images.
    query_ids, query_cameras, gallery_ids, gallery_cameras : int ndarray
    exports : dict
        ``.mat`` file name -> indices into ``filenames``, in the order the
        dataset's official evaluation kit reads them (empty: no kit).
    query_frames, gallery_frames : int ndarray or None
    min_frame_gap : int or None
        Own data: entries of the query's identity and camera are good
        matches from ``min_frame_gap`` frames away, junk nearer
        (``metrics.junk_mask``); None: the kits' rule (all junk).
    """
    filenames: np.ndarray
    query_groups: list
    query_ids: np.ndarray
    query_cameras: np.ndarray
    gallery_groups: list
    gallery_ids: np.ndarray
    gallery_cameras: np.ndarray
    exports: dict
    query_frames: Optional[np.ndarray] = None
    gallery_frames: Optional[np.ndarray] = None
    min_frame_gap: Optional[int] = None

    def ranking_labels(self, queries=None):
        """What ``metrics.evaluate_ranking`` and ``metrics.junk_mask``
        take besides the distances, as keywords; of the ``queries`` (an
        index array) only, if given."""
        labels = {"query_ids": self.query_ids,
                  "query_cameras": self.query_cameras,
                  "query_frames": self.query_frames}
        if queries is not None:
            labels = {name: None if value is None
                      else np.asarray(value)[queries]
                      for name, value in labels.items()}
        return {**labels, "gallery_ids": self.gallery_ids,
                "gallery_cameras": self.gallery_cameras,
                "gallery_frames": self.gallery_frames,
                "min_frame_gap": self.min_frame_gap}
