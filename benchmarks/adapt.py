"""Time and memory of adapting to unlabeled video, per 1,000 frames.

Writes a synthetic crossing sequence (640x360 frames), then measures
each step of ``python -m cosine_metric_learning.adapt`` on it, in
separate processes so each step's peak memory is its own: cutting the
tracklets (motion-only Deep SORT over the detections, crops written),
calibrating a model's gate on them (the detections encoded, the pairs'
distances), and fine-tuning (``--steps`` steps). Prints seconds and peak
resident memory, and the first two per 1,000 frames.

    python benchmarks/adapt.py --model=demo/output/cosine-softmax
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = """
import json, resource, sys, time
from cosine_metric_learning import appearance, mot_sequences, tracking
from cosine_metric_learning.datasets import tracklets
step, sequence_dir, model, out, steps = sys.argv[1:]
sequence = mot_sequences.read_sequence(sequence_dir)
start = time.time()
if step == "tracklets":
    tracklets.extract([sequence_dir], out)
elif step == "gate":
    rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
    appearance.calibrate(model, [sequence], {sequence.name: rows},
                         tracking.DEFAULTS, appearance.FeatureCache())
else:
    from cosine_metric_learning import adapt
    adapt.adapt(model, [sequence_dir], out, number_of_steps=int(steps),
                batch_size=32, export="none")
seconds = time.time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak,
                  "frames": sequence.num_frames,
                  "detections": len(sequence.detections)}))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    from cosine_metric_learning.datasets import synthetic_mot
    tmp = tempfile.mkdtemp(prefix="adapt_benchmark.")
    sequence = synthetic_mot.write_mot_sequence(tmp, num_pairs=5,
                                            num_frames=args.frames, seed=41)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH",
                                                            "")}
    print(f"{args.frames} frames of 640x360 (10 people crossing, "
          f"some frames empty); model {args.model}")
    for step in ("tracklets", "gate", "adapt"):
        out = os.path.join(tmp, f"out_{step}")
        result = subprocess.run(
            [sys.executable, "-c", STEP, step, sequence, args.model, out,
             str(args.steps)], env=env, capture_output=True, text=True,
            check=True)
        numbers = json.loads(result.stdout.strip().splitlines()[-1])
        seconds = numbers["seconds"]
        per = (f"{1000 * seconds / numbers['frames']:6.1f} s per 1,000 "
               f"frames, {1000 * seconds / numbers['detections']:6.1f} s per "
               "1,000 detections" if step != "adapt" else
               f"{args.steps} steps of 32, tracklets included")
        print(f"{step:10s} {numbers['seconds']:8.1f} s  peak "
              f"{numbers['peak_mb']:7.0f} MB  {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
