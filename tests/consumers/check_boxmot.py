"""Load every ``--export_layout=boxmot`` file of ``export_for_boxmot.py``
in BoxMOT itself: its re-identification path
(``boxmot.reid.core.ReID(...).model.get_features``) on the frame's boxes,
compared with the frozen graph's features of the same crops, and a
tracker's ``update`` on the frame. Runs in BoxMOT's own virtualenv
(``make test-consumers``), with NumPy and Pillow only from here::

    python tests/consumers/check_boxmot.py DIR

Prints a line per file and exits 1 if one fails.
"""

import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np
from PIL import Image


def cosines(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


def check(artifact, frame, boxes, expected):
    """``(least cosine, tracks of the update)`` of one file in BoxMOT."""
    from boxmot import BotSort
    from boxmot.reid.core import ReID
    reid = ReID(weights=Path(artifact["path"]), device="cpu", half=False)
    features = np.asarray(reid.model.get_features(boxes, frame))
    if features.shape != expected.shape:
        raise AssertionError(f"features {features.shape}, expected "
                             f"{expected.shape}")
    least = float(cosines(features, expected).min())
    tracker = BotSort(reid_weights=Path(artifact["path"]), device="cpu",
                      half=False)
    detections = np.concatenate(
        [boxes, np.full((len(boxes), 1), 0.9, np.float32),
         np.zeros((len(boxes), 1), np.float32)], axis=1)
    for _ in range(3):  # confirmed from the second frame on
        tracks = tracker.update(detections, frame)
    return least, len(tracks)


def main(argv):
    folder = argv[1]
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    frame = np.asarray(Image.open(os.path.join(
        folder, manifest["frame"])).convert("RGB"))[..., ::-1].copy()
    boxes = np.load(os.path.join(folder, manifest["boxes"]))
    expected = np.load(os.path.join(folder, manifest["expected"]))
    failed = 0
    for artifact in manifest["artifacts"]:
        name = os.path.basename(artifact["path"])
        try:
            least, tracks = check(artifact, frame, boxes, expected)
        except Exception:  # a failure of BoxMOT's loading is the finding
            failed += 1
            print(f"FAIL {name}: BoxMOT could not use it\n"
                  + traceback.format_exc(), flush=True)
            continue
        ok = least >= artifact["min_cosine"] and tracks == len(boxes)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:32s} least cosine to the "
              f"frozen graph {least:.6f} (bound {artifact['min_cosine']}), "
              f"{tracks} of {len(boxes)} boxes tracked", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
