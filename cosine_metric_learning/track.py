"""Does the descriptor help the tracker? Deep SORT on MOTChallenge
sequences with each model, scored with the reference metrics.

    python -m cosine_metric_learning.track \
        --model=none,./output/market1501/run,market1501.pb \
        --sequences=./MOT17/train --output_dir=./tracking

Each ``--model`` (anything :func:`encoder.load` opens, or ``none``: the
appearance term off) tracks every sequence with Deep SORT's association
(``deep-sort-realtime``: Kalman filter, matching cascade with the cosine
gate and ``nn_budget``, IoU matching after it, ``max_age``, ``n_init``),
fed with the sequence's detections (``--detections=det``, filtered by
``--min_confidence`` and non-maximum suppression as Deep SORT's
application does) or its ground-truth boxes (``gt``: what appearance
adds, without detection errors). The results are scored with TrackEval
(HOTA, DetA, AssA, IDF1, MOTA, ID switches). ``--sweep`` tries a grid of
gates and budgets and names the best; the gate found on the ground truth
(a track's own boxes some frames apart against other tracks' boxes in the
same frame, at equal error) is printed beside it.

The tracker and the metrics are the optional ``track`` dependencies.
"""

import json
import os
import sys
import time

import numpy as np
from absl import app, flags, logging

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import files, metrics, mot, preprocessing
from cosine_metric_learning.errors import INTERRUPTED, INTERRUPTED_STATUS
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import parse_flags

FLAGS = flags.FLAGS
NONE = "none"
# Deep SORT's application and README (MOT16): its defaults here
DEFAULTS = {"max_cosine_distance": 0.2, "nn_budget": 100,
            "max_iou_distance": 0.7, "max_age": 30, "n_init": 3,
            "min_confidence": 0.3, "nms_max_overlap": 1.0}
SWEEP_GATES = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
SWEEP_BUDGETS = (100,)
# frames between the two boxes of a same-track pair for the ground-truth
# gate, and the visibility a box needs to be used for it
GATE_FRAME_GAP = 10
GATE_MIN_VISIBILITY = 0.5
DETECTIONS_NPY = files.Kind(
    "a detections file written by this command (a .npy of det.txt rows "
    "and their features)", lambda path: np.load(path, mmap_mode="r").ndim
    == 2)
# the loaded models and their features, for the whole command
_CACHE = {}
SUMMARY = files.json_kind({"models", "parameters"},
                          "a tracking summary written by this command (a "
                          "JSON object with 'models' and 'parameters')")


def _require_tracker():
    try:
        from deep_sort_realtime.deepsort_tracker import DeepSort
    except ImportError as e:
        raise UsageError("the tracking evaluation needs the optional package "
                         "'deep-sort-realtime', which is not installed: "
                         f"{mot.INSTALL_HINT}") from e
    return DeepSort


# Detections and their features --------------------------------------------

def non_max_suppression(boxes, scores, max_overlap):
    """Indices of the boxes ``(N, 4)`` as ``(left, top, width, height)``
    kept by greedy non-maximum suppression, highest score first, as Deep
    SORT's application does (``max_overlap`` 1.0 keeps all)."""
    if len(boxes) == 0 or max_overlap >= 1.0:
        return np.arange(len(boxes))
    x1, y1 = boxes[:, 0], boxes[:, 1]
    x2, y2 = x1 + boxes[:, 2], y1 + boxes[:, 3]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = list(np.argsort(scores))
    keep = []
    while order:
        i = order.pop()
        keep.append(i)
        rest = np.array(order, int)
        if not len(rest):
            break
        w = np.maximum(0, np.minimum(x2[i], x2[rest]) - np.maximum(
            x1[i], x1[rest]) + 1)
        h = np.maximum(0, np.minimum(y2[i], y2[rest]) - np.maximum(
            y1[i], y1[rest]) + 1)
        overlap = w * h / area[rest]
        order = [j for j, o in zip(order, overlap) if o <= max_overlap]
    return np.array(sorted(keep), int)


def detection_rows(sequence, source, min_confidence, nms_max_overlap):
    """The rows the tracker sees: ``det.txt`` above ``min_confidence``
    after non-maximum suppression per frame, or the ground-truth boxes to
    be considered (confidence 1)."""
    if source == "gt":
        if sequence.ground_truth is None:
            raise UsageError(f"--detections=gt: sequence {sequence.name} "
                             "has no gt/gt.txt")
        rows = sequence.ground_truth.copy()
        if rows.shape[1] > 7:  # MOT17: only pedestrians to be considered
            rows = rows[(rows[:, 6] != 0) & (rows[:, 7] == 1)]
        rows[:, 6] = 1.0
        return rows[:, :7]
    rows = sequence.detections[sequence.detections[:, 6] >= min_confidence]
    kept = []
    for frame in np.unique(rows[:, 0]):
        in_frame = rows[rows[:, 0] == frame]
        kept.append(in_frame[non_max_suppression(
            in_frame[:, 2:6], in_frame[:, 6], nms_max_overlap)])
    return np.concatenate(kept) if kept else rows[:, :7]


