"""Finding, inspecting and restoring checkpoints."""

import os

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from cosine_metric_learning.errors import UsageError, first_line
from nets.deep_sort import network_definition

STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"


def resolve_checkpoint(path, flag="--restore_path"):
    """A checkpoint prefix from a prefix or a directory; UsageError if none.

    ``flag`` names the setting the path came from, for the message.
    """
    if path is None:
        raise UsageError(f"{flag} is required: the checkpoint to use")
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise UsageError(f"{flag}={path}: the directory holds no "
                             "checkpoint")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise UsageError(f"{flag}={path}: no such checkpoint "
                         f"(expected {path}.index)")
    return path


def checkpoint_objects(path):
    """Names of the top-level objects saved in a checkpoint.

    Read from the object graph, not the variable keys: a variable is keyed
    by its shortest path, which for trainable weights runs through the
    optimizer that also tracks them.
    """
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(path).get_tensor(
        "_CHECKPOINTABLE_OBJECT_GRAPH"))
    return {child.local_name for child in graph.nodes[0].children}


def checkpoint_step(path):
    """The global step saved in a training checkpoint (else its number)."""
    reader = tf.train.load_checkpoint(path)
    if reader.has_tensor(STEP_KEY):
        return int(reader.get_tensor(STEP_KEY))
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
    saved = checkpoint_objects(path)
    missing = sorted(set(objects) - saved)
    if missing:
        raise UsageError(f"checkpoint {path} has no {' or '.join(missing)} "
                         f"(it has: {', '.join(sorted(saved))})")
    try:
        # read, not restore: restore adds a save_counter that an encoder-only
        # checkpoint lacks
        tf.train.Checkpoint(**objects).read(path).expect_partial() \
            .assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise UsageError(f"checkpoint {path} does not match the "
                         f"{' and '.join(objects)}: {first_line(e)}") from e


def load_encoder(path, image_shape, flag="--restore_path"):
    """An encoder for ``image_shape`` with the weights of a checkpoint.

    ``path`` is a checkpoint prefix or a folder of checkpoints (the latest
    is used); ``flag`` names where it came from, for the messages.

    Returns
    -------
    (keras.Model, str)
        The encoder and the checkpoint prefix it was loaded from.
    """
    prefix = resolve_checkpoint(path, flag)
    encoder = network_definition.create_encoder(tuple(image_shape))
    restore(prefix, encoder=encoder)
    return encoder, prefix
