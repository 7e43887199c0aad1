"""A sequence's frames: decoded one at a time from its video with
OpenCV, or read from its ``img1/`` images; and the geometry of boxes in
them."""

import io

import numpy as np
from PIL import Image

from cosine_metric_learning.errors import UsageError, first_line

INSTALL_HINT = ("pip install 'cosine-metric-learning[track]' (in a source "
                "checkout: pip install -e '.[track]')")


def frame_size(path):
    """``(height, width, 3)`` of a frame, read from its header."""
    try:
        with Image.open(path) as image:
            width, height = image.size
    except OSError as e:
        raise UsageError(f"cannot read frame '{path}': "
                         f"{first_line(e)}") from e
    return height, width, 3


def require_opencv(what="reading videos"):
    """OpenCV, or a UsageError saying how to install it."""
    try:
        import cv2
    except ImportError as e:
        raise UsageError(f"{what} needs OpenCV (opencv-python), which is "
                         f"not installed: {INSTALL_HINT}") from e
    return cv2


def open_video(path):
    """An OpenCV ``VideoCapture`` of the video file ``path``; UsageError
    where OpenCV's decoders cannot open it."""
    capture = require_opencv().VideoCapture(path)
    if not capture.isOpened():
        capture.release()
        raise UsageError(f"cannot open the video '{path}': OpenCV's "
                         "decoders do not read it (not a video, damaged, "
                         "or a codec this OpenCV lacks)")
    return capture


def video_frames(path, numbers, start=1):
    """``(number, frame)`` of each of the increasing frame ``numbers`` of
    the video ``path``, frame ``n`` being video frame ``n + start - 1``
    (from 1): decoded in order, one at a time, the frames between them
    decoded and dropped; a frame past the video's end, or one that does
    not decode, is a UsageError naming it."""
    capture = open_video(path)
    try:
        position = 1  # the video frame the next read gives
        for number in numbers:
            wanted = number + start - 1
            ok = True
            while ok and position < wanted:
                ok = capture.grab()
                position += 1
            if ok:
                ok, frame = capture.read()
                position += 1
            if not ok:
                raise UsageError(
                    f"cannot decode frame {wanted} of the video '{path}' "
                    f"(the sequence's frame {number}): the video ends "
                    "before it, or is damaged there")
            yield number, frame
    finally:
        capture.release()


def _decode_jpeg(data):
    """A complete JPEG's bytes decoded to BGR with OpenCV (installed with
    the tracker), about three times faster than through PIL here; None
    when OpenCV is missing, the bytes are not a JPEG that ends, or it
    fails: :func:`read_frame` then reads them with PIL. Both decode with
    libjpeg-turbo, and neither turns the frame by its EXIF orientation."""
    if data[:2] != b"\xff\xd8" or data[-2:] != b"\xff\xd9":
        return None
    try:
        import cv2
    except ImportError:
        return None
    return cv2.imdecode(np.frombuffer(data, np.uint8),
                        cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)


def read_frame(path):
    """A frame as a uint8 BGR array (as Deep SORT's box encoder takes
    it), at its own size; a frame that cannot be read or is truncated is
    a UsageError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        frame = _decode_jpeg(data)
        if frame is not None:
            return frame
        with Image.open(io.BytesIO(data)) as image:
            frame = np.asarray(image.convert("RGB"))
    except OSError as e:
        raise UsageError(f"cannot read frame '{path}': {first_line(e)}; "
                         "replace it, or remove its rows from det.txt and "
                         "gt.txt") from e
    return np.ascontiguousarray(frame[..., ::-1])


def box_intersections(a, b):
    """The intersection area of every ``(left, top, width, height)`` of
    ``a`` (N, 4) with every one of ``b`` (M, 4): (N, M)."""
    a, b = np.asarray(a, float)[:, None, :], np.asarray(b, float)[None]
    width = (np.minimum(a[..., 0] + a[..., 2], b[..., 0] + b[..., 2])
             - np.maximum(a[..., 0], b[..., 0]))
    height = (np.minimum(a[..., 1] + a[..., 3], b[..., 1] + b[..., 3])
              - np.maximum(a[..., 1], b[..., 1]))
    return np.clip(width, 0, None) * np.clip(height, 0, None)


def box_overlaps(a, b):
    """Intersection over union of every box of ``a`` (N, 4) with every
    one of ``b`` (M, 4), as :func:`box_intersections` takes them: (N,
    M)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    inter = box_intersections(a, b)
    union = (a[:, 2] * a[:, 3])[:, None] + b[:, 2] * b[:, 3] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def non_max_suppression(boxes, scores, max_overlap):
    """Indices of the boxes ``(N, 4)`` as ``(left, top, width, height)``
    kept by greedy non-maximum suppression, highest score first, as Deep
    SORT's application does (``max_overlap`` 1.0 keeps all)."""
    if len(boxes) == 0 or max_overlap >= 1.0:
        return np.arange(len(boxes))
    x1, y1 = boxes[:, 0], boxes[:, 1]
    x2, y2 = x1 + boxes[:, 2], y1 + boxes[:, 3]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = list(np.argsort(scores))
    keep = []
    while order:
        i = order.pop()
        keep.append(i)
        rest = np.array(order, int)
        if not len(rest):
            break
        w = np.maximum(0, np.minimum(x2[i], x2[rest]) - np.maximum(
            x1[i], x1[rest]) + 1)
        h = np.maximum(0, np.minimum(y2[i], y2[rest]) - np.maximum(
            y1[i], y1[rest]) + 1)
        overlap = w * h / area[rest]
        order = [j for j, o in zip(order, overlap) if o <= max_overlap]
    return np.array(sorted(keep), int)