def encode_rows(encoder, sequence, rows, progress_secs=10.0):
    """Features ``(len(rows), D)`` of the rows' boxes, one batch a frame,
    cut from the frames as Deep SORT's box encoder does; a progress line
    now and then."""
    box_encoder = encoder_lib.create_box_encoder(encoder)
    features = np.zeros((len(rows), encoder.feature_dim), np.float32)
    frames = np.unique(rows[:, 0]).astype(int)
    start = last = time.time()
    for n, frame in enumerate(frames):
        index = np.flatnonzero(rows[:, 0] == frame)
        image = preprocessing.read_patches(
            [sequence.frame_paths[frame - 1]], sequence.image_shape)[0]
        features[index] = box_encoder(image, rows[index, 2:6])
        if time.time() - last >= progress_secs or n == len(frames) - 1:
            last = time.time()
            logging.info("%s: encoded %d/%d frames (%.1f frames/s)",
                         sequence.name, n + 1, len(frames),
                         (n + 1) / max(last - start, 1e-9))
    return features


def write_detections_file(path, rows, features):
    """Detections and their features in the layout of Deep SORT's
    ``generate_detections.py``: a row of ``det.txt`` (10 columns) followed
    by the feature, one ``.npy`` per sequence, for ``deep_sort_app.py
    --detection_file``."""
    padded = np.full((len(rows), 10), -1.0)
    padded[:, :rows.shape[1]] = rows[:, :10]
    files.write_atomically(path, lambda f: np.save(
        f, np.hstack([padded, features]).astype(np.float32)),
        DETECTIONS_NPY, binary=True)


def _model_features(path, sequence, rows, cache):
    """Features of ``rows`` with the model at ``path`` (None: random unit
    vectors, whose cosine distances, about 1, lie beyond every gate),
    encoded once per model and sequence."""
    key = (path, sequence.name, rows.shape, float(rows[:, 2:6].sum()))
    if key not in cache:
        if path is None:
            rng = np.random.default_rng(0)
            vectors = rng.normal(size=(len(rows), 128)).astype(np.float32)
            cache[key] = vectors / np.linalg.norm(vectors, axis=1,
                                                  keepdims=True)
        else:
            cache[key] = encode_rows(_load(path, cache), sequence, rows)
    return cache[key]


def _load(path, cache):
    if ("model", path) not in cache:
        cache[("model", path)] = encoder_lib.load(path)
    return cache[("model", path)]


# Tracking -------------------------------------------------------------------

def run_tracker(rows, features, num_frames, max_cosine_distance, nn_budget,
                max_iou_distance, max_age, n_init):
    """Deep SORT (``deep-sort-realtime``) over the detections ``rows``
    with their ``features``; returns the result rows ``(frame, track,
    left, top, width, height)`` of the confirmed tracks updated in that
    frame, as Deep SORT's application writes them."""
    DeepSort = _require_tracker()
    tracker = DeepSort(max_age=max_age, n_init=n_init,
                       max_iou_distance=max_iou_distance,
                       max_cosine_distance=max_cosine_distance,
                       nn_budget=nn_budget, embedder=None)
    results = []
    for frame in range(1, num_frames + 1):
        index = np.flatnonzero(rows[:, 0] == frame)
        detections = [(list(rows[i, 2:6]), float(rows[i, 6]), "person")
                      for i in index]
        tracks = tracker.update_tracks(detections,
                                       embeds=list(features[index]))
        for track in tracks:
            if not track.is_confirmed() or track.time_since_update > 1:
                continue
            results.append((frame, int(track.track_id),
                            *track.to_ltwh(orig=False)))
    return results


