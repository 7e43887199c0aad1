"""What ``check_boxmot.py`` loads in BoxMOT's own virtualenv: every
``--export_layout=boxmot`` file (ONNX, OpenVINO, TFLite; float32 and
int8), a frame with its boxes, and the features the frozen graph gives
the boxes' crops, fed as Deep SORT feeds it (BGR uint8 NHWC).

The boxes are exactly the network's size (64x128) at whole pixels, so
BoxMOT's resize leaves the crops as they are and both sides encode the
same pixels. Runs in this project's environment (``make
test-consumers``)::

    python -m tests.consumers.export_for_boxmot --output_dir=DIR \
        [--restore_path=RUN]
"""

import argparse
import json
import os
import sys

import numpy as np
from PIL import Image

from cosine_metric_learning import checkpoints, deploy, export
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning.datasets import synthetic_people
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.reference import spread_kernels

FRAME = (1080, 1920)  # (height, width)
BOXES = 20
# the least cosine to the frozen graph's features BoxMOT's must reach
BOUNDS = {"float32": 0.9999, "int8": 0.99}


def scene(seed=0):
    """A BGR frame with ``BOXES`` people, each exactly 64x128 at whole
    pixels, their ``xyxy`` boxes, and more crops to calibrate int8 on."""
    rng = np.random.default_rng(seed)
    cameras = synthetic_people.cameras(seed)
    frame = np.full(FRAME + (3,), 90, np.uint8)
    boxes = []
    for k in range(BOXES):
        left = 40 + (k % 10) * 180 + int(rng.integers(0, 40))
        top = 100 + (k // 10) * 500 + int(rng.integers(0, 200))
        person = synthetic_people.render(synthetic_people.identity(rng),
                                         cameras[k % 6], rng)
        frame[top:top + 128, left:left + 64] = person[..., ::-1]
        boxes.append((left, top, left + 64, top + 128))
    calibration = np.stack([
        synthetic_people.render(synthetic_people.identity(rng),
                                cameras[k % 6], rng)[..., ::-1]
        for k in range(100)])
    return frame, np.asarray(boxes, np.float32), calibration


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--restore_path", default=None, help="a run or "
                        "checkpoint (default: the network with spread "
                        "random weights)")
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    if args.restore_path:
        encoder, _ = checkpoints.load_encoder(args.restore_path)
    else:
        encoder = spread_kernels(network_definition.create_encoder(), seed=3)
    shape = tuple(encoder.input_shape[1:])
    frame, boxes, calibration = scene()
    crops = np.stack([frame[int(y0):int(y1), int(x0):int(x1)]
                      for x0, y0, x1, y1 in boxes])
    frozen = export.freeze(encoder, os.path.join(args.output_dir,
                                                 "frozen.pb"), shape)
    expected = encoder_lib.load(frozen)(crops)
    Image.fromarray(frame[..., ::-1]).save(
        os.path.join(args.output_dir, "frame.png"))
    np.save(os.path.join(args.output_dir, "boxes.npy"), boxes)
    np.save(os.path.join(args.output_dir, "expected.npy"), expected)
    artifacts = []
    for precision in ("float32", "int8"):
        for writer, extension in ((deploy.write_onnx, "onnx"),
                                  (deploy.write_openvino, "xml"),
                                  (deploy.write_tflite, "tflite")):
            suffix = "_int8" if precision == "int8" else ""
            path = os.path.join(args.output_dir,
                                f"people_boxmot{suffix}.{extension}")
            writer(encoder, path, shape, layout=export.BOXMOT,
                   calibration=calibration if precision == "int8" else None)
            artifacts.append({"path": os.path.abspath(path),
                              "precision": precision,
                              "min_cosine": BOUNDS[precision]})
            print(f"wrote {path}", flush=True)
    with open(os.path.join(args.output_dir, "manifest.json"), "w") as f:
        json.dump({"frame": "frame.png", "boxes": "boxes.npy",
                   "expected": "expected.npy", "artifacts": artifacts}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
