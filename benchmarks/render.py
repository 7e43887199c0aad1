"""Peak memory and time of drawing tracks on a video (``track --render``)
against the number of frames: each length in a process of its own, side
by side in one run.

    python benchmarks/render.py --sequence=SEQUENCE_FOLDER --frames=100,400

The sequence's detections are tracked with Deep SORT as a motion tracker
(every box the same feature) and drawn with their moments against its
ground truth (where it has one); the frames are decoded one at a time, so
the peak should not grow with their number.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def one(sequence_folder, frames, output):
    """Draw the first ``frames`` frames; print time and peak memory."""
    import dataclasses

    from cosine_metric_learning import appearance, mot_sequences, render
    from cosine_metric_learning import tracking
    sequence = mot_sequences.read_sequence(sequence_folder)
    frames = min(frames, sequence.num_frames)
    sequence = dataclasses.replace(sequence, num_frames=frames,
                                   frame_paths=sequence.frame_paths[:frames])
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0, None)
    rows = rows[rows[:, 0] <= frames]
    tracked = tracking.track(rows, appearance.neutral_features(len(rows)),
                             frames, tracking.DEFAULTS)
    truth = sequence.ground_truth
    if truth is not None:
        truth = truth[mot_sequences.considered(truth) & (truth[:, 0]
                                                         <= frames)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    render.render(sequence, tracked, output + render.codec()[1], truth)
    seconds = time.perf_counter() - start
    print(json.dumps({"frames": frames, "seconds": seconds,
                      "peak_mb": resource.getrusage(
                          resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "before_mb": before / 1024}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequence", required=True,
                        help="a MOTChallenge sequence folder")
    parser.add_argument("--frames", default="100,400",
                        help="comma-separated lengths to draw")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one(args.sequence, args.one, args.output)
        return 0
    lengths = [int(n) for n in args.frames.split(",")]
    if any(n < 1 for n in lengths):
        parser.error(f"--frames={args.frames}: expected lengths of 1 or "
                     "more")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in lengths:
            out = subprocess.run(
                [sys.executable, __file__, f"--sequence={args.sequence}",
                 f"--one={n}", f"--output={os.path.join(tmp, str(n))}"],
                capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = rows[0]
    print(f"{'frames':>7s} {'s':>7s} {'frames/s':>9s} {'peak MB':>8s} "
          f"{'x peak of the first':>20s}")
    for row in rows:
        print(f"{row['frames']:7d} {row['seconds']:7.1f} "
              f"{row['frames'] / row['seconds']:9.1f} {row['peak_mb']:8.0f} "
              f"{row['peak_mb'] / first['peak_mb']:20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
