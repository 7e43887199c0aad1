"""Finding, inspecting and restoring checkpoints."""

import glob
import os

import tensorflow as tf
from absl import logging
from tensorflow.core.protobuf import trackable_object_graph_pb2

from cosine_metric_learning import files, formats, release, run_settings
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line
from cosine_metric_learning.nets.deep_sort import network_definition

STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"


class DamagedCheckpointError(UsageError):
    """A checkpoint's index or data file cannot be read."""


def _damaged(prefix, part, error):
    return DamagedCheckpointError(
        f"checkpoint {prefix} is damaged: {part} cannot be read "
        f"({first_line(error)})")


def reader(prefix):
    """A ``CheckpointReader``; DamagedCheckpointError names a bad index."""
    try:
        return tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        if not tf.io.gfile.exists(prefix + ".index"):
            raise UsageError(f"no such checkpoint {prefix} (expected "
                             f"{prefix}.index)") from e
        raise _damaged(prefix, f"{prefix}.index", e) from e


def verify(prefix):
    """Read every value of a checkpoint; DamagedCheckpointError names the
    file that cannot be read (a truncated ``.data`` file, a bad index).

    Returns the checkpoint's reader.
    """
    values = reader(prefix)
    for key in values.get_variable_to_shape_map():
        try:
            values.get_tensor(key)
        except (tf.errors.OpError, IndexError, ValueError) as e:
            data = sorted(tf.io.gfile.glob(glob.escape(prefix) + ".data-*"))
            raise _damaged(prefix, " or ".join(data) or "its data file",
                           e) from e
    return values


# the files of exported models: made from a checkpoint, not one
EXPORTED = formats.file_endings()


def resolve_checkpoint(path):
    """A checkpoint prefix from a prefix or a folder of checkpoints (a
    training run's, TF1's too: its latest); ArgumentError saying what
    ``path`` is instead."""
    if path is None:
        raise ArgumentError("path", path, "expected a checkpoint prefix or "
                            "a folder of checkpoints")
    if os.path.isdir(path):
        if tf.saved_model.contains_saved_model(path):
            raise ArgumentError("path", path, "a SavedModel is an exported "
                                "model, not a checkpoint; pass the training "
                                "run or checkpoint it was exported from")
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise ArgumentError("path", path, "the directory holds no "
                                "checkpoint")
        return latest
    if path.lower().endswith(EXPORTED) and os.path.isfile(path):
        raise ArgumentError("path", path, "an exported model, not a "
                            "checkpoint; pass the training run or "
                            "checkpoint it was exported from")
    if not tf.io.gfile.exists(path + ".index"):
        if os.path.isfile(path):  # a V1 checkpoint is one file
            try:
                tf.train.load_checkpoint(path)
            except (tf.errors.OpError, ValueError) as e:
                raise ArgumentError(
                    "path", path, "TensorFlow cannot read it as a "
                    f"checkpoint ({first_line(e)}): a damaged or "
                    "truncated file, or not a checkpoint") from None
            return path
        raise ArgumentError("path", path, "no such checkpoint (expected "
                            f"{path}.index)")
    return path


def checkpoint_objects(path):
    """Names of the top-level objects saved in a checkpoint.

    Read from the object graph, not the variable keys: a variable is keyed
    by its shortest path, which for trainable weights runs through the
    optimizer that also tracks them.
    """
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader(path).get_tensor(
        "_CHECKPOINTABLE_OBJECT_GRAPH"))
    return {child.local_name for child in graph.nodes[0].children}


def checkpoint_step(path):
    """The global step saved in a training checkpoint (else its number)."""
    values = reader(path)
    if values.has_tensor(STEP_KEY):
        return int(values.get_tensor(STEP_KEY))
    return int(path.rsplit("-", 1)[-1])


def restore(path, **objects):
    """Restore ``objects`` (e.g. ``encoder=...``) from a checkpoint.

    Everything else in the checkpoint is ignored.

    Raises
    ------
    UsageError
        If the checkpoint lacks one of ``objects`` or holds it with other
        variables or shapes.
    """
    shapes = verify(path).get_variable_to_shape_map()
    saved = checkpoint_objects(path)
    missing = sorted(set(objects) - saved)
    if missing:
        raise UsageError(f"checkpoint {path} has no {' or '.join(missing)} "
                         f"(it has: {', '.join(sorted(saved))})")
    _check_shapes(path, shapes, objects)
    try:
        # read, not restore: restore adds a save_counter that an encoder-only
        # checkpoint lacks
        tf.train.Checkpoint(**objects).read(path).expect_partial() \
            .assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise UsageError(f"checkpoint {path} does not match the "
                         f"{' and '.join(objects)}: {first_line(e)}") from e


def _check_shapes(path, shape_map, objects):
    """Refuse a checkpoint that holds no value of some variable's shape
    (``shape_map``: the checkpoint's key -> shape).

    Checked before reading, as TensorFlow would fail on the first such
    variable and then warn about every value it did not restore.
    """
    shapes = {tuple(shape) for shape in shape_map.values()}
    for name, obj in objects.items():
        for variable in getattr(obj, "weights", []):  # not RNG states
            if tuple(variable.shape) not in shapes:
                hint = ("; was it trained at another input size? No "
                        "run.json beside it records the size: give it as "
                        "image_shape (train_custom.py: --image_shape)"
                        if name == "encoder" else "")
                raise UsageError(
                    f"checkpoint {path} does not match the {name}: it holds "
                    f"no value of the shape {tuple(variable.shape)} of "
                    f"{getattr(variable, 'path', variable.name)}{hint}")


