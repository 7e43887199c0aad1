"""Feature files for the official evaluation kits (``--mode=export``).

As the original: Market-1501 writes ``feat_test.mat`` (gallery) and
``feat_query.mat`` into ``--sdk_dir``; MARS writes ``feat_test.mat`` (every
test image in ``info/test_name.txt`` order) into ``--dataset_dir``.
"""

import os

import scipy.io
from absl import logging

from cosine_metric_learning import files, protocol
from cosine_metric_learning.errors import UsageError

# an existing feature file is replaced only if it is one of these
KIT_FEATURES = files.mat_kind(
    {"features"}, "a feature file written by --mode=export (a .mat holding "
    "'features' only)")


def export_features(dataset, restore_path, dataset_dir, output_dir,
                    batch_size=128):
    """``--mode=export``: ``.mat`` files (key ``features``, a row per image)
    in ``output_dir``, one per entry of the split's ``exports``.

    Returns
    -------
    list of str
        The files written.
    """
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {output_dir}: {e.strerror}") from e
    split = dataset.read_test(dataset_dir)
    for name in split.exports:
        files.check_output(os.path.join(output_dir, name), KIT_FEATURES)
    split, features, _ = protocol.test_features(
        dataset, restore_path, dataset_dir, batch_size, split=split)
    written = []
    for name, indices in split.exports.items():
        path = os.path.join(output_dir, name)
        files.write_atomically(path, lambda f, i=indices: scipy.io.savemat(
            f, {"features": features[i]}), KIT_FEATURES, binary=True)
        logging.info("Wrote %s: features %s", path, features[indices].shape)
        written.append(path)
    return written
