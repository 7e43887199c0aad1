"""Encode image files with a trained or exported encoder.

    python -m cosine_metric_learning.encode --model=mars.pb \
        --images='crops/*.jpg' --output=features.npy

``--model`` is any model :func:`encoder.load` opens; ``--backend`` picks
the runtime (``.onnx`` runs on ONNX Runtime or OpenVINO).

``--images`` is a folder (its ``.jpg``, ``.jpeg`` and ``.png`` files) or a
glob pattern. Each image is read and resized to the model's input size as
the training pipeline reads it (``preprocessing.read_patches``). ``.npy``
output writes the features and the file names, one per row, to
``<output stem>.filenames.txt`` beside them, and the model that encoded
them (its path and digest) to ``<output stem>.model.json``, which
``search build`` checks; ``.mat`` output holds features and names (keys
``features`` and ``filenames``).
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import os

import numpy as np
import scipy.io
from absl import app

from cosine_metric_learning import checkpoints, commands
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import features as features_lib
from cosine_metric_learning import files, settings
from cosine_metric_learning.errors import ArgumentError
from cosine_metric_learning.errors import parse_flags


FEATURES_MAT = files.mat_kind({"features", "filenames"},
                              "a feature file written by this command (a .mat "
                              "holding 'features' and 'filenames')")


def _rows_and_lines(npy_path):
    """``(rows of the .npy, lines of its file-name list)``; OSError or
    ValueError where either is missing or unreadable."""
    with open(files.names_path(npy_path)) as f:
        lines = len(f.read().splitlines())
    return len(np.load(npy_path, mmap_mode="r")), lines


def _is_feature_pair(npy_path):
    rows, lines = _rows_and_lines(npy_path)
    return rows == lines


# the .npy and its file-name list are one output: either is replaced only
# if both are there and agree
FEATURES_NPY = files.Kind(
    "a feature file written by this command (a .npy with a file-name list "
    "of as many lines beside it)", _is_feature_pair)


def _names_kind(npy_path):
    return files.Kind(f"the file-name list of {npy_path} (a line per row of "
                      "it)", lambda _: _is_feature_pair(npy_path))


def _outputs(output):
    """``[(file, kind)]`` that writing to ``output`` writes."""
    extension = os.path.splitext(output)[1]
    if extension == ".npy":
        return [(output, FEATURES_NPY),
                (files.names_path(output), _names_kind(output)),
                (files.model_record_path(output), files.MODEL_RECORD)]
    if extension == ".mat":
        return [(output, FEATURES_MAT)]
    raise ArgumentError("output", output, "expected a .npy or .mat file name")


def check_output(output):
    """Refuse an output path that cannot be written, before any work."""
    for name, kind in _outputs(output):
        files.check_output(name, kind)


def write_features(output, features, names, model=None):
    """Write ``.npy`` (+ file names and the record of ``model``, a
    :func:`checkpoints.model_identity`, beside it) or ``.mat``; returns
    paths."""
    outputs = _outputs(output)
    if len(outputs) == 3:
        (npy, npy_kind), (names_path, names_kind), (record, record_kind) = \
            outputs
        return files.write_together([
            (npy, lambda f: np.save(f, features), npy_kind, True),
            (names_path, lambda f: f.write(
                "".join(name + "\n" for name in names)), names_kind, False),
            (record, lambda f: files.dump_model_record(f, model),
             record_kind, False)])
    return [files.write_atomically(output, lambda f: scipy.io.savemat(
        f, {"features": features,
            "filenames": np.asarray(names, dtype=object)}), FEATURES_MAT,
        binary=True)]


def main(argv):
    def run():
        config = commands.values(settings.EncodeConfig)
        check_output(config.output)
        paths = features_lib.list_images(config.images)
        encoder = encoder_lib.load(config.model, config.batch_size,
                                   config.shape, config.backend)
        features = features_lib.encode_files(encoder, paths, config.batch_size)
        model = checkpoints.model_identity(config.model)
        for path in write_features(config.output, features, paths, model):
            print(f"wrote {path}")
        return 0

    return commands.run(argv, run, [settings.EncodeConfig])


if __name__ == "__main__":
    commands.define([settings.EncodeConfig])
    app.run(main, flags_parser=parse_flags)
