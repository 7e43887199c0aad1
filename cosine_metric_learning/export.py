"""Exported encoders: a Deep SORT frozen graph, a SavedModel and a
model-only checkpoint.

All three take what a tracker has, uint8 image patches in OpenCV's **BGR**
channel order, shape ``(N, 128, 64, 3)``, and give L2-normalised float32
features ``(N, 128)``; inference only (batch norm with its moving averages,
no dropout, no optimizer or input queue).
"""

import glob
import os
import tempfile

import tensorflow as tf
from absl import logging
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.framework import convert_to_constants
from tensorflow.python.grappler import tf_optimizer

from cosine_metric_learning import files, preprocessing
from cosine_metric_learning.errors import UsageError

INPUT_NAME = "images"          # the frozen graph's placeholder (Deep SORT)
OUTPUT_NAME = "features"
SAVED_MODEL_INPUT = "images_bgr"  # the channel order, in the signature


def inference_function(encoder, image_shape, input_name=INPUT_NAME):
    """A ``tf.function`` from uint8 BGR patches to features.

    Its input signature is ``uint8 (None, H, W, 3)`` named ``input_name``;
    the output tensor is named ``features``.
    """
    spec = tf.TensorSpec((None,) + tuple(image_shape), tf.uint8,
                         name=input_name)

    @tf.function(input_signature=[spec])
    def encode(images):
        inputs = preprocessing.preprocess(images, input_is_bgr=True)
        features = encoder(inputs, training=False)
        return tf.identity(features, name=OUTPUT_NAME)

    return encode


def frozen_graph_def(encoder, image_shape):
    """The encoder as a GraphDef, variables and constant parts folded.

    The variables become constants; Grappler then folds what only depends
    on constants (batch norm's moving statistics into scale and offset) and
    prunes everything the ``features`` output does not need.
    """
    concrete = inference_function(encoder, image_shape).get_concrete_function()
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
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


def freeze(encoder, path, image_shape):
    """Write the Deep SORT frozen graph (``images`` -> ``features``) to path."""
    graph_def = frozen_graph_def(encoder, image_shape)
    files.write_atomically(path, lambda f: f.write(
        graph_def.SerializeToString()), binary=True)
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
    module = _Serving(encoder, image_shape)
    signature = module.serve.get_concrete_function()
    _replace_dir(directory, lambda tmp: tf.saved_model.save(
        module, tmp, signatures={"serving_default": signature}))
    logging.info("Wrote SavedModel %s", directory)
    return directory


def write_encoder_checkpoint(encoder, prefix):
    """Write a checkpoint of the encoder alone (no optimizer, no classifier).

    Returns the prefix; the other modes take it as ``--restore_path``.
    """
    directory = os.path.dirname(os.path.abspath(prefix)) or "."
    files.check_writable(directory, prefix)
    tmp = os.path.join(directory, f".{os.path.basename(prefix)}.tmp")
    try:
        written = tf.train.Checkpoint(encoder=encoder).write(tmp)
        for old in glob.glob(glob.escape(prefix) + ".*"):
            if old.endswith(".index") or ".data-" in old:
                os.remove(old)
        for part in glob.glob(glob.escape(written) + ".*"):
            os.replace(part, prefix + part[len(written):])
    except (OSError, tf.errors.OpError) as e:
        for part in glob.glob(glob.escape(tmp) + "*"):
            os.remove(part)
        raise UsageError(f"cannot write checkpoint {prefix}: "
                         f"{getattr(e, 'strerror', None) or e}") from e
    logging.info("Wrote encoder checkpoint %s", prefix)
    return prefix


def _replace_dir(directory, write):
    """Let ``write(tmp_dir)`` fill a temporary folder, then move it in place."""
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    files.check_writable(parent, directory)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.",
                           dir=parent)
    try:
        write(tmp)
        os.chmod(tmp, 0o777 & ~files.umask())  # mkdtemp made it private
        if os.path.isdir(directory):
            old = tmp + ".old"
            os.rename(directory, old)
            os.rename(tmp, directory)
            tf.io.gfile.rmtree(old)
        else:
            os.rename(tmp, directory)
    except (OSError, tf.errors.OpError) as e:
        if os.path.isdir(tmp):
            tf.io.gfile.rmtree(tmp)
        raise UsageError(f"cannot write {directory}: "
                         f"{getattr(e, 'strerror', None) or e}") from e
