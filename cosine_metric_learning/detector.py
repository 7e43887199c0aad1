"""A pedestrian detector run on a video's frames: the boxes a sequence's
``det/det.txt`` holds when a user has a video and no detections.

The detector is an OpenVINO IR of an SSD-style network with Open Model
Zoo's layout (``pedestrian-detection-adas-0002``, Apache-2.0, from
Intel's Open Model Zoo: ``omz_downloader --name
pedestrian-detection-adas-0002``): one float input of BGR frames
``(1, 3, H, W)``, 0-255, the frame resized to it, and one output
``(1, 1, N, 7)`` of ``image id, label, confidence, x0, y0, x1, y1``, the
corners as shares of the image, the list ending at an image id of -1.
The runtime is OpenVINO (the ``deploy`` extra).
"""

import numpy as np

from cosine_metric_learning import extras
from cosine_metric_learning.errors import ArgumentError

# the detector's boxes kept: Deep SORT's application keeps 0.3 and above
DEFAULT_MIN_CONFIDENCE = 0.3
LAYOUT = ("an SSD detector in Open Model Zoo's layout (one float (1, 3, H, "
          "W) input of BGR frames, one (1, 1, N, 7) output of image id, "
          "label, confidence and corners as shares of the image)")


class Detector:
    """``detector(frame)``: the boxes of a uint8 BGR frame ``(H, W, 3)``
    as rows ``(left, top, width, height, confidence)`` in pixels, clipped
    to the frame, of confidence ``min_confidence`` and above."""

    def __init__(self, path, min_confidence=DEFAULT_MIN_CONFIDENCE,
                 argument="path"):
        if not 0.0 <= min_confidence <= 1.0:
            raise ArgumentError("min_confidence", min_confidence,
                                "expected a confidence from 0 to 1 (the "
                                "detector's scores are)")
        ov = extras.require("openvino", f"the detector {path}")
        core = ov.Core()
        try:
            model = core.read_model(path)
        except RuntimeError as e:
            raise ArgumentError(argument, path, "OpenVINO cannot load it ("
                                f"{str(e).strip().splitlines()[-1]}); an IR "
                                "is the .xml and its .bin, side by side") \
                from e
        self.input_size = _check_layout(model, path, argument)
        self.compiled = core.compile_model(model, "CPU")
        self.request = self.compiled.create_infer_request()
        self.min_confidence = float(min_confidence)
        self.path = path

    def __call__(self, frame):
        import cv2
        height, width = frame.shape[:2]
        size_h, size_w = self.input_size
        image = cv2.resize(frame, (size_w, size_h)).transpose(2, 0, 1)
        found = self.request.infer(
            {0: image[None].astype(np.float32)})[self.compiled.output(0)]
        return boxes_of(found.reshape(-1, 7), width, height,
                        self.min_confidence)


def _check_layout(model, path, argument="path"):
    """``(H, W)`` of the detector's input; ArgumentError (naming
    ``argument``) for another layout."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise ArgumentError(argument, path, f"expected {LAYOUT}; it has "
                            f"{len(model.inputs)} inputs and "
                            f"{len(model.outputs)} outputs")
    shape = model.input(0).get_partial_shape()
    out = model.output(0).get_partial_shape()
    if shape.rank.get_length() != 4 or not all(
            d.is_static for d in shape) or shape[1].get_length() != 3 or \
            out.rank.get_length() != 4 or not out[3].is_static or \
            out[3].get_length() != 7:
        raise ArgumentError(argument, path, f"expected {LAYOUT}; its input "
                            f"is {shape} and its output {out}")
    return shape[2].get_length(), shape[3].get_length()


def boxes_of(found, width, height, min_confidence):
    """The rows ``(left, top, width, height, confidence)`` of an SSD
    output ``(N, 7)`` for a ``width`` x ``height`` frame: up to the first
    image id of -1, confidence ``min_confidence`` and above, corners
    clipped to the frame, boxes with an area."""
    end = np.flatnonzero(found[:, 0] < 0)
    found = found[:end[0]] if len(end) else found
    found = found[found[:, 2] >= min_confidence]
    x0 = np.clip(found[:, 3] * width, 0, width)
    y0 = np.clip(found[:, 4] * height, 0, height)
    x1 = np.clip(found[:, 5] * width, 0, width)
    y1 = np.clip(found[:, 6] * height, 0, height)
    rows = np.column_stack([x0, y0, x1 - x0, y1 - y0, found[:, 2]])
    return rows[(rows[:, 2] > 0) & (rows[:, 3] > 0)]
