"""Feature extraction with a trained encoder, as a tracker uses it.

:func:`load` opens a frozen Deep SORT graph (``.pb``), a SavedModel folder,
an ONNX file, an OpenVINO IR or a checkpoint (prefix or training run
folder) and returns an :class:`Encoder` that maps uint8 BGR patches to
features on the runtime chosen (``backends.py``).
:func:`create_box_encoder` cuts boxes out of a frame the way Deep SORT does.
"""

import numpy as np
import tensorflow as tf
from absl import logging

from cosine_metric_learning import backends, preprocessing
from cosine_metric_learning.errors import UsageError


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
    would all turn black in a cast. Every backend takes the same patches
    and gives the same features.

    Attributes
    ----------
    image_shape : tuple
        ``(H, W, 3)`` the patches must have.
    feature_dim : int
    backend : str
        The runtime: ``"tensorflow"``, ``"onnxruntime"`` or ``"openvino"``.
    source : str
        The file it was loaded from (for a run folder: the checkpoint).
    """

    def __init__(self, backend, batch_size=32):
        self._backend = backend
        self.image_shape = tuple(int(d) for d in backend.image_shape)
        self.feature_dim = int(backend.feature_dim)
        self.backend = backend.name
        self.source = backend.source
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
            np.asarray(self._backend.run(
                np.ascontiguousarray(patches[i:i + size])))
            for i in range(0, len(patches), size)])

    def predict(self, crops):
        """Features of BGR crops of any size, as a list of vectors.

        Each crop (uint8 ``(h, w, 3)``) is resized to the input size as
        every image is (:func:`preprocessing.resize`), the boxes
        :func:`create_box_encoder` cuts too. This is the
        embedder interface of ``deep_sort_realtime``: pass the result as
        ``DeepSort(embedder=None).update_tracks(detections, embeds=...)``.
        """
        height, width = self.image_shape[:2]
        patches = []
        for index, crop in enumerate(crops):
            crop = np.asarray(crop)
            if crop.dtype != np.uint8 or crop.ndim != 3 or \
                    crop.shape[2] != 3 or min(crop.shape[:2]) < 1:
                raise UsageError(f"crop {index} of dtype {crop.dtype} and "
                                 f"shape {crop.shape}: expected uint8 BGR "
                                 "(h, w, 3) with h, w >= 1")
            patches.append(_resize(crop, self.image_shape))
        if not patches:
            return []
        return list(self(np.stack(patches)))


def load(path, batch_size=32, image_shape=None, backend="auto",
         openvino_config=None):
    """Load an exported or trained encoder on one of the runtimes.

    Parameters
    ----------
    path : str
        A frozen graph ``.pb`` file (``images`` -> ``features``), a
        SavedModel folder, an ONNX ``.onnx`` file, an OpenVINO ``.xml``
        file, a checkpoint prefix or a folder of checkpoints (the latest is
        used).
    batch_size : int
    image_shape : tuple, optional
        ``(H, W, 3)``. Every model knows its input shape: an exported one
        carries it, a checkpoint's run records it (``run.json``); given,
        it must agree with that (ArgumentError otherwise). For a
        checkpoint without ``run.json``: the shape it was trained at
        (default 128x64).
    backend : str
        ``"auto"`` (TensorFlow for TensorFlow formats, ONNX Runtime for
        ``.onnx``, OpenVINO for ``.xml``), ``"fastest"`` (the fastest
        installed runtime that runs the format:
        :data:`backends.FASTEST_ORDER`, OpenVINO at its own precision),
        ``"tensorflow"``, ``"onnxruntime"``, ``"openvino"`` (for
        ``.onnx`` and ``.xml``) or ``"litert"`` (``.tflite``).
    openvino_config : dict, optional
        OpenVINO compile properties (default: float32 inference, see
        :data:`backends.OPENVINO_FLOAT32`; with ``"fastest"``
        :data:`backends.OPENVINO_FASTEST`), e.g. ``{"PERFORMANCE_HINT":
        "THROUGHPUT"}``.

    Returns
    -------
    Encoder
    """
    _enable_memory_growth()
    return Encoder(backends.load(path, backend, image_shape, openvino_config),
                   batch_size)


def _resize(image, patch_shape):
    return preprocessing.resize(np.ascontiguousarray(image),
                                patch_shape).numpy()


def patch_region(frame_shape, box, patch_shape):
    """``(x1, y1, x2, y2)`` of the pixels the box encoder cuts for a box
    ``(x, y, width, height)``: its width set to the patch's aspect ratio
    about its centre and clipped to the frame, as Deep SORT does; or a
    text saying why it covers none."""
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


def cut_patches(image, regions, patch_shape):
    """The ``regions`` ``(N, 4)`` (whole-pixel ``x1, y1, x2, y2`` inside
    ``image``) cut and resized to ``patch_shape`` at once: uint8 ``(N, H,
    W, 3)``, each as :func:`preprocessing.resize` resizes a cut (bilinear,
    half-pixel centres, the cut's edge pixels repeated, no antialiasing),
    with no Python work per box."""
    regions = np.asarray(regions, np.int64).reshape(-1, 4)
    height, width = patch_shape[:2]

    def axis(size_out, start, stop):
        size_in = (stop - start).astype(np.float32)[:, None]
        source = (np.arange(size_out, dtype=np.float32)[None] + 0.5) * (
            size_in / size_out) - 0.5
        source = np.clip(source, 0.0, size_in - 1.0)
        low = np.floor(source)
        weight = source - low
        low = low.astype(np.int64)
        high = np.minimum(low + 1, (stop - start - 1)[:, None])
        return start[:, None] + low, start[:, None] + high, weight

    y0, y1, wy = axis(height, regions[:, 1], regions[:, 3])
    x0, x1, wx = axis(width, regions[:, 0], regions[:, 2])
    # the pixels gathered as rows of a (pixels, channels) array, which
    # np.take does several times faster than indexing by rows and columns;
    # the arithmetic on (patch rows, columns x channels), whose long inner
    # axis numpy runs fastest
    channels = image.shape[2]
    pixels = np.ascontiguousarray(image).reshape(-1, channels)
    rows0 = (y0 * image.shape[1])[:, :, None]
    rows1 = (y1 * image.shape[1])[:, :, None]
    cols0, cols1 = x0[:, None, :], x1[:, None, :]

    def gather(rows, cols):
        return np.take(pixels, rows + cols, axis=0).reshape(
            len(regions), height, width * channels).astype(np.float32)

    top, top_right = gather(rows0, cols0), gather(rows0, cols1)
    bottom, bottom_right = gather(rows1, cols0), gather(rows1, cols1)
    wx = np.repeat(wx, channels, axis=1)[:, None, :]
    wy = wy[:, :, None]
    top_right -= top
    top_right *= wx
    top += top_right
    bottom_right -= bottom
    bottom_right *= wx
    bottom += bottom_right
    bottom -= top
    bottom *= wy
    top += bottom
    np.clip(top, 0, 255, out=top)
    return np.round(top, out=top).astype(np.uint8).reshape(
        len(regions), height, width, channels)


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


def box_patches(image, boxes, patch_shape):
    """The patches the box encoder feeds the network: ``image`` (checked:
    uint8 BGR ``(H, W, 3)``) cut at ``boxes`` (checked: ``(N, 4)`` rows of
    ``(x, y, width, height)``), each widened to the patch's aspect ratio
    and clipped to the frame as Deep SORT does, resized at once
    (:func:`cut_patches`); a box that covers no pixel gives a mid-grey
    patch, with a warning saying why."""
    image = check_frame(image)
    boxes = check_boxes(boxes)
    patches = np.full((len(boxes),) + tuple(patch_shape), 128, np.uint8)
    regions = []
    for index, box in enumerate(boxes):
        region = patch_region(image.shape, box, patch_shape)
        if isinstance(region, str):
            logging.warning("Box %d %s %s: encoding a grey patch for it",
                            index, tuple(box.tolist()), region)
        else:
            regions.append((index, region))
    if regions:
        index, cut = zip(*regions)
        patches[list(index)] = cut_patches(image, cut, patch_shape)
    return patches


def create_box_encoder(model, batch_size=32, backend="auto"):
    """A function ``encode(frame_bgr, boxes) -> (N, D)`` features.

    Parameters
    ----------
    model : str or Encoder
        What :func:`load` accepts, or a loaded encoder.
    batch_size : int
        Patches per forward pass (Deep SORT uses 32).
    backend : str
        The runtime for a model path (see :func:`load`).

    ``frame_bgr`` must be uint8 ``(H, W, 3)`` and ``boxes`` ``(N, 4)`` rows
    of finite ``(x, y, width, height)``; anything else is refused with a
    UsageError saying what is wrong. A box that covers no pixel of the
    frame (outside it, no area, less than a pixel) is encoded as a
    mid-grey patch, with a warning saying why: the row is defined and
    finite.
    """
    encoder = model if isinstance(model, Encoder) else load(
        model, batch_size, backend=backend)
    shape = encoder.image_shape

    def encode(image, boxes):
        patches = box_patches(image, boxes, shape)
        if not len(patches):
            return np.zeros((0, encoder.feature_dim), np.float32)
        return encoder(patches, batch_size)

    return encode
