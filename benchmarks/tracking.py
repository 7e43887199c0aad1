"""Frames per second of encoding a frame's boxes for the tracker, per
runtime, and where the time goes.

A sequence of 1920x1080 JPEG frames is written to a temporary folder,
each with ``DETECTIONS`` synthetic people at random sizes; their boxes are
the detections. Each configuration encodes every frame's boxes as
``cosine_metric_learning.track`` does (``tracking.encode_rows``: the next frame
decoded and cut while one is encoded, the boxes cut and resized at once,
one batch a frame), then the same frames are timed step by step: decoding,
cutting, the bare network on the same crops, and Deep SORT's tracking.
The int8 and float exports are made from the same weights, so the last
column is each path's least cosine to the checkpoint's features::

    python benchmarks/tracking.py [--model=RUN] [--frames=100]

Without ``--model`` the encoder is a fresh network with Glorot-spread
weights (the speed does not depend on the weights; the cosines do: give
a trained run for them).
"""

import argparse
import os
import statistics
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

from cosine_metric_learning import checkpoints, deploy
from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import frame_io, mot_sequences, tracking
from cosine_metric_learning.datasets import synthetic_people
from cosine_metric_learning.nets.deep_sort import network_definition
from tests.reference import spread_kernels

WIDTH, HEIGHT, DETECTIONS = 1920, 1080, 20


def write_sequence(folder, frames, seed=0):
    """Frames of noise and blocks with ``DETECTIONS`` people pasted at
    random sizes, and their boxes as ``det/det.txt``. Returns crops of
    people to calibrate int8 on."""
    rng = np.random.default_rng(seed)
    cameras = synthetic_people.cameras(seed)
    people = [synthetic_people.identity(rng) for _ in range(60)]
    os.makedirs(os.path.join(folder, "img1"))
    os.makedirs(os.path.join(folder, "det"))
    rows, calibration = [], []
    for frame in range(1, frames + 1):
        image = np.asarray(Image.fromarray(rng.integers(
            0, 256, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8)).resize(
                (WIDTH, HEIGHT))).copy()
        for k in range(DETECTIONS):
            h = int(rng.uniform(80, 300))
            w = h // 2
            x = int(rng.uniform(0, WIDTH - w))
            y = int(rng.uniform(0, HEIGHT - h))
            person = synthetic_people.render(
                people[(frame + k) % len(people)], cameras[k % 6], rng)
            image[y:y + h, x:x + w] = np.asarray(
                Image.fromarray(person).resize((w, h)))
            rows.append((frame, -1, x, y, w, h, 0.9))
            if len(calibration) < 200:
                calibration.append(person[..., ::-1])
        Image.fromarray(image).save(
            os.path.join(folder, "img1", f"{frame:06d}.jpg"), quality=90)
    np.savetxt(os.path.join(folder, "det", "det.txt"), np.array(rows),
               delimiter=",", fmt="%.2f")
    with open(os.path.join(folder, "seqinfo.ini"), "w") as f:
        f.write(f"[Sequence]\nname=BENCH\nimDir=img1\nframeRate=30\n"
                f"seqLength={frames}\nimWidth={WIDTH}\nimHeight={HEIGHT}\n"
                "imExt=.jpg\n")
    return np.stack(calibration)


def steps(loaded, sequence, rows):
    """Median seconds a frame of decoding, cutting and the bare network,
    each timed alone on the same frames."""
    shape = loaded.image_shape
    times = {"decode": [], "cut": [], "network": []}
    for frame in np.unique(rows[:, 0]).astype(int):
        start = time.perf_counter()
        image = frame_io.read_frame(sequence.frame_paths[frame - 1])
        times["decode"].append(time.perf_counter() - start)
        boxes = rows[rows[:, 0] == frame, 2:6]
        start = time.perf_counter()
        patches = encoder_lib.box_patches(image, boxes, shape)
        times["cut"].append(time.perf_counter() - start)
        start = time.perf_counter()
        loaded(patches)
        times["network"].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def cosines(a, b):
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1)
                                    * np.linalg.norm(b, axis=1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a run or checkpoint")
    parser.add_argument("--frames", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model is None:
            encoder = spread_kernels(network_definition.create_encoder(), 0)
            model = tf.train.Checkpoint(encoder=encoder).write(
                os.path.join(tmp, "encoder"))
        else:
            encoder, model = checkpoints.load_encoder(args.model)
        folder = os.path.join(tmp, "BENCH")
        calibration = write_sequence(folder, args.frames)
        shape = tuple(encoder.input_shape[1:])
        exports = {
            "OpenVINO int8": deploy.write_openvino(
                encoder, os.path.join(tmp, "m_int8.xml"), shape,
                calibration=calibration),
            "OpenVINO float": deploy.write_openvino(
                encoder, os.path.join(tmp, "m.xml"), shape),
            "ONNX int8": deploy.write_onnx(
                encoder, os.path.join(tmp, "m_int8.onnx"), shape,
                calibration=calibration)}
        configurations = [("checkpoint", model, "auto")] + [
            (name, path, backend) for name, path in exports.items()
            for backend in (("fastest", "onnxruntime")
                            if name == "ONNX int8" else ("fastest",))]
        sequence = mot_sequences.read_sequence(folder)
        rows = sequence.detections
        results, reference = [], None
        for name, path, backend in configurations:
            loaded = encoder_lib.load(path, backend=backend)
            # warm-up: the first frame traces or compiles the encoder
            tracking.encode_rows(loaded, sequence, rows[rows[:, 0] == 1])
            done = [time.perf_counter()]
            features = tracking.encode_rows(
                loaded, sequence, rows, progress_secs=1e9, frame_times=done)
            rate = args.frames / (done[-1] - done[0])
            whole = statistics.median(np.diff(done))
            reference = features if reference is None else reference
            results.append((f"{name} ({loaded.backend})", rate, whole,
                            steps(loaded, sequence, rows),
                            float(cosines(features, reference).min())))
        start = time.perf_counter()
        tracking.track(rows, reference, sequence.num_frames,
                       tracking.DEFAULTS)
        per_frame = (time.perf_counter() - start) / args.frames
    print(f"\n{os.cpu_count()} CPU cores, {args.frames} frames of "
          f"{WIDTH}x{HEIGHT} JPEG, {DETECTIONS} boxes each, model "
          f"{args.model or 'a fresh network'}; milliseconds a frame "
          "(whole: the median time between frames done, decoding and "
          "cutting the next\nwhile one is encoded; steps: medians, each "
          "alone; frames/s: all frames)")
    print(f"{'path (runtime)':34s} {'frames/s':>8s} {'whole':>7s} "
          f"{'decode':>7s} {'cut':>6s} {'network':>8s} {'whole/net':>9s} "
          f"{'x ckpt':>6s} {'cosine':>8s}")
    base = results[0][1]
    for name, rate, whole, split, cosine in results:
        print(f"{name:34s} {rate:8.1f} {1000 * whole:7.1f} "
              f"{1000 * split['decode']:7.1f} {1000 * split['cut']:6.1f} "
              f"{1000 * split['network']:8.1f} "
              f"{whole / split['network']:9.2f} {rate / base:6.2f} "
              f"{cosine:8.4f}")
    print(f"tracking (deep-sort-realtime): {1000 * per_frame:.1f} ms a frame")


if __name__ == "__main__":
    main()
