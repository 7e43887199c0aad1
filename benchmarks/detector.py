"""Pedestrian detectors side by side on the same frames: frames per
second of each OpenVINO IR (e.g. the FP16 and FP16-INT8 builds of Open
Model Zoo's pedestrian-detection-adas-0002), timed in turns on one video
so that the machine's load falls on all of them alike, and how many boxes
each keeps.

    python benchmarks/detector.py --video=vtest.avi --frames=200 \
        --detector=FP16/pedestrian-detection-adas-0002.xml,FP16-INT8/pedestrian-detection-adas-0002.xml
"""

import argparse
import sys
import time

from cosine_metric_learning import detector as detector_lib
from cosine_metric_learning import frame_io


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--video", required=True)
    parser.add_argument("--detector", required=True,
                        help="comma-separated OpenVINO IRs")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--min_confidence", type=float,
                        default=detector_lib.DEFAULT_MIN_CONFIDENCE)
    parser.add_argument("--rounds", type=int, default=3,
                        help="turns of each detector over the frames")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.rounds < 1:
        print("error: --frames and --rounds: expected at least 1",
              file=sys.stderr)
        return 2
    paths = [p for p in args.detector.split(",") if p]
    detectors = [detector_lib.Detector(p, args.min_confidence)
                 for p in paths]
    frames = [frame for _, frame in frame_io.video_frames(
        args.video, range(1, args.frames + 1))]
    seconds = [0.0] * len(detectors)
    boxes = [0] * len(detectors)
    for _ in range(args.rounds):
        for i, detector in enumerate(detectors):
            start = time.perf_counter()
            found = [detector(frame) for frame in frames]
            seconds[i] += time.perf_counter() - start
            boxes[i] = sum(len(f) for f in found)
    first = len(frames) * args.rounds / seconds[0]
    print(f"{len(frames)} frames of {args.video}, {args.rounds} turns each")
    for path, total, count in zip(paths, seconds, boxes):
        rate = len(frames) * args.rounds / total
        print(f"{rate:8.1f} frames/s ({rate / first:.2f}x the first), "
              f"{count} boxes at {args.min_confidence:g}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
