"""What a training run records beside its checkpoints, and reads back:
the settings that must not change when it continues, and the label
numbering of custom data.

The settings are saved as ``run.json`` when the run starts: the dataset,
the loss, the network and the input shape. Continuing the run with
another loss, input size or dataset is refused with one line, because the
checkpoints alone cannot tell a triplet run from a magnet run. Every
command that uses a run's checkpoints reads its input shape from there
(:func:`describe`, :func:`input_shape`), so it need not be repeated;
runs from before ``run.json`` keep working with the shape given.
"""

import dataclasses
import json
import os
from typing import Optional, Tuple

from cosine_metric_learning import files
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.nets.deep_sort import network_definition

FILENAME = "run.json"
LABEL_MAP_NAME = "labels.json"
SETTINGS = ("loss_mode", "image_shape", "dataset")  # must not change
# the network of a run without the key: the only one before it was recorded
NETWORK = "deep_sort"
KIND = files.json_kind(set(SETTINGS), "the settings of a training run "
                       f"({', '.join(SETTINGS)})")


@dataclasses.dataclass(frozen=True)
class Run:
    """A training run as its folder describes it."""
    directory: str
    dataset: str
    loss_mode: str
    image_shape: Tuple[int, int, int]
    network: str = NETWORK
    labels: Optional[Tuple[str, ...]] = None  # custom data: name per label


def settings(dataset_name, loss_mode, image_shape, network=NETWORK):
    """The settings to record, as JSON values."""
    return {"dataset": dataset_name, "loss_mode": loss_mode,
            "image_shape": [int(d) for d in image_shape],
            "network": network}


def as_json(config):
    """Every field of a settings object, as JSON values (what JSON lacks
    as text)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


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


def describe(path):
    """The :class:`Run` that ``path`` (a run folder, or a checkpoint prefix
    in one) belongs to; None where no ``run.json`` describes it."""
    directory = path if os.path.isdir(path) else os.path.dirname(
        os.path.abspath(path))
    recorded = read(directory)
    if recorded is None:
        return None
    labels = read_label_map(directory)
    return Run(directory, recorded["dataset"], recorded["loss_mode"],
               tuple(recorded["image_shape"]) + (3,) * (
                   len(recorded["image_shape"]) == 2),
               recorded.get("network", NETWORK),
               None if labels is None else tuple(labels))


def input_shape(run, image_shape=None):
    """The input shape ``(H, W, 3)`` of a run's network: the recorded one;
    ``image_shape``, if given, must agree with it (ArgumentError naming
    both). Without a run: ``image_shape``, else the default 128x64."""
    if image_shape is not None:
        image_shape = tuple(int(d) for d in image_shape[:2]) + (3,)
    if run is None:
        return image_shape or network_definition.IMAGE_SHAPE
    recorded = tuple(run.image_shape[:2]) + (3,)
    if image_shape is not None and image_shape != recorded:
        raise ArgumentError(
            "image_shape", image_shape,
            f"the run {run.directory} was trained at {recorded[0]}x"
            f"{recorded[1]} (its {FILENAME}); leave it out to use that")
    return recorded


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


def read_label_map(directory):
    """The identity names of the labels, in label order, from the run's
    ``labels.json``; None where there is none."""
    path = os.path.join(directory, LABEL_MAP_NAME)
    if not os.path.isfile(path):
        return None
    if not LABEL_MAP.matches(path):
        raise UsageError(f"{path} is not {LABEL_MAP.description}")
    with open(path) as f:
        labels = json.load(f)["labels"]
    return [labels[str(i)] for i in range(len(labels))]


def check_label_map(directory, identity_names):
    """Refuse to continue a run on data whose identities are numbered
    otherwise than when it started (its classifier's rows would mean other
    people)."""
    recorded = read_label_map(directory)
    if recorded is None or list(recorded) == list(identity_names):
        return
    changed = next((i for i, (a, b) in enumerate(zip(recorded,
                                                     identity_names))
                    if a != b), min(len(recorded), len(identity_names)))
    raise UsageError(
        f"cannot continue {directory}: the dataset's identities are "
        f"numbered otherwise than its {LABEL_MAP_NAME} ({len(identity_names)}"
        f" identities now, {len(recorded)} then; label {changed} differs); "
        "train a new --run_id, or warm-start one with --restore_path and "
        "--norestore_classifier")


def write_label_map(directory, identity_names, source):
    """Save ``label -> identity`` as ``labels.json`` in ``directory``."""
    return files.write_atomically(
        os.path.join(directory, LABEL_MAP_NAME), lambda f: json.dump(
            {"source": os.path.abspath(source),
             "labels": {str(i): n for i, n in enumerate(identity_names)}},
            f, indent=1), LABEL_MAP)
