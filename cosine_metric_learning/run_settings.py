"""What a training run records beside its checkpoints: the settings that
must not change when it continues, and the label numbering of custom data.

The settings are saved as ``run.json`` when the run starts;
continuing the run with another loss, input size or dataset is refused
with one line, because the checkpoints alone cannot tell a triplet run from
a magnet run.
"""

import json
import os

from cosine_metric_learning import files
from cosine_metric_learning.errors import UsageError

FILENAME = "run.json"
LABEL_MAP_NAME = "labels.json"
SETTINGS = ("loss_mode", "image_shape", "dataset")  # must not change
KIND = files.json_kind(set(SETTINGS), "the settings of a training run "
                       f"({', '.join(SETTINGS)})")


def settings(dataset_name, loss_mode, image_shape):
    """The settings to record, as JSON values."""
    return {"dataset": dataset_name, "loss_mode": loss_mode,
            "image_shape": [int(d) for d in image_shape]}


def read(run_dir):
    """The recorded settings of a run, or None if it has none."""
    path = os.path.join(run_dir, FILENAME)
    if not os.path.isfile(path):
        return None
    if not KIND.matches(path):
        raise UsageError(f"{path} is not {KIND.description}; remove it or "
                         "choose another --run_id")
    with open(path) as f:
        return json.load(f)


def _text(name, value):
    """A setting as the user writes it."""
    if name == "image_shape":
        return f"--image_shape={value[0]},{value[1]}"
    if name == "dataset":
        return f"dataset {value}"
    return f"--{name}={value}"


def check(run_dir, current):
    """Raise a UsageError if the recorded settings differ from ``current``.

    Returns True if the run has recorded settings.
    """
    recorded = read(run_dir)
    if recorded is None:
        return False
    for name in SETTINGS:
        if name in recorded and recorded[name] != current[name]:
            raise UsageError(
                f"cannot continue {run_dir} with {_text(name, current[name])}: "
                f"it was trained with {_text(name, recorded[name])} (see "
                f"{os.path.join(run_dir, FILENAME)}); use that, or choose "
                "another --run_id")
    return True


def record(run_dir, current):
    """Write ``run.json``; returns its path."""
    path = os.path.join(run_dir, FILENAME)
    return files.write_atomically(
        path, lambda f: json.dump(current, f, indent=1), KIND)


LABEL_MAP = files.json_kind({"source", "labels"},
                            "a label map (a JSON object with 'source' and "
                            "'labels')")


def write_label_map(directory, identity_names, source):
    """Save ``label -> identity`` as ``labels.json`` in ``directory``."""
    return files.write_atomically(
        os.path.join(directory, LABEL_MAP_NAME), lambda f: json.dump(
            {"source": os.path.abspath(source),
             "labels": {str(i): n for i, n in enumerate(identity_names)}},
            f, indent=1), LABEL_MAP)