def ground_truth_gate(sequence, model, cache):
    """The equal-error cosine gate on the ground truth: a track's own
    boxes ``GATE_FRAME_GAP`` frames apart against different tracks' boxes
    in the same frame (boxes at least ``GATE_MIN_VISIBILITY`` visible)."""
    gt = sequence.ground_truth
    if gt is None:
        return None
    keep = np.ones(len(gt), bool)
    if gt.shape[1] > 8:
        keep &= (gt[:, 6] != 0) & (gt[:, 7] == 1) & (
            gt[:, 8] >= GATE_MIN_VISIBILITY)
    rows = gt[keep]
    features = _model_features(model, sequence, rows[:, :7], cache)
    where = {(int(f), int(t)): i for i, (f, t) in enumerate(rows[:, :2])}
    same, different = [], []
    for (frame, track), i in where.items():
        later = where.get((frame + GATE_FRAME_GAP, track))
        if later is not None:
            same.append(1.0 - float(features[i] @ features[later]))
    for frame in np.unique(rows[:, 0]):
        index = np.flatnonzero(rows[:, 0] == frame)
        for a in range(len(index)):
            for b in range(a + 1, len(index)):
                different.append(1.0 - float(features[index[a]]
                                             @ features[index[b]]))
    if not same or not different:
        return None
    distances = np.array(same + different)
    labels = np.array([True] * len(same) + [False] * len(different))
    return metrics.equal_error_gate(distances, labels)["threshold"]


# The command ----------------------------------------------------------------

def _parameters(gate=None, budget=None):
    values = {name: getattr(FLAGS, name) for name in DEFAULTS}
    if gate is not None:
        values["max_cosine_distance"] = gate
    if budget is not None:
        values["nn_budget"] = budget
    return values


def _setting_name(parameters):
    return (f"gate{parameters['max_cosine_distance']:g}"
            f"_budget{parameters['nn_budget']}")


def evaluate(models, sequences, detections, output_dir, sweep, cache=None):
    """Track every sequence with every model (and, with ``sweep``, every
    gate and budget of the grid); returns the summary (written to
    ``output_dir/summary.json``)."""
    cache = {} if cache is None else cache
    scored = [s for s in sequences if s.ground_truth is not None]
    for s in sequences:
        if s.ground_truth is None:
            logging.warning("Sequence %s has no gt/gt.txt: it is tracked, "
                            "but cannot be scored", s.name)
    summary = {"models": {}, "parameters": {
        **_parameters(), "detections": detections,
        "sequences": [s.path for s in sequences]}}
    for model in models:
        path = None if model == NONE else model
        settings = [_parameters()]  # the flags' setting first
        if sweep and path is not None:
            settings += [p for p in (_parameters(g, b) for b in SWEEP_BUDGETS
                                     for g in SWEEP_GATES)
                         if p != settings[0]]
        runs = []
        for parameters in settings:
            folder = os.path.join(output_dir, _safe_name(model),
                                  _setting_name(parameters))
            os.makedirs(folder, exist_ok=True)
            results = {}
            for sequence in sequences:
                rows = detection_rows(sequence, detections,
                                      FLAGS.min_confidence,
                                      FLAGS.nms_max_overlap)
                features = _model_features(path, sequence, rows, cache)
                if path is not None and parameters is settings[0]:
                    write_detections_file(os.path.join(
                        output_dir, _safe_name(model),
                        f"{sequence.name}.npy"), rows, features)
                tracked = run_tracker(
                    rows, features, sequence.num_frames,
                    **{k: parameters[k] for k in (
                        "max_cosine_distance", "nn_budget",
                        "max_iou_distance", "max_age", "n_init")})
                results[sequence.name] = os.path.join(
                    folder, f"{sequence.name}.txt")
                mot.write_results(results[sequence.name], tracked)
            numbers = mot.score(scored, results) if scored else {}
            runs.append({"parameters": parameters, "results": folder,
                         "metrics": numbers})
        entry = {"runs": runs}
        if scored:
            entry["best"] = max(
                runs, key=lambda r: r["metrics"]["COMBINED"]["IDF1"])
            if path is not None:
                gates = [ground_truth_gate(s, path, cache) for s in scored]
                gates = [g for g in gates if g is not None]
                entry["ground_truth_gate"] = (float(np.median(gates))
                                              if gates else None)
        summary["models"][model] = entry
    return summary


def _label(model):
    """A model as the table names it: its last two path components."""
    parts = os.path.normpath(model).split(os.sep)
    return os.path.join(*parts[-2:]) if len(parts) > 1 else model


def _safe_name(model):
    """The model's folder in --output_dir."""
    return "".join(c if c.isalnum() or c in "._-" else "_"
                   for c in _label(model))


