"""TF1 models of the descriptor: Deep SORT's published ``mars-small128``.

Deep SORT ships its appearance model as a TF1 checkpoint in the V1 format
(one file, ``mars-small128.ckpt-68577``, no ``.index``) and as a frozen
graph (``mars-small128.pb``, whose Const nodes carry the variable names).
Both hold slim's variable names (``conv1_1/weights``,
``conv2_3/1/conv2_3/1/bn/beta``, ``ball/mean_vectors``, ...).
:func:`read_values` reads them, :func:`network_name` recognises the network
from them (a ``ball`` batch norm is the release's ``mars_small128``), and
:func:`assign` puts them into this project's Keras models, whose layers
map to those names one to one (:func:`tf1_names`).
"""

import os
import re

import keras
import numpy as np
import tensorflow as tf

from cosine_metric_learning import export
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line
from cosine_metric_learning.nets.deep_sort import network_definition

# a variable every encoder of this family has
MARKER = "conv1_1/weights"
# the layers of a residual block: conv2_3_1 is slim's conv2_3/1
_BLOCK_LAYER = re.compile(r"^(conv\d_\d)_(1|2|projection)$")
# the release's input size and classes
RELEASE_IMAGE_SHAPE = (128, 64, 3)


def _scope(layer_name):
    match = _BLOCK_LAYER.match(layer_name)
    return f"{match.group(1)}/{match.group(2)}" if match else layer_name


def tf1_names(model):
    """``{TF1 variable name: Keras variable}`` of an encoder or a
    classifier built by ``network_definition``."""
    names = {}
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            base = layer.name[:-len("_bn")]
            if base.endswith("_preact"):  # a block's pre-activation
                prefix = f"{base[:-len('_preact')]}/bn"
            elif base == "ball":
                prefix = "ball"
            else:
                prefix = f"{_scope(base)}/{_scope(base)}/bn"
            names[f"{prefix}/beta"] = layer.beta
            names[f"{prefix}/moving_mean"] = layer.moving_mean
            names[f"{prefix}/moving_variance"] = layer.moving_variance
        elif isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            names[f"{_scope(layer.name)}/weights"] = layer.kernel
            if layer.use_bias:
                names[f"{_scope(layer.name)}/biases"] = layer.bias
        elif isinstance(layer, network_definition.CosineSoftmaxHead):
            names["ball/mean_vectors"] = layer.mean_vectors
            names["ball/scale"] = layer.scale
    return names


def is_tf1(path):
    """Whether ``path`` is a TF1 model of the descriptor (a frozen ``.pb``
    or a checkpoint with slim's names, V1 or V2), without reading it all."""
    if path is None:
        return False
    if path.lower().endswith(".pb"):
        return os.path.isfile(path)
    if os.path.isdir(path):  # a TF1 run: its latest checkpoint
        path = tf.train.latest_checkpoint(path)
        if path is None:
            return False
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError):
        return False  # the checkpoint loader names what is wrong
    # this project's checkpoints key their values by object path instead
    return reader.has_tensor(MARKER)


def variable_names(path):
    """The variable names a TF1 model holds (a checkpoint's keys, a frozen
    graph's Const nodes), without reading their values."""
    if path.lower().endswith(".pb"):
        return {node.name for node in export.read_graph_def(path).node
                if node.op == "Const"}
    return set(tf.train.load_checkpoint(path).get_variable_to_shape_map())


def read_values(path):
    """``{variable name: ndarray}`` of a TF1 checkpoint (optimizer slots
    left out) or of the Const nodes of a frozen graph; ArgumentError if
    it holds no encoder of this network."""
    if path.lower().endswith(".pb"):
        nodes = export.read_graph_def(path).node
        values = {node.name: tf.make_ndarray(node.attr["value"].tensor)
                  for node in nodes if node.op == "Const"}
        what = "frozen graph"
        if MARKER not in values and {"images", "features"} <= {
                node.name for node in nodes}:
            raise ArgumentError(
                "path", path, "a frozen encoder whose weights are folded "
                "into its graph (as --mode=freeze writes it): it encodes, "
                "but training needs the checkpoint or run it was frozen "
                "from")
    else:
        try:
            reader = tf.train.load_checkpoint(path)
        except (tf.errors.OpError, ValueError) as e:
            raise ArgumentError("path", path, "TensorFlow cannot read the "
                                f"checkpoint ({first_line(e)})") from e
        try:
            values = {name: reader.get_tensor(name)
                      for name in reader.get_variable_to_shape_map()
                      if not name.endswith(("/Adam", "/Adam_1"))}
        except (tf.errors.OpError, ValueError) as e:
            raise ArgumentError("path", path, "the checkpoint is damaged "
                                f"({first_line(e)})") from e
        what = "checkpoint"
    if MARKER not in values:
        raise ArgumentError(
            "path", path, f"the {what} holds no encoder of Deep SORT's "
            f"network (no {MARKER}); expected Deep SORT's mars-small128 "
            "checkpoint or .pb, or a checkpoint or run of this project")
    return values


def network_name(names):
    """The network of a TF1 model's variable ``names`` (or its values, by
    name): ``mars_small128`` where a batch norm in the ``ball`` scope
    follows fc1, else ``deep_sort``."""
    return (network_definition.MARS_SMALL128.name
            if "ball/moving_mean" in names
            else network_definition.DEEP_SORT.name)


def assign(values, path, hints=None, **models):
    """Set the weights of ``models`` (``encoder=...``, ``classifier=...``)
    from ``values``; UsageError naming the variables that are missing or
    of another shape (nothing is assigned then), with ``hints[model]``
    where that model does not match."""
    pairs, missing, wrong, unmatched = [], [], [], []
    for what, model in models.items():
        for name, variable in tf1_names(model).items():
            if name not in values:
                missing.append(name)
            elif tuple(values[name].shape) != tuple(variable.shape):
                wrong.append(f"{name} is {tuple(values[name].shape)}, the "
                             f"{what} has {tuple(variable.shape)}")
            else:
                pairs.append((variable, values[name]))
                continue
            unmatched.append(what)
    if missing or wrong:
        problems = []
        if missing:
            problems.append(f"it has no {', '.join(missing[:3])}"
                            + (f" (and {len(missing) - 3} more)"
                               if len(missing) > 3 else ""))
        problems += wrong[:3]
        problems += [hint for what, hint in (hints or {}).items()
                     if what in unmatched]
        raise UsageError(f"{path} does not match the "
                         f"{' and '.join(models)}: {'; '.join(problems)}")
    for variable, value in pairs:
        variable.assign(np.asarray(value, variable.dtype))


def input_shape(path, image_shape=None):
    """The input shape of a TF1 model: 128x64 (Deep SORT's); another
    ``image_shape`` is an ArgumentError."""
    if image_shape is not None and tuple(image_shape[:2]) != \
            RELEASE_IMAGE_SHAPE[:2]:
        raise ArgumentError(
            "image_shape", tuple(image_shape), f"the TF1 model {path} takes "
            f"{RELEASE_IMAGE_SHAPE[0]}x{RELEASE_IMAGE_SHAPE[1]} images; "
            "leave it out to use that")
    return RELEASE_IMAGE_SHAPE


def load_encoder(path, image_shape=None):
    """The Keras encoder of a TF1 model, its network recognised."""
    shape = input_shape(path, image_shape)
    values = read_values(path)
    encoder = network_definition.create_encoder(
        shape, network=network_name(values))
    assign(values, path, encoder=encoder)
    return encoder