def load_encoder(path, image_shape=None):
    """The encoder of a checkpoint, with its weights.

    ``path`` is a checkpoint prefix or a folder of checkpoints (the latest
    is used), or a TF1 model (Deep SORT's ``mars-small128`` checkpoint or
    ``.pb``, :mod:`release`). The network and the input shape are the
    ones the run was trained with (its ``run.json``,
    :func:`run_settings.input_shape`); ``image_shape`` ``(H, W, 3)``, if
    given, must agree with it, and is the shape for a checkpoint without a
    run description (default 128x64).

    Returns
    -------
    (keras.Model, str)
        The encoder and the checkpoint prefix it was loaded from.
    """
    prefix = (resolve_checkpoint(path) if path is not None
              and os.path.isdir(path) else path)
    if release.is_tf1(prefix):
        return release.load_encoder(prefix, image_shape), prefix
    prefix = resolve_checkpoint(path)
    encoder = run_encoder(run_settings.describe(prefix), image_shape)
    restore(prefix, encoder=encoder)
    return encoder, prefix


def run_encoder(run, image_shape=None):
    """A new encoder of a run's network at its input shape
    (:func:`run_settings.input_shape`); without a run (None), the paper's
    network at ``image_shape`` (default 128x64)."""
    return network_definition.create_encoder(
        run_settings.input_shape(run, image_shape),
        network=run.network if run else run_settings.NETWORK)


def network_of(path):
    """The network of the model at ``path``: a TF1 model's (recognised
    from its variable names), a run's (its run.json), else the paper's."""
    if release.is_tf1(path):
        return release.network_name(release.variable_names(path))
    run = run_settings.describe(path) if path else None
    return run.network if run else run_settings.NETWORK


def warm_start(model, path, restore_classifier):
    """Initialise a new run's encoder (and classifier) from a checkpoint
    (``path``: a prefix or a folder of checkpoints, or a TF1 model)."""
    objects = {"encoder": model.encoder}
    if restore_classifier and model.classifier is not None:
        objects["classifier"] = model.classifier
    if release.is_tf1(path):
        release.assign(release.read_values(path), path, hints={
            "classifier": "its classifier (a row per identity it was "
            "trained on, if it has one) does not fit these identities: "
            "--norestore_classifier starts a new one"}, **objects)
    else:
        path = resolve_checkpoint(path)
        restore(path, **objects)
    logging.info("Initialised %s from %s", " and ".join(objects), path)


# Continuing a run ---------------------------------------------------------

def newest_complete(run_dir):
    """The newest checkpoint of a run that can be read in full.

    A damaged newer one (a truncated data file, a bad index) is named in a
    warning and passed over: the run continues from the one before, and
    trains the steps in between again. UsageError if none is complete.
    """
    state = tf.train.get_checkpoint_state(run_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if state and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    damaged = []
    for path in reversed(paths):
        try:
            verify(path)
        except DamagedCheckpointError as e:
            damaged.append(str(e))
            continue
        except UsageError:  # its files are gone
            continue
        if damaged:
            logging.warning("%s; continuing from the newest complete "
                            "checkpoint %s (step %d) instead",
                            "; ".join(damaged), path,
                            checkpoint_step(path))
        return path
    raise UsageError(f"{'; '.join(damaged) or 'no checkpoint is readable'}"
                     f"; no complete checkpoint of {run_dir} to continue "
                     "from: choose another --run_id")


def continue_run(checkpoint, objects, path, run_dir, loss_mode):
    """Restore a run's own checkpoint into ``checkpoint`` (of ``objects``)
    to continue training it; UsageError if it holds other objects."""
    def mismatch(detail):
        return UsageError(
            f"{run_dir} holds a checkpoint of another network or loss than "
            f"--loss_mode={loss_mode} ({detail}); choose another --run_id")

    saved = checkpoint_objects(path) - {"save_counter"}
    if saved != set(objects):
        raise mismatch(f"it has {', '.join(sorted(saved))}; this run has "
                       f"{', '.join(sorted(objects))}")
    try:
        checkpoint.restore(path).assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise mismatch(first_line(e)) from e


def remove_partial(run_dir, step):
    """Remove what a failed save of ``ckpt-<step>`` left behind."""
    prefix = os.path.join(run_dir, f"ckpt-{step}")
    for path in tf.io.gfile.glob(prefix + "*"):
        if path == prefix + ".index" or path.startswith(
                (prefix + ".", prefix + "_temp")):
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)


def model_identity(path):
    """``{"path", "sha256"}`` of a model as :func:`encoder.load` resolves
    it: a file's digest, a checkpoint's index file's, a SavedModel's
    graph's."""
    if os.path.isfile(path):
        target = path
    elif os.path.isfile(os.path.join(path, "saved_model.pb")):
        target = os.path.join(path, "saved_model.pb")
    else:
        path = resolve_checkpoint(path)
        target = path + ".index"
    return {"path": os.path.abspath(path), "sha256": files.digest(target)}
