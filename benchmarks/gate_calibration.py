"""Which operating point should the self-calibrated gate take?

For each model, on crossing scenes of people it never saw (synthetic:
pairs who swap lanes behind a pillar), the gate is calibrated without
ground truth (:func:`datasets.gates.self_calibrated_gate`, the
sequences' motion-only tracklets) at several shares of false accepts, and
the scenes are tracked at each gate and scored (IDF1 with the ground
truth); beside them, the sweep's grid, its refinement and the
equal-error gate of the same pairs. Prints the table and writes it as
JSON.

    python benchmarks/gate_calibration.py \
        --model=demo/output/cosine-softmax,demo/output/cosine-softmax/ckpt-0
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import gates, metrics, mot_sequences, track
from cosine_metric_learning import tracking
from cosine_metric_learning.datasets import synthetic_mot, tracklets

TARGETS = (0.001, 0.003, 0.01, 0.03, 0.1)
REJECTS = (0.05, 0.1, 0.2)


def idf1_at(gate, scenes):
    """Combined IDF1 of the scenes tracked at ``gate``."""
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for sequence, rows, features, _ in scenes:
            tracked = tracking.track(rows, features, sequence.num_frames, {
                **tracking.DEFAULTS, "max_cosine_distance": gate})
            results[sequence.name] = os.path.join(tmp, sequence.name)
            tracking.write_results(results[sequence.name], tracked)
        return tracking.score([s for s, *_ in scenes], results)["COMBINED"][
            "IDF1"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="comma-separated models")
    parser.add_argument("--scenes", default="5:215:11,8:250:12,10:280:13",
                        help="pairs:frames:seed of each synthetic scene")
    parser.add_argument("--look_alike", type=float, default=0.0,
                        help="the two of a pair look alike: their colours "
                        "differ by about this much (0-255)")
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args(argv)
    try:
        synthetic_mot.parse_scenes(args.scenes)
    except ValueError as e:
        parser.error(f"--scenes: {e}")
    sequences = [mot_sequences.read_sequence(s)
                 for s in synthetic_mot.write_mot_scenes(
        tempfile.mkdtemp(prefix="gate_scenes."), args.scenes,
        args.look_alike, "CROSS")]
    table = {}
    for model in args.model.split(","):
        encoder = encoder_lib.load(model)
        scenes, same, different = [], [], []
        for sequence in sequences:
            rows = tracking.detection_rows(sequence, "det", 0.3, 1.0)
            features = tracking.encode_rows(encoder, sequence, rows)
            pieces = tracklets.motion_pieces(sequence, rows)[0]
            s, d = gates.pair_distances(features, rows, pieces)
            same.append(s)
            different.append(d)
            scenes.append((sequence, rows, features, pieces))
        same, different = np.concatenate(same), np.concatenate(different)
        rows = []
        for target in TARGETS:
            gate = gates.self_calibrated_gate(same, different, target,
                                              None)
            rows.append((f"false accepts {target:g}", gate["gate"],
                         gate["false_reject"], idf1_at(gate["gate"], scenes)))
        for target in REJECTS:
            gate = gates.self_calibrated_gate(same, different, 0.0,
                                              target)
            rows.append((f"false rejects {target:g}", gate["gate"],
                         gate["false_reject"], idf1_at(gate["gate"], scenes)))
        gate = gates.self_calibrated_gate(same, different)
        rows.append((f"default ({gate['bound']})", gate["gate"],
                     gate["false_reject"], idf1_at(gate["gate"], scenes)))
        equal = metrics.equal_error_gate(
            np.concatenate([same, different]),
            np.concatenate([np.ones(len(same), bool),
                            np.zeros(len(different), bool)]))["threshold"]
        rows.append(("equal error", equal, float(np.mean(same > equal)),
                     idf1_at(equal, scenes)))
        grid = sorted(set(track.SWEEP_GATES) | {0.015, 0.03, 0.04})
        for gate in grid:
            rows.append(("grid", gate, float(np.mean(same > gate)),
                         idf1_at(gate, scenes)))
        table[model] = rows
        best = max(r[3] for r in rows if r[0] == "grid")
        print(f"\n{model} ({len(same)} same, {len(different)} different "
              "pairs)")
        print(f"{'gate from':24s} {'gate':>8s} {'false rej':>9s} "
              f"{'IDF1':>6s} {'- best':>7s}")
        for name, gate, reject, idf1 in rows:
            print(f"{name:24s} {gate:8.4f} {100 * reject:8.1f}% "
                  f"{100 * idf1:6.1f} {100 * (idf1 - best):+7.1f}")
    if len(table) > 1:
        print_summary(table)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


def print_summary(table):
    """Each operating point's IDF1 below the best of the grid, on average
    and at worst over the models of ``table`` (``{model: rows}``)."""
    deficits = {}
    for rows in table.values():
        best = max(r[3] for r in rows if r[0] == "grid")
        for name, _, _, idf1 in rows:
            if name != "grid":
                key = "default" if name.startswith("default") else name
                deficits.setdefault(key, []).append(idf1 - best)
    print(f"\nIDF1 - best of the grid over {len(table)} models")
    print(f"{'gate from':24s} {'mean':>7s} {'worst':>7s}")
    for name, values in deficits.items():
        print(f"{name:24s} {100 * np.mean(values):+7.1f} "
              f"{100 * min(values):+7.1f}")


if __name__ == "__main__":
    sys.exit(main())
