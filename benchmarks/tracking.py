"""Frames per second of the tracking evaluation on 1080p frames, and the
share of the time spent encoding.

A sequence of 1920x1080 frames with 20 detections each is written to a
temporary folder; the detections' features are encoded one batch a frame
(read, cut and encoded as ``cosine_metric_learning.track`` does) and Deep
SORT (deep-sort-realtime) tracks them; both are timed::

    python benchmarks/tracking.py [--model=MODEL] [--frames=40]

Without ``--model`` the encoder is a fresh network with Glorot-spread
weights, saved as a checkpoint (the speed does not depend on the
weights).
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# the checkout's root: the tests' weight spreader
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

import numpy as np
import tensorflow as tf
from PIL import Image

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import mot
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.reference import spread_kernels

WIDTH, HEIGHT, DETECTIONS = 1920, 1080, 20


def write_sequence(folder, frames, seed=0):
    """Frames of noise and blocks, and ``DETECTIONS`` boxes a frame."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "img1"))
    os.makedirs(os.path.join(folder, "det"))
    rows = []
    for frame in range(1, frames + 1):
        image = rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8, 3),
                             dtype=np.uint8)
        Image.fromarray(image).resize((WIDTH, HEIGHT)).save(
            os.path.join(folder, "img1", f"{frame:06d}.jpg"), quality=90)
        for _ in range(DETECTIONS):
            h = rng.uniform(80, 300)
            rows.append((frame, -1, rng.uniform(0, WIDTH - h / 2),
                         rng.uniform(0, HEIGHT - h), h / 2, h, 0.9))
    np.savetxt(os.path.join(folder, "det", "det.txt"), np.array(rows),
               delimiter=",", fmt="%.2f")
    with open(os.path.join(folder, "seqinfo.ini"), "w") as f:
        f.write(f"[Sequence]\nname=BENCH\nimDir=img1\nframeRate=30\n"
                f"seqLength={frames}\nimWidth={WIDTH}\nimHeight={HEIGHT}\n"
                "imExt=.jpg\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--frames", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            encoder = spread_kernels(network_definition.create_encoder(), 0)
            model = tf.train.Checkpoint(encoder=encoder).write(
                os.path.join(tmp, "encoder"))
        folder = os.path.join(tmp, "BENCH")
        write_sequence(folder, args.frames)
        sequence = mot.read_sequence(folder)
        loaded = encoder_lib.load(model)
        rows = sequence.detections
        # warm-up: the first frame traces the encoder
        mot.encode_rows(loaded, sequence, rows[rows[:, 0] == 1])
        start = time.perf_counter()
        features = mot.encode_rows(loaded, sequence, rows,
                                     progress_secs=1e9)
        encoding = time.perf_counter() - start
        start = time.perf_counter()
        mot.run_tracker(rows, features, sequence.num_frames,
                          **{k: mot.DEFAULTS[k]
                             for k in mot.TRACKER_PARAMETERS})
        tracking = time.perf_counter() - start
    total = encoding + tracking
    print(f"\n{os.cpu_count()} CPU cores, {args.frames} frames of "
          f"{WIDTH}x{HEIGHT}, {DETECTIONS} detections each, model "
          f"{args.model or 'a fresh checkpoint'} on {loaded.backend}")
    print(f"encoding (read, cut, encode)  {encoding:7.2f} s  "
          f"{args.frames / encoding:6.1f} frames/s")
    print(f"tracking (deep-sort-realtime) {tracking:7.2f} s  "
          f"{args.frames / tracking:6.1f} frames/s")
    print(f"both                          {total:7.2f} s  "
          f"{args.frames / total:6.1f} frames/s; encoding "
          f"{100 * encoding / total:.0f} % of the time")


if __name__ == "__main__":
    main()
