"""Exported encoders: a Deep SORT frozen graph, a SavedModel and a
model-only checkpoint.

All three take what a tracker has, uint8 image patches in OpenCV's **BGR**
channel order, shape ``(N, H, W, 3)`` at the network's input size (128x64
unless trained at another ``--image_shape``), and give L2-normalised
float32 features ``(N, 128)``; inference only (batch norm with its moving averages,
no dropout, no optimizer or input queue).
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.framework import convert_to_constants
from tensorflow.python.grappler import tf_optimizer

from cosine_metric_learning import files, preprocessing
from cosine_metric_learning.errors import ArgumentError

INPUT_NAME = "images"          # the frozen graph's placeholder (Deep SORT)
OUTPUT_NAME = "features"
SAVED_MODEL_INPUT = "images_bgr"  # the channel order, in the signature

# The inputs an export can take (--export_layout): the project's own,
# uint8 BGR (N, H, W, 3) as OpenCV gives crops; and BoxMOT's, float32
# (N, 3, H, W) of RGB divided by 255 and normalised with ImageNet's mean
# and standard deviation, as every BoxMOT re-identification backend feeds
# a model.
DEFAULT_LAYOUT = "default"
BOXMOT = "boxmot"
LAYOUTS = (DEFAULT_LAYOUT, BOXMOT)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def input_spec(image_shape, layout=DEFAULT_LAYOUT, name=INPUT_NAME):
    """The ``tf.TensorSpec`` of an export's input in ``layout``."""
    height, width = image_shape[:2]
    if layout == BOXMOT:
        return tf.TensorSpec((None, 3, height, width), tf.float32, name=name)
    return tf.TensorSpec((None, height, width, 3), tf.uint8, name=name)


def layout_input(patches, layout):
    """uint8 BGR patches ``(N, H, W, 3)`` as an export in ``layout`` takes
    them (NumPy): themselves, or BoxMOT's normalised NCHW RGB."""
    if layout != BOXMOT:
        return patches
    rgb = np.asarray(patches, np.float32)[..., ::-1] / 255.0
    normalised = (rgb - np.float32(IMAGENET_MEAN)) / np.float32(IMAGENET_STD)
    return np.ascontiguousarray(normalised.transpose(0, 3, 1, 2))


def inference_function(encoder, image_shape, input_name=INPUT_NAME,
                       layout=DEFAULT_LAYOUT):
    """A ``tf.function`` from patches in ``layout`` to features.

    Its input signature is :func:`input_spec` named ``input_name``
    (uint8 BGR ``(None, H, W, 3)`` by default); the output tensor is named
    ``features``. BoxMOT's layout is undone in the first ops (NCHW to
    NHWC, the normalisation to [0, 1] RGB), so the network sees what the
    default layout gives it from the same crops.
    """
    spec = input_spec(image_shape, layout, input_name)

    @tf.function(input_signature=[spec])
    def encode(images):
        if layout == BOXMOT:
            rgb = tf.transpose(images, (0, 2, 3, 1))
            inputs = rgb * tf.constant(IMAGENET_STD) + tf.constant(
                IMAGENET_MEAN)
        else:
            inputs = preprocessing.preprocess(images, input_is_bgr=True)
        features = encoder(inputs, training=False)
        return tf.identity(features, name=OUTPUT_NAME)

    return encode


def frozen_function(encoder, image_shape, layout=DEFAULT_LAYOUT):
    """The inference function's concrete function with the variables as
    constants (what the frozen graph and the TFLite model are made of)."""
    return convert_to_constants.convert_variables_to_constants_v2(
        inference_function(encoder, image_shape,
                           layout=layout).get_concrete_function())


def frozen_graph_def(encoder, image_shape, layout=DEFAULT_LAYOUT):
    """The encoder as a GraphDef, variables and constant parts folded.

    The variables become constants; Grappler then folds what only depends
    on constants (batch norm's moving statistics into scale and offset) and
    prunes everything the ``features`` output does not need.
    """
    frozen = frozen_function(encoder, image_shape, layout)
    graph_def = _fold_constants(frozen.graph.as_graph_def())
    inputs = [n for n in graph_def.node if n.op == "Placeholder"]
    if [n.name for n in inputs] != [INPUT_NAME]:
        raise RuntimeError(f"frozen graph inputs {[n.name for n in inputs]}, "
                           f"expected ['{INPUT_NAME}']")
    return graph_def


def _fold_constants(graph_def):
    meta_graph = meta_graph_pb2.MetaGraphDef()
    meta_graph.graph_def.CopyFrom(graph_def)
    # Grappler keeps what the "train_op" collection fetches
    meta_graph.collection_def["train_op"].node_list.value.append(OUTPUT_NAME)
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.extend(["pruning", "constfold", "arithmetic",
                               "dependency", "constfold"])
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    return tf_optimizer.OptimizeGraph(config, meta_graph)


