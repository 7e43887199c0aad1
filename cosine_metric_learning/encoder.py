"""Feature extraction with a trained encoder, as a tracker uses it.

:func:`load` opens a frozen Deep SORT graph (``.pb``), a SavedModel folder
or a checkpoint (prefix or training run folder) and returns an
:class:`Encoder` that maps uint8 BGR patches to features.
:func:`create_box_encoder` cuts boxes out of a frame the way Deep SORT does.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging
from PIL import Image
from tensorflow.core.framework import graph_pb2

from cosine_metric_learning import checkpoints, export
from cosine_metric_learning.errors import UsageError
from nets.deep_sort import network_definition


def _enable_memory_growth():
    """Let several encoders (and trackers) share one GPU."""
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # the GPU is already initialised
            pass


class Encoder:
    """Maps uint8 BGR patches ``(N, H, W, 3)`` to features ``(N, D)``.

    Attributes
    ----------
    image_shape : tuple
        ``(H, W, 3)`` the patches must have.
    feature_dim : int
    """

    def __init__(self, function, image_shape, feature_dim, batch_size=32):
        self._function = function
        self.image_shape = tuple(int(d) for d in image_shape)
        self.feature_dim = int(feature_dim)
        self.batch_size = batch_size

    def __call__(self, patches, batch_size=None):
        patches = np.asarray(patches, np.uint8)
        if patches.ndim != 4 or patches.shape[1:] != self.image_shape:
            raise ValueError(f"patches of shape {patches.shape}: expected "
                             f"(N,) + {self.image_shape}")
        if len(patches) == 0:
            return np.zeros((0, self.feature_dim), np.float32)
        size = batch_size or self.batch_size
        return np.concatenate([
            np.asarray(self._function(tf.constant(patches[i:i + size])))
            for i in range(0, len(patches), size)])


def load(path, batch_size=32, image_shape=network_definition.IMAGE_SHAPE):
    """Load an exported or trained encoder.

    Parameters
    ----------
    path : str
        A frozen graph ``.pb`` file (``images`` -> ``features``), a
        SavedModel folder, a checkpoint prefix or a folder of checkpoints
        (the latest is used).
    batch_size : int
    image_shape : tuple
        For checkpoints: the input shape the network was trained with
        (exported models carry theirs).

    Returns
    -------
    Encoder
    """
    _enable_memory_growth()
    if os.path.isfile(path) and path.endswith(".pb"):
        return _load_frozen_graph(path, batch_size)
    if os.path.isdir(path) and tf.saved_model.contains_saved_model(path):
        return _load_saved_model(path, batch_size)
    encoder, _ = checkpoints.load_encoder(path, image_shape, flag="--model")
    return Encoder(export.inference_function(encoder, image_shape),
                   image_shape, encoder.output_shape[-1], batch_size)


def _load_frozen_graph(path, batch_size):
    graph_def = graph_pb2.GraphDef()
    try:
        with open(path, "rb") as f:
            graph_def.ParseFromString(f.read())
    except Exception as e:  # a protobuf DecodeError
        raise UsageError(f"--model={path}: not a frozen TensorFlow graph "
                         f"({type(e).__name__})") from e
    names = {node.name: node for node in graph_def.node}
    if export.INPUT_NAME not in names or export.OUTPUT_NAME not in names:
        raise UsageError(f"--model={path}: expected a graph with an "
                         f"'{export.INPUT_NAME}' input and a "
                         f"'{export.OUTPUT_NAME}' output")
    shape = [d.size for d in
             names[export.INPUT_NAME].attr["shape"].shape.dim][1:]

    # Importing the graph inside a tf.function runs it without a Session.
    @tf.function(input_signature=[tf.TensorSpec([None] + shape, tf.uint8)])
    def run(images):
        features, = tf.graph_util.import_graph_def(
            graph_def, input_map={f"{export.INPUT_NAME}:0": images},
            return_elements=[f"{export.OUTPUT_NAME}:0"], name="net")
        return features

    feature_dim = run.get_concrete_function().structured_outputs.shape[-1]
    return Encoder(run, shape, feature_dim, batch_size)


def _load_saved_model(path, batch_size):
    model = tf.saved_model.load(path)
    serve = model.signatures["serving_default"]
    spec = serve.structured_input_signature[1][export.SAVED_MODEL_INPUT]
    shape = spec.shape[1:]
    feature_dim = serve.structured_outputs[export.OUTPUT_NAME].shape[-1]

    def run(images):
        return serve(**{export.SAVED_MODEL_INPUT: images})[export.OUTPUT_NAME]

    run.keep_alive = model  # the signature needs its object
    return Encoder(run, shape, feature_dim, batch_size)


def extract_patch(image, box, patch_shape):
    """Cut a box out of a frame as Deep SORT does.

    The box ``(x, y, w, h)`` is widened (or narrowed) about its centre to the
    patch's aspect ratio, clipped at the image border and resized.

    Returns
    -------
    ndarray or None
        The uint8 patch ``patch_shape``, or None if nothing of the box lies
        inside the image.
    """
    height, width = patch_shape[:2]
    x, y, w, h = (float(v) for v in box)
    new_w = width / float(height) * h
    x -= (new_w - w) / 2.0
    x1, y1 = int(x), int(y)
    x2, y2 = int(x + new_w), int(y + h)
    x1, y1 = max(x1, 0), max(y1, 0)
    x2 = min(x2, image.shape[1] - 1)
    y2 = min(y2, image.shape[0] - 1)
    if x1 >= x2 or y1 >= y2:
        return None
    patch = Image.fromarray(np.ascontiguousarray(image[y1:y2, x1:x2]))
    return np.asarray(patch.resize((width, height), Image.Resampling.BILINEAR))


def create_box_encoder(model, batch_size=32):
    """A function ``encode(frame_bgr, boxes) -> (N, D)`` features.

    Parameters
    ----------
    model : str or Encoder
        What :func:`load` accepts, or a loaded encoder.
    batch_size : int
        Patches per forward pass (Deep SORT uses 32).

    A box that lies entirely outside the frame is encoded as a mid-grey
    patch, with a warning: the row is defined and finite.
    """
    encoder = model if isinstance(model, Encoder) else load(model, batch_size)
    shape = encoder.image_shape

    def encode(image, boxes):
        image = np.asarray(image)
        patches = []
        for box in np.asarray(boxes, np.float64).reshape(-1, 4):
            patch = extract_patch(image, box, shape)
            if patch is None:
                logging.warning("Box %s lies outside the %dx%d image: "
                                "encoding a grey patch for it",
                                tuple(box.tolist()), image.shape[1],
                                image.shape[0])
                patch = np.full(shape, 128, np.uint8)
            patches.append(patch)
        if not patches:
            return np.zeros((0, encoder.feature_dim), np.float32)
        return encoder(np.stack(patches), batch_size)

    return encode
