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
from cosine_metric_learning.nets.deep_sort import network_definition


def _enable_memory_growth():
    """Let several encoders (and trackers) share one GPU."""
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # the GPU is already initialised
            pass


class Encoder:
    """Maps uint8 BGR patches ``(N, H, W, 3)`` to features ``(N, D)``.

    Patches must be uint8 (values 0..255, BGR as OpenCV reads them); other
    dtypes are refused rather than guessed at: float patches in [0, 1]
    would all turn black in a cast.

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
        patches = np.asarray(patches)
        if patches.dtype != np.uint8:
            raise UsageError(
                f"patches of dtype {patches.dtype}: expected uint8 BGR "
                "values 0..255 (for floats in [0, 1]: "
                "(patches * 255).round().astype(np.uint8))")
        if patches.ndim != 4 or patches.shape[1:] != self.image_shape:
            raise UsageError(f"patches of shape {patches.shape}: expected "
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
    region = _patch_region(image.shape, box, patch_shape)
    return None if isinstance(region, str) else _cut(image, region,
                                                      patch_shape)


def _cut(image, region, patch_shape):
    x1, y1, x2, y2 = region
    height, width = patch_shape[:2]
    patch = Image.fromarray(np.ascontiguousarray(image[y1:y2, x1:x2]))
    return np.asarray(patch.resize((width, height), Image.Resampling.BILINEAR))


def _patch_region(frame_shape, box, patch_shape):
    """``(x1, y1, x2, y2)`` of the pixels a box covers, or a text saying why
    it covers none."""
    height, width = patch_shape[:2]
    x, y, w, h = (float(v) for v in box)
    if w <= 0 or h <= 0:
        return f"has no area (width {w:g}, height {h:g})"
    new_w = width / float(height) * h
    x -= (new_w - w) / 2.0
    x1, y1 = int(x), int(y)
    x2, y2 = int(x + new_w), int(y + h)
    if x2 <= 0 or y2 <= 0 or x1 >= frame_shape[1] - 1 or \
            y1 >= frame_shape[0] - 1:
        return f"lies outside the {frame_shape[1]}x{frame_shape[0]} image"
    x1, y1 = max(x1, 0), max(y1, 0)
    x2 = min(x2, frame_shape[1] - 1)
    y2 = min(y2, frame_shape[0] - 1)
    if x1 >= x2 or y1 >= y2:
        return (f"covers less than a pixel (widened to {new_w:.2g} x "
                f"{h:.2g} for the {width}:{height} patch)")
    return x1, y1, x2, y2


def check_frame(image):
    """The frame as an array; UsageError unless uint8 BGR ``(H, W, 3)``."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise UsageError(f"frame of dtype {image.dtype}: expected uint8 BGR "
                         "(H, W, 3) as OpenCV reads it")
    if image.ndim != 3 or image.shape[2] != 3:
        hint = ""
        if image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 1):
            hint = " (grayscale: cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR))"
        elif image.ndim == 3 and image.shape[2] == 4:
            hint = " (BGRA: drop alpha with frame[..., :3])"
        raise UsageError(f"frame of shape {image.shape}: expected "
                         f"(H, W, 3) BGR{hint}")
    if image.shape[0] < 2 or image.shape[1] < 2:
        raise UsageError(f"frame of shape {image.shape}: expected at least "
                         "2x2 pixels")
    return image


def check_boxes(boxes):
    """Boxes as float64 ``(N, 4)``; UsageError naming what is wrong."""
    boxes = np.asarray(boxes)
    if boxes.size == 0:
        return np.zeros((0, 4))
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise UsageError(f"boxes of shape {boxes.shape}: expected (N, 4) "
                         "rows of (x, y, width, height); pass boxes[:, :4] "
                         "if they carry a confidence column")
    try:
        boxes = boxes.astype(np.float64)
    except (TypeError, ValueError) as e:
        raise UsageError(f"boxes of dtype {boxes.dtype}: expected numbers "
                         "(x, y, width, height)") from e
    bad = np.flatnonzero(~np.all(np.isfinite(boxes), axis=1))
    if len(bad):
        raise UsageError(f"box {bad[0]} {tuple(boxes[bad[0]].tolist())} "
                         "has a coordinate that is not finite; expected "
                         "finite (x, y, width, height)")
    return boxes


def create_box_encoder(model, batch_size=32):
    """A function ``encode(frame_bgr, boxes) -> (N, D)`` features.

    Parameters
    ----------
    model : str or Encoder
        What :func:`load` accepts, or a loaded encoder.
    batch_size : int
        Patches per forward pass (Deep SORT uses 32).

    ``frame_bgr`` must be uint8 ``(H, W, 3)`` and ``boxes`` ``(N, 4)`` rows
    of finite ``(x, y, width, height)``; anything else is refused with a
    UsageError saying what is wrong. A box that covers no pixel of the
    frame (outside it, no area, less than a pixel) is encoded as a
    mid-grey patch, with a warning saying why: the row is defined and
    finite.
    """
    encoder = model if isinstance(model, Encoder) else load(model, batch_size)
    shape = encoder.image_shape

    def encode(image, boxes):
        image = check_frame(image)
        patches = []
        for index, box in enumerate(check_boxes(boxes)):
            region = _patch_region(image.shape, box, shape)
            if isinstance(region, str):
                logging.warning("Box %d %s %s: encoding a grey patch for it",
                                index, tuple(box.tolist()), region)
                patches.append(np.full(shape, 128, np.uint8))
            else:
                patches.append(_cut(image, region, shape))
        if not patches:
            return np.zeros((0, encoder.feature_dim), np.float32)
        return encoder(np.stack(patches), batch_size)

    return encode
