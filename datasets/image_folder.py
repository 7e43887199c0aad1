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
"""

import os
import re

import numpy as np

from cosine_metric_learning import preprocessing
from cosine_metric_learning.errors import UsageError
from cosine_metric_learning.datasets import market1501, util

LAYOUTS = ("auto", "identity_folders", "market")
LAYOUT_TEXT = ("one folder per identity (root/<identity>/<image>) or "
               "Market-1501 file names in one folder")


def _is_image(name):
    return name.lower().endswith(preprocessing.IMAGE_EXTENSIONS)


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
        raise UsageError(f"--layout={layout}: expected one of "
                         f"{', '.join(LAYOUTS)}")
    if layout == "auto":
        has_dirs = any(os.path.isdir(os.path.join(root, n))
                       for n in os.listdir(root))
        layout = "identity_folders" if has_dirs else "market"
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


def _read_identity_folders(root, camera_regex):
    pattern = None
    if camera_regex:
        try:
            pattern = re.compile(camera_regex)
        except re.error as e:
            raise UsageError(f"--camera_regex={camera_regex}: {e}") from e
        if pattern.groups != 1:
            raise UsageError(f"--camera_regex={camera_regex}: expected one "
                             "group, the camera")
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
