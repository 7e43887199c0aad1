"""Feature files of the test split (``--mode=export``).

``--format=kit`` (the default), as the original: Market-1501 writes
``feat_test.mat`` (gallery) and ``feat_query.mat`` into ``--sdk_dir``; MARS
writes ``feat_test.mat`` (every test image in ``info/test_name.txt`` order)
into ``--dataset_dir``.

``--format=pytorch_result``: one ``.mat`` file in the layout that
Person_reID_baseline's and similar PyTorch evaluation scripts read:
``query_f``, ``query_label``, ``query_cam``, ``gallery_f``,
``gallery_label``, ``gallery_cam`` (a row per query and gallery entry; MARS
tracklets pooled as the protocol pools them; label -1 is junk) and
``query_name``, ``gallery_name`` (each entry's first file).
"""

import os

import scipy.io
from absl import logging

from cosine_metric_learning import features as features_lib
from cosine_metric_learning import files, protocol
from cosine_metric_learning.errors import UsageError

# an existing feature file is replaced only if it is one of these
KIT_FEATURES = files.mat_kind(
    {"features"}, "a feature file written by --mode=export (a .mat holding "
    "'features' only)")
FORMATS = ("kit", "pytorch_result")
PYTORCH_RESULT_KEYS = ("query_f", "query_label", "query_cam", "gallery_f",
                       "gallery_label", "gallery_cam", "query_name",
                       "gallery_name")
PYTORCH_RESULT = files.mat_kind(
    PYTORCH_RESULT_KEYS, "a pytorch_result file written by --mode=export (a "
    ".mat holding query_f, gallery_f and their labels and cameras)")


def export_features(dataset, restore_path, dataset_dir, output_dir,
                    batch_size=128, image_shape=None):
    """``--mode=export``: ``.mat`` files (key ``features``, a row per image)
    in ``output_dir``, one per entry of the split's ``exports``.

    Returns
    -------
    list of str
        The files written.
    """
    split = dataset.read_test(dataset_dir)
    if not split.exports:
        raise UsageError(f"{dataset.name} data has no official evaluation "
                         "kit; its features go in the layout of PyTorch "
                         "evaluation scripts (export_pytorch_result; on the "
                         "command line --format=pytorch_result)")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {output_dir}: {e.strerror}") from e
    for name in split.exports:
        files.check_output(os.path.join(output_dir, name), KIT_FEATURES)
    split, features, _ = protocol.test_features(
        dataset, restore_path, dataset_dir, batch_size, split=split,
        image_shape=image_shape)
    written = []
    for name, indices in split.exports.items():
        path = os.path.join(output_dir, name)
        files.write_atomically(path, lambda f, i=indices: scipy.io.savemat(
            f, {"features": features[i]}), KIT_FEATURES, binary=True)
        logging.info("Wrote %s: features %s", path, features[indices].shape)
        written.append(path)
    return written


def export_pytorch_result(dataset, restore_path, dataset_dir, output,
                          batch_size=128, image_shape=None):
    """``--mode=export --format=pytorch_result``: one ``.mat`` file (see
    the module's docstring); returns its path."""
    files.check_output(output, PYTORCH_RESULT)
    split, features, _ = protocol.test_features(
        dataset, restore_path, dataset_dir, batch_size,
        image_shape=image_shape)
    values = {}
    for side in ("query", "gallery"):
        groups = getattr(split, f"{side}_groups")
        values[f"{side}_f"] = features_lib.pool_groups(
            features, groups).astype("float32")
        values[f"{side}_label"] = getattr(split, f"{side}_ids")
        values[f"{side}_cam"] = getattr(split, f"{side}_cameras")
        values[f"{side}_name"] = [str(split.filenames[g[0]]) for g in groups]
    files.write_atomically(output, lambda f: scipy.io.savemat(f, values),
                           PYTORCH_RESULT, binary=True)
    logging.info("Wrote %s: %d queries, %d gallery entries", output,
                 len(values["query_f"]), len(values["gallery_f"]))
    return output
