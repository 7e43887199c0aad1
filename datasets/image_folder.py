"""Reader for your own re-identification data.

Two layouts:

* ``identity_folders``: one folder per identity, ``root/<identity>/<image>``
  (``.jpg``, ``.jpeg``, ``.png``); the folder name is the identity.
* ``market``: Market-1501-style file names in one flat folder
  (``PPPP_cCsS_FFFFFF_DD.jpg``); the camera comes from the name.

``auto`` picks ``identity_folders`` when ``root`` has sub-folders, else
``market``. With ``camera_regex`` (one group, matched against the file name)
the camera of an image in an identity folder is known; otherwise it is
unknown (-1) and validation galleries draw two images of the identity.
Identities are numbered 0..N-1 in sorted order; training saves the
numbering beside the checkpoints (``run_settings.write_label_map``) so
features can be traced back.

The test protocol (:func:`read_test_protocol`) takes a folder of people
the model was not trained on. Each identity gives one query per camera
(its middle image in frame order; with unknown cameras, all its images
are one camera), and the gallery is every other image. Images of the
query's identity in another camera are good matches; in its own camera
they are good from ``min_frame_gap`` frames away and junk nearer, so
near-duplicate frames of one track do not count (with one camera the
split is by time alone). The frame is the last number in an identity
folder's file name (``000123.jpg``, ``c2_000123.jpg``), the ``FFFFFF`` of
a Market-1501 name.
"""

import collections
import os
import re

import numpy as np

from cosine_metric_learning import files, metrics
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.datasets import market1501, util

LAYOUTS = ("auto", "identity_folders", "market")
# frames between a query and a good match of its identity and camera
MIN_FRAME_GAP = 30
LAYOUT_TEXT = ("one folder per identity (root/<identity>/<image>) or "
               "Market-1501 file names in one folder")


def _is_image(name):
    return name.lower().endswith(files.IMAGE_EXTENSIONS)


def read_image_folder(root, layout="auto", camera_regex=None):
    """Read a folder of identities.

    Returns
    -------
    datasets.util.TrainSplit
        ``ids`` are 0..N-1 indices into ``label_names``; cameras are
        0-based, -1 where unknown.

    Raises
    ------
    UsageError
        For a missing or empty folder, an unknown layout, a bad regex, or an
        identity with a single image (it can be neither anchor nor positive).
    """
    util.require_dir(root, "image folder", LAYOUT_TEXT)
    if layout not in LAYOUTS:
        raise ArgumentError("layout", layout,
                            f"expected one of {', '.join(LAYOUTS)}")
    layout = _resolve_layout(root, layout)
    if layout == "market":
        filenames, raw_ids, cameras = market1501.read_split_to_str(root)
        names = [f"{i:04d}" for i in raw_ids]
    else:
        filenames, names, cameras = _read_identity_folders(root, camera_regex)
    identity_names, ids = np.unique(np.asarray(names), return_inverse=True)
    counts = np.bincount(ids, minlength=len(identity_names))
    if np.any(counts < 2):
        single = identity_names[np.argmin(counts)]
        where = (os.path.join(root, single) if layout == "identity_folders"
                 else f"identity {single} in {root}")
        raise UsageError(f"{where} has a single image; every identity needs "
                         "at least two (remove it or add images)")
    return util.TrainSplit(filenames, ids, cameras,
                           label_names=[str(n) for n in identity_names])


def _resolve_layout(root, layout):
    if layout == "auto":
        has_dirs = any(os.path.isdir(os.path.join(root, n))
                       for n in os.listdir(root))
        return "identity_folders" if has_dirs else "market"
    return layout


_LAST_NUMBER = re.compile(r"(\d+)\D*$")


def frame_number(filename, layout):
    """The frame of an image from its name (see the module's docstring),
    or None where the name has none."""
    name = os.path.basename(filename)
    if layout == "market":
        return int(name.split("_")[2])
    match = _LAST_NUMBER.search(os.path.splitext(name)[0])
    return int(match.group(1)) if match else None


def read_test_protocol(root, layout="auto", camera_regex=None,
                       min_frame_gap=MIN_FRAME_GAP):
    """The test split of a folder of held-out people (see the module's
    docstring).

    Returns
    -------
    datasets.util.TestSplit
        No kit exports; frames and ``min_frame_gap`` for the junk.

    Raises
    ------
    UsageError
        As :func:`read_image_folder`; for a name without a frame number
        (unless ``min_frame_gap`` is 0), and when no query has a good match.
    """
    if min_frame_gap < 0:
        raise ArgumentError("min_frame_gap", min_frame_gap,
                            "expected 0 or more frames")
    split = read_image_folder(root, layout, camera_regex)
    layout = _resolve_layout(root, layout)
    frames = [frame_number(f, layout) for f in split.filenames]
    if min_frame_gap and None in frames:
        name = split.filenames[frames.index(None)]
        raise UsageError(f"no frame number in the name of '{name}'; the test "
                         "protocol needs one (e.g. 000123.jpg) to leave out "
                         "near-duplicate frames, or --min_frame_gap=0")
    frames = np.asarray([f or 0 for f in frames], np.int64)
    groups = collections.defaultdict(list)
    for i, key in enumerate(zip(split.ids, split.cameras)):
        groups[key].append(i)
    queries = np.asarray(sorted(
        sorted(members, key=lambda i: (frames[i], split.filenames[i]))[
            len(members) // 2] for members in groups.values()), np.int64)
    gallery = np.setdiff1d(np.arange(len(split.filenames)), queries)
    test = util.TestSplit(
        filenames=split.filenames,
        query_groups=[np.array([i]) for i in queries],
        query_ids=split.ids[queries], query_cameras=split.cameras[queries],
        gallery_groups=[np.array([i]) for i in gallery],
        gallery_ids=split.ids[gallery], gallery_cameras=split.cameras[gallery],
        exports={}, query_frames=frames[queries],
        gallery_frames=frames[gallery], min_frame_gap=min_frame_gap)
    if not any(_has_good_match(test, rows) for rows in np.array_split(
            np.arange(len(queries)), max(1, len(queries) // 256))):
        raise UsageError(
            f"no query in '{root}' has an image of its identity in another "
            f"camera or at least --min_frame_gap={min_frame_gap} frames "
            "away; lower --min_frame_gap or add images")
    return test


def _has_good_match(split, rows):
    """Whether one of the queries ``rows`` of a test split has a good
    match."""
    labels = split.ranking_labels(rows)
    same = labels["query_ids"][:, None] == split.gallery_ids[None, :]
    return bool(np.any(same & ~metrics.junk_mask(**labels)))


def _read_identity_folders(root, camera_regex):
    pattern = None
    if camera_regex:
        try:
            pattern = re.compile(camera_regex)
        except re.error as e:
            raise ArgumentError("camera_regex", camera_regex, str(e)) from e
        if pattern.groups != 1:
            raise ArgumentError("camera_regex", camera_regex,
                                "expected one group, the camera")
    filenames, names, camera_names = [], [], []
    for identity in sorted(os.listdir(root)):
        folder = os.path.join(root, identity)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not _is_image(name):
                continue
            filenames.append(os.path.join(folder, name))
            names.append(identity)
            match = pattern.search(name) if pattern else None
            camera_names.append(match.group(1) if match else None)
    if not filenames:
        raise UsageError(f"no images in the identity folders of '{root}'; "
                         f"expected {LAYOUT_TEXT}")
    known = sorted({c for c in camera_names if c is not None})
    index = {c: i for i, c in enumerate(known)}
    cameras = [index.get(c, -1) for c in camera_names]
    return filenames, names, cameras
