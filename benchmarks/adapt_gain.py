"""Does adapting to unlabeled video help on people it never saw?

Writes synthetic crossing scenes (pairs who swap lanes behind a pillar;
with ``--look_alike``, the two of a pair look alike), adapts ``--model``
on the unlabeled ones (``cosine_metric_learning.adapt``: motion-only
tracklets, fine-tuning), then tracks held-out scenes of other people
with motion alone, the ground-truth identities (``identity``: the most
appearance can give), the model and the adapted model, each at its
self-calibrated gate (``--max_cosine_distance=auto``) and swept (the
grid and its refinement), scored together with the held-out scenes'
ground truth.
Prints the table, the two differences the adaptation is judged by, and
writes it all as JSON.

    python benchmarks/adapt_gain.py --model=demo/output/cosine-softmax
"""

import argparse
import json
import os
import sys
import tempfile

from cosine_metric_learning import adapt, mot_sequences, track
from cosine_metric_learning.datasets import synthetic_mot


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--look_alike", type=float, default=40.0)
    parser.add_argument("--unlabeled", default="5:215:21,5:215:22,5:215:23",
                        help="pairs:frames:seed of each unlabeled scene")
    parser.add_argument("--held_out", default=synthetic_mot.HELD_OUT_SCENES,
                        help="pairs:frames:seed of each held-out scene "
                        "(scored together)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args(argv)
    for flag in ("unlabeled", "held_out"):
        try:
            synthetic_mot.parse_scenes(getattr(args, flag))
        except ValueError as e:
            parser.error(f"--{flag}: {e}")
    tmp = tempfile.mkdtemp(prefix="adapt_gain.")
    unlabeled = synthetic_mot.write_mot_scenes(
        os.path.join(tmp, "unlabeled"), args.unlabeled, args.look_alike,
        "UNLABELED")
    # the held-out scenes' seeds draw other people (seeds differ)
    held_out = synthetic_mot.write_mot_scenes(
        os.path.join(tmp, "held_out"), args.held_out, args.look_alike,
        "HELD-OUT")
    report = adapt.adapt(args.model, unlabeled, os.path.join(tmp, "adapted"),
                         number_of_steps=args.steps,
                         batch_size=args.batch_size, export="none")
    if isinstance(report, int):
        return report
    models = [track.MOTION, track.IDENTITY, args.model, report["adapted"]]
    names = {track.MOTION: "motion", track.IDENTITY: "identity",
             args.model: "model", report["adapted"]: "adapted"}
    summary = track.evaluate(
        models, [mot_sequences.read_sequence(s) for s in held_out], "det",
        os.path.join(tmp, "tracking"), sweep=True,
        parameters={"max_cosine_distance": track.AUTO})
    table = {}
    print(f"\n{report['tracklets']['identities']} tracklets from "
          f"{len(unlabeled)} unlabeled scenes, {args.steps} steps; held-out "
          f"scenes {args.held_out}, look-alike {args.look_alike:g}")
    print(f"{'model':12s} {'calibrated':>10s} {'IDF1':>6s} {'best gate':>9s} "
          f"{'IDF1':>6s}")
    for model in models:
        entry = summary["models"][model]
        auto, best = entry["runs"][0], entry["best"]
        table[names[model]] = {
            "calibrated_gate": auto["parameters"]["max_cosine_distance"],
            "calibrated_IDF1": auto["metrics"]["COMBINED"]["IDF1"],
            "best_gate": best["parameters"]["max_cosine_distance"],
            "best_IDF1": best["metrics"]["COMBINED"]["IDF1"]}
        row = table[names[model]]
        # identity has no calibrated gate: it tracks at Deep SORT's 0.2
        gate = ("-" if model in (track.MOTION, track.IDENTITY)
                else f"{row['calibrated_gate']:.4f}")
        print(f"{names[model]:12s} {gate:>10s} "
              f"{100 * row['calibrated_IDF1']:6.1f} "
              f"{row['best_gate']:9.4g} {100 * row['best_IDF1']:6.1f}")
    gain = table["adapted"]["calibrated_IDF1"] - table["model"]["best_IDF1"]
    miss = table["model"]["calibrated_IDF1"] - table["model"]["best_IDF1"]
    print(f"adapted at its calibrated gate - model's best swept: "
          f"{100 * gain:+.1f} IDF1")
    print(f"model at its calibrated gate - its best swept:        "
          f"{100 * miss:+.1f} IDF1")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"settings": vars(args), "adapt": report,
                       "table": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