def read_graph_def(path):
    """The ``GraphDef`` of a binary ``.pb`` file; ArgumentError naming the
    path if it holds none."""
    graph_def = graph_pb2.GraphDef()
    try:
        with open(path, "rb") as f:
            graph_def.ParseFromString(f.read())
    except Exception as e:  # a protobuf DecodeError
        raise ArgumentError("path", path, "not a frozen TensorFlow graph "
                            f"({type(e).__name__})") from e
    return graph_def


def _is_frozen_encoder(path):
    graph_def = read_graph_def(path)
    names = {node.name for node in graph_def.node}
    return {INPUT_NAME, OUTPUT_NAME} <= names


# What each exporter writes; an existing output is replaced only if it is
# recognisably the same kind (see files.check_output).
FROZEN_GRAPH = files.Kind(
    f"a frozen encoder graph ('{INPUT_NAME}' -> '{OUTPUT_NAME}')",
    _is_frozen_encoder)
SAVED_MODEL_ENTRIES = {"saved_model.pb", "saved_model.pbtxt", "variables",
                       "assets", "fingerprint.pb", "keras_metadata.pb"}
SAVED_MODEL = files.Kind(
    "a SavedModel folder (saved_model.pb, variables/ and nothing else)",
    lambda p: tf.saved_model.contains_saved_model(p) and
    set(os.listdir(p)) <= SAVED_MODEL_ENTRIES,
    is_dir=True)


def _is_checkpoint_index(path):
    tf.train.load_checkpoint(path[:-len(".index")])
    return True


CHECKPOINT_INDEX = files.Kind("the index of a TensorFlow checkpoint",
                              _is_checkpoint_index)


def check_checkpoint_prefix(prefix):
    """Raise a UsageError unless ``prefix.index`` and its data files can be
    written as an encoder checkpoint."""
    if os.path.isdir(prefix):
        raise ArgumentError("prefix", prefix, "a folder; expected a "
                            "checkpoint prefix such as market1501.ckpt "
                            "(written as <prefix>.index and <prefix>.data-*)")
    files.check_output(prefix + ".index", CHECKPOINT_INDEX)
    return prefix


def check_frozen_output(path):
    """Refuse a path :func:`freeze` would not replace."""
    return files.check_output(path, FROZEN_GRAPH)


def check_saved_model_output(directory):
    """Refuse a folder :func:`write_saved_model` would not replace."""
    return files.check_output(directory, SAVED_MODEL)


def freeze(encoder, path, image_shape):
    """Write the Deep SORT frozen graph (``images`` -> ``features``) to path."""
    files.check_output(path, FROZEN_GRAPH)
    graph_def = frozen_graph_def(encoder, image_shape)
    files.write_atomically(path, lambda f: f.write(
        graph_def.SerializeToString()), FROZEN_GRAPH, binary=True)
    logging.info("Wrote %s (%d nodes)", path, len(graph_def.node))
    return path


class _Serving(tf.Module):
    def __init__(self, encoder, image_shape):
        super().__init__()
        self.encoder = encoder
        encode = inference_function(encoder, image_shape,
                                    input_name=SAVED_MODEL_INPUT)

        @tf.function(input_signature=encode.input_signature)
        def serve(images_bgr):
            return {OUTPUT_NAME: encode(images_bgr)}

        self.serve = serve


def write_saved_model(encoder, directory, image_shape):
    """Write a SavedModel with a ``serving_default`` signature.

    ``serving_default`` takes ``images_bgr`` (uint8, BGR, ``(N, H, W, 3)``)
    and returns ``{"features": float32 (N, 128)}``.
    """
    files.check_output(directory, SAVED_MODEL)
    module = _Serving(encoder, image_shape)
    signature = module.serve.get_concrete_function()
    files.replace_dir_atomically(
        directory, lambda tmp: tf.saved_model.save(
            module, tmp, signatures={"serving_default": signature}),
        SAVED_MODEL, errors=(tf.errors.OpError,))
    logging.info("Wrote SavedModel %s", directory)
    return directory


def write_encoder_checkpoint(encoder, prefix):
    """Write a checkpoint of the encoder alone (no optimizer, no classifier).

    Returns the prefix; the other modes take it as ``--restore_path``.
    """
    check_checkpoint_prefix(prefix)
    files.replace_parts_atomically(
        prefix, lambda tmp: tf.train.Checkpoint(encoder=encoder).write(tmp),
        r"\.index|\.data-\d{5}-of-\d{5}", errors=(tf.errors.OpError,))
    logging.info("Wrote encoder checkpoint %s", prefix)
    return prefix


def write_checkpoint(encoder, prefix, image_shape=None):
    """:func:`write_encoder_checkpoint` as the export modes call a writer
    (the image shape is the checkpoint's own)."""
    return write_encoder_checkpoint(encoder, prefix)