def format_table(summary):
    """A row per model (its default setting and, swept, its best)."""
    header = (f"{'model':32s} {'gate':>6s} {'budget':>6s} "
              + " ".join(f"{m:>6s}" for m in mot.METRICS))
    lines = [header, "-" * len(header)]
    for model, entry in summary["models"].items():
        shown = [("", entry["runs"][0])]
        best = entry.get("best")
        if best is not None and best is not entry["runs"][0] and                 len(entry["runs"]) > 1:
            shown.append((" (best)", best))
        for suffix, run in shown:
            combined = run["metrics"].get("COMBINED")
            if combined is None:
                continue
            p = run["parameters"]
            gate = "-" if model == NONE else f"{p['max_cosine_distance']:g}"
            values = " ".join(
                f"{combined[m]:6d}" if m == "IDSW"
                else f"{100 * combined[m]:6.1f}" for m in mot.METRICS)
            lines.append(f"{(_label(model) + suffix)[-32:]:32s} {gate:>6s} "
                         f"{p['nn_budget']:>6d} {values}")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments: {' '.join(argv[1:])}",
              file=sys.stderr)
        return 2
    try:
        _require_tracker()
        models = [m.strip() for m in FLAGS.model.split(",") if m.strip()]
        sequences = [mot.read_sequence(f)
                     for f in mot.find_sequences(FLAGS.sequences)]
        output_dir = FLAGS.output_dir
        summary_path = os.path.join(output_dir, "summary.json")
        if os.path.isdir(output_dir):
            files.check_output(summary_path, SUMMARY)
        else:
            files.check_writable(os.path.dirname(os.path.abspath(
                output_dir)), output_dir)
            os.makedirs(output_dir)
        for model in models:  # a bad model fails before the tracking
            if model != NONE:
                _load(model, _CACHE)
        summary = evaluate(models, sequences, FLAGS.detections, output_dir,
                           FLAGS.sweep, _CACHE)
        files.write_atomically(summary_path, lambda f: json.dump(
            summary, f, indent=1), SUMMARY)
        print(format_table(summary))
        for model, entry in summary["models"].items():
            if model == NONE or "best" not in entry:
                continue
            best = entry["best"]["parameters"]
            print(f"\n{model}: best --max_cosine_distance="
                  f"{best['max_cosine_distance']:g} --nn_budget="
                  f"{best['nn_budget']} (IDF1 "
                  f"{100 * entry['best']['metrics']['COMBINED']['IDF1']:.1f}"
                  f"); gate on the ground truth: "
                  f"{entry.get('ground_truth_gate') or float('nan'):.4g}")
            print(f"  python deep_sort_app.py --sequence_dir=SEQUENCE "
                  f"--detection_file="
                  f"{os.path.join(output_dir, _safe_name(model), 'SEQUENCE')}"
                  f".npy --min_confidence="
                  f"{FLAGS.min_confidence:g} --nms_max_overlap="
                  f"{FLAGS.nms_max_overlap:g} --max_cosine_distance="
                  f"{best['max_cosine_distance']:g} --nn_budget="
                  f"{best['nn_budget']}")
        print(f"wrote {summary_path}")
    except ArgumentError as e:
        print(f"error: {e.for_flags({'path': '--model'})}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return INTERRUPTED_STATUS
    return 0


def define_flags():
    flags.DEFINE_string("model", None, "Comma-separated models: anything "
                        "encoder.load opens (a run's folder, a checkpoint, "
                        ".pb, SavedModel, .onnx, .xml), or none (the "
                        "appearance term off: IoU and motion only).",
                        required=True)
    flags.DEFINE_string("sequences", None, "Comma-separated MOTChallenge "
                        "sequence folders, or parents of them.",
                        required=True)
    flags.DEFINE_enum("detections", "det", ["det", "gt"], "The boxes to "
                      "track: the sequence's det/det.txt, or its ground "
                      "truth (what appearance adds without detection "
                      "errors).")
    flags.DEFINE_string("output_dir", None, "Results files (a folder per "
                        "model and setting) and summary.json.",
                        required=True)
    flags.DEFINE_boolean("sweep", False, "Also try the gates "
                         f"{', '.join(map(str, SWEEP_GATES))} with "
                         f"--nn_budget {', '.join(map(str, SWEEP_BUDGETS))}; "
                         "the best by IDF1 is printed.")
    flags.DEFINE_float("max_cosine_distance", DEFAULTS["max_cosine_distance"],
                       "Deep SORT's appearance gate.")
    flags.DEFINE_integer("nn_budget", DEFAULTS["nn_budget"], "Features kept "
                         "per track.")
    flags.DEFINE_float("max_iou_distance", DEFAULTS["max_iou_distance"],
                       "Gate of the IoU matching.")
    flags.DEFINE_integer("max_age", DEFAULTS["max_age"], "Frames a track "
                         "lives without a match.")
    flags.DEFINE_integer("n_init", DEFAULTS["n_init"], "Matches before a "
                         "track is confirmed.")
    flags.DEFINE_float("min_confidence", DEFAULTS["min_confidence"],
                       "--detections=det: drop detections below it.")
    flags.DEFINE_float("nms_max_overlap", DEFAULTS["nms_max_overlap"],
                       "--detections=det: non-maximum suppression (1.0: "
                       "none).")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags)
