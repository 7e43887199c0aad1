"""Deep SORT on a sequence's detections, and the reference metrics of
the results.

:func:`detection_rows`, :func:`encode_rows` and :func:`run_tracker`
track a :class:`mot_sequences.Sequence` with Deep SORT's association as
``deep-sort-realtime`` implements it; :func:`score` scores tracking
results with TrackEval, MOTChallenge's reference implementation (HOTA
with DetA and AssA, IDF1, MOTA, ID switches), run on the same files a
submission would hold.

The tracker and TrackEval are the optional ``track`` dependencies; the
functions that need them say how to install them when they are missing.
"""

import concurrent.futures
import contextlib
import dataclasses
import functools
import io
import logging as pylogging
import math
import os
import tempfile
import time
from typing import Callable

import numpy as np
from absl import logging

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import boxmot_trackers, files, frame_io
from cosine_metric_learning import mot_sequences
from cosine_metric_learning.errors import ArgumentError, UsageError
# the metrics the tracking evaluation reports
METRICS = ("HOTA", "DetA", "AssA", "IDF1", "MOTA", "IDSW")
# Deep SORT's application and README (MOT16): its defaults here
DEFAULTS = {"max_cosine_distance": 0.2, "nn_budget": 100,
            "max_iou_distance": 0.7, "max_age": 30, "n_init": 3,
            "min_confidence": 0.3, "nms_max_overlap": 1.0}
# what run_tracker takes of them
TRACKER_PARAMETERS = ("max_cosine_distance", "nn_budget", "max_iou_distance",
                      "max_age", "n_init")


def _is_results_file(path):
    rows = np.loadtxt(path, delimiter=",", ndmin=2)
    return rows.size == 0 or rows.shape[1] == 10


RESULTS = files.Kind("a MOTChallenge results file (10 numbers a row)",
                     _is_results_file)


def write_results(path, rows):
    """A MOTChallenge results file: ``frame, id, left, top, width,
    height, 1, -1, -1, -1`` per row; replaces only such a file."""
    files.write_atomically(path, lambda f: f.writelines(
        f"{int(frame)},{int(track)},{left:.2f},{top:.2f},{width:.2f},"
        f"{height:.2f},1,-1,-1,-1\n"
        for frame, track, left, top, width, height in rows), RESULTS)


_NOTED = set()


def _note_scored_frames(sequence):
    """Say once per sequence that only its annotated frames are scored."""
    if sequence.path not in _NOTED:
        _NOTED.add(sequence.path)
        logging.info("%s: scored on frames 1-%d of %d, the frames its ground "
                     "truth annotates (seqinfo.ini's %s)", sequence.name,
                     sequence.scored_frames, sequence.num_frames,
                     mot_sequences.GT_LAST_FRAME_KEY)


def require_trackeval():
    try:
        import trackeval
    except ImportError as e:
        raise UsageError("scoring tracks needs the optional package "
                         f"'trackeval', which is not installed: "
                         f"{mot_sequences.INSTALL_HINT}") from e
    return trackeval


def score(sequences, results, classes=mot_sequences.PEDESTRIANS):
    """TrackEval's HOTA, DetA, AssA, IDF1, MOTA and ID switches.

    ``sequences``: the scored :class:`mot_sequences.Sequence` objects
    (with ``gt.txt``, checked by
    :func:`mot_sequences.check_ground_truth`); ``results``:
    ``{sequence name: results file}``. Returns ``{sequence name or
    "COMBINED": {metric: value}}``, as MOTChallenge computes them for
    MOT17 (its preprocessing: distractor classes and rows not to be
    considered are left out). With ``classes`` other than MOT17's
    pedestrians (another tool's class numbers; None: every class), the
    boxes of ``classes`` are scored as pedestrians and the others are
    left out (MOT17's distractor classes mean nothing there). A 2D MOT
    2015 ``gt.txt`` is scored as TrackEval's MOT15 benchmark scores it:
    every box considered is a pedestrian, none a distractor. A sequence
    whose ground truth ends before it (``gt_last_frame``) is scored on
    the frames it annotates, with a line saying so.
    """
    trackeval = require_trackeval()
    with tempfile.TemporaryDirectory() as tmp:
        gt_dir = os.path.join(tmp, "gt")
        tracker_dir = os.path.join(tmp, "trackers", "model")
        os.makedirs(tracker_dir)
        for sequence in sequences:
            folder = os.path.join(gt_dir, sequence.name, "gt")
            os.makedirs(folder)
            whole = sequence.scored_frames == sequence.num_frames
            if classes == mot_sequences.PEDESTRIANS and not sequence.mot15 \
                    and whole:
                os.symlink(os.path.abspath(os.path.join(
                    sequence.path, "gt", "gt.txt")),
                    os.path.join(folder, "gt.txt"))
            else:
                rows = sequence.ground_truth
                rows = rows[rows[:, 0] <= sequence.scored_frames]
                if classes != mot_sequences.PEDESTRIANS or sequence.mot15:
                    rows = rows[np.isin(rows[:, 7], classes)] if classes \
                        else rows.copy()
                    rows[:, 7] = mot_sequences.PEDESTRIAN
                np.savetxt(os.path.join(folder, "gt.txt"), rows,
                           fmt="%.10g", delimiter=",")
            scored = os.path.join(tracker_dir, f"{sequence.name}.txt")
            if sequence.scored_frames < sequence.num_frames:
                _note_scored_frames(sequence)
                rows = np.loadtxt(results[sequence.name], delimiter=",",
                                  ndmin=2)
                np.savetxt(scored, rows[rows[:, 0] <= sequence.scored_frames]
                           if rows.size else rows, fmt="%.10g",
                           delimiter=",")
            else:
                os.symlink(os.path.abspath(results[sequence.name]), scored)
        dataset = trackeval.datasets.MotChallenge2DBox({
            "GT_FOLDER": gt_dir, "TRACKERS_FOLDER": os.path.join(
                tmp, "trackers"), "TRACKERS_TO_EVAL": ["model"],
            "TRACKER_SUB_FOLDER": "", "OUTPUT_FOLDER": tmp,
            "SKIP_SPLIT_FOL": True, "PRINT_CONFIG": False,
            "SEQ_INFO": {s.name: s.scored_frames for s in sequences},
            "BENCHMARK": "MOT17", "CLASSES_TO_EVAL": ["pedestrian"]})
        evaluator = trackeval.Evaluator({
            "USE_PARALLEL": False, "PRINT_RESULTS": False,
            "PRINT_CONFIG": False, "TIME_PROGRESS": False,
            "OUTPUT_SUMMARY": False, "OUTPUT_DETAILED": False,
            "PLOT_CURVES": False, "DISPLAY_LESS_PROGRESS": True})
        metrics = [trackeval.metrics.HOTA(), trackeval.metrics.CLEAR(
            {"PRINT_CONFIG": False}), trackeval.metrics.Identity(
            {"PRINT_CONFIG": False})]
        with contextlib.redirect_stdout(io.StringIO()):
            output, messages = evaluator.evaluate([dataset], metrics)
    if messages["MotChallenge2DBox"]["model"] != "Success":
        raise UsageError("TrackEval cannot score the results: "
                         f"{messages['MotChallenge2DBox']['model']}")
    scored = output["MotChallenge2DBox"]["model"]
    numbers = {}
    for name, result in scored.items():
        values = result["pedestrian"]
        numbers["COMBINED" if name == "COMBINED_SEQ" else name] = {
            "HOTA": float(np.mean(values["HOTA"]["HOTA"])),
            "DetA": float(np.mean(values["HOTA"]["DetA"])),
            "AssA": float(np.mean(values["HOTA"]["AssA"])),
            "IDF1": float(values["Identity"]["IDF1"]),
            "MOTA": float(values["CLEAR"]["MOTA"]),
            "IDSW": int(values["CLEAR"]["IDSW"])}
    return numbers


def require_tracker():
    try:
        from deep_sort_realtime.deepsort_tracker import DeepSort
    except ImportError as e:
        raise UsageError("the tracking evaluation needs the optional package "
                         "'deep-sort-realtime', which is not installed: "
                         f"{mot_sequences.INSTALL_HINT}") from e
    return DeepSort


def check_parameters(parameters):
    """ArgumentError naming a tracking parameter (a key of
    :data:`DEFAULTS`) out of its range."""
    ranges = {
        "max_cosine_distance": (0.0, 2.0, "a cosine distance from 0 to 2"),
        "nn_budget": (1, None, "at least 1 feature per track"),
        "max_iou_distance": (0.0, 1.0, "an IoU distance from 0 to 1"),
        "max_age": (0, None, "0 or more frames"),
        "n_init": (1, None, "at least 1 match"),
        "min_confidence": (None, None, "a finite confidence"),
        "nms_max_overlap": (0.0, 1.0, "an overlap from 0 to 1 (1: no "
                            "suppression)")}
    for name, value in parameters.items():
        low, high, expected = ranges[name]
        integer = isinstance(DEFAULTS[name], int)
        if (integer and not isinstance(value, (int, np.integer))) or \
                isinstance(value, bool) or not math.isfinite(value) or \
                (low is not None and value < low) or \
                (high is not None and value > high):
            raise ArgumentError(name, value, f"expected {expected}")


def detection_rows(sequence, detections, min_confidence, nms_max_overlap,
                   classes=mot_sequences.PEDESTRIANS,
                   argument="min_confidence"):
    """The rows the tracker sees: ``det.txt`` above ``min_confidence``
    after non-maximum suppression per frame, or the ground-truth boxes to
    be considered of ``classes`` (confidence 1): ``detections`` is "det"
    or "gt". ``argument``: the name ``min_confidence`` has in the
    caller's messages (a threshold that keeps no detection is an
    ArgumentError of it)."""
    if detections not in ("det", "gt"):
        raise ArgumentError("detections", detections, "expected 'det' (the "
                            "sequence's det/det.txt) or 'gt' (its ground "
                            "truth)")
    if detections == "gt":
        if sequence.ground_truth is None:
            raise ArgumentError("detections", detections, f"sequence "
                                f"{sequence.name} has no gt/gt.txt")
        rows = sequence.ground_truth[mot_sequences.considered(
            sequence.ground_truth, classes)].copy()
        rows[:, 6] = 1.0
        return rows[:, :7]
    if sequence.detections is None:
        raise ArgumentError("detections", detections, f"sequence "
                            f"{sequence.name} has no det/det.txt")
    rows = sequence.detections[sequence.detections[:, 6] >= min_confidence]
    if len(sequence.detections) and not len(rows):
        confidences = sequence.detections[:, 6]
        raise ArgumentError(
            argument, min_confidence, f"sequence {sequence.name} "
            "has no detection left (its confidences range from "
            f"{confidences.min():g} to {confidences.max():g})")
    kept = []
    for frame in np.unique(rows[:, 0]):
        in_frame = rows[rows[:, 0] == frame]
        kept.append(in_frame[frame_io.non_max_suppression(
            in_frame[:, 2:6], in_frame[:, 6], nms_max_overlap)])
    return np.concatenate(kept) if kept else rows[:, :7]


def encode_rows(encoder, sequence, rows, progress_secs=10.0,
                frame_times=None):
    """Features ``(len(rows), D)`` of the rows' boxes, one batch a frame,
    cut from the frames as Deep SORT's box encoder does
    (:func:`encoder.box_patches`); the next frame is decoded and cut
    while one is encoded; a progress line now and then. ``frame_times``,
    a list, gets the time (``time.perf_counter``) each frame was done."""
    features = np.zeros((len(rows), encoder.feature_dim), np.float32)
    frames = np.unique(rows[:, 0]).astype(int)
    shape = encoder.image_shape
    decoded = sequence.frames(frames)  # in order: one call at a time

    def patches(n):
        number, image = next(decoded)
        index = np.flatnonzero(rows[:, 0] == number)
        return index, encoder_lib.box_patches(image, rows[index, 2:6], shape)

    start = last = time.time()
    with concurrent.futures.ThreadPoolExecutor(1) as reader:
        upcoming = reader.submit(patches, 0) if len(frames) else None
        for n in range(len(frames)):
            index, cut = upcoming.result()
            if n + 1 < len(frames):  # decoded and cut while this one is
                upcoming = reader.submit(patches, n + 1)  # encoded
            features[index] = encoder(cut)  # every frame has a row
            if frame_times is not None:
                frame_times.append(time.perf_counter())
            if time.time() - last >= progress_secs or n == len(frames) - 1:
                last = time.time()
                logging.info("%s: encoded %d/%d frames (%.1f frames/s)",
                             sequence.name, n + 1, len(frames),
                             (n + 1) / max(last - start, 1e-9))
    return features


def describe_scores(sequence, thresholds):
    """One line on the scale of a sequence's detection scores and what
    each threshold keeps of them: ``thresholds`` is ``[(flag, value)]``
    (``"--min_confidence", 0.3``). A threshold that keeps every detection
    or none says so: detectors score on scales of their own (ACF from 20
    to 150, most networks from 0 to 1)."""
    scores = sequence.detections[:, 6]
    if not len(scores):
        return f"{sequence.name}: no detections"
    parts = []
    for flag, value in thresholds:
        kept = int(np.sum(scores >= value))
        if kept == len(scores):
            note = " (every one: it cuts nothing on this scale)"
        elif kept == 0:
            note = " (none: every score is below it)"
        else:
            note = ""
        parts.append(f"{flag}={value:g} keeps {kept}{note}")
    return (f"{sequence.name}: {len(scores)} detections scored "
            f"{scores.min():g} to {scores.max():g}; " + ", ".join(parts))


def random_features(count, dim=128):
    """``count`` random unit vectors (seeded): features whose cosine
    distances, about 1, lie beyond every gate, so the tracker's appearance
    term matches nothing and motion alone decides."""
    vectors = np.random.default_rng(0).normal(size=(count, dim)).astype(
        np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def run_tracker(rows, features, num_frames, max_cosine_distance, nn_budget,
                max_iou_distance, max_age, n_init, matches=None):
    """Deep SORT (``deep-sort-realtime``) over the detections ``rows``
    with their ``features``; returns the result rows ``(frame, track,
    left, top, width, height)`` of the confirmed tracks updated in that
    frame, as Deep SORT's application writes them. ``matches``, a list,
    gets ``(frame, track, index of the row)`` of each of them: the
    detection the track was updated with."""
    DeepSort = require_tracker()
    # it logs its settings at every start: a sweep starts it many times
    pylogging.getLogger("deep_sort_realtime").setLevel(pylogging.WARNING)
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
                                       embeds=list(features[index]),
                                       others=[int(i) for i in index])
        for track in tracks:
            if not track.is_confirmed() or track.time_since_update > 1:
                continue
            results.append((frame, int(track.track_id),
                            *track.to_ltwh(orig=False)))
            if matches is not None and track.time_since_update == 0:
                matches.append((frame, int(track.track_id),
                                track.get_det_supplementary()))
    return results


@dataclasses.dataclass(frozen=True)
class Tracker:
    """An association algorithm the evaluation runs on a sequence's
    detection rows and their features: ``run(rows, features, num_frames,
    matches=None, **settings)`` returns the result rows ``(frame, track,
    left, top, width, height)`` as :func:`run_tracker` does.

    ``parameters``: the settings ``run`` takes (keys of
    :data:`DEFAULTS`); ``gate``: the one that gates appearance by the
    cosine distance (what self-calibration sets), None for a tracker of
    motion alone (it takes no features); ``sweep``: the values a sweep
    tries of each swept parameter (none: no sweep); ``frames``: ``run``
    takes the ``sequence`` too (for its frames); ``require()``: a
    UsageError saying what to install where its package is missing.
    """
    name: str
    title: str
    parameters: tuple
    gate: str
    run: Callable
    sweep: dict
    frames: bool = False
    require: Callable = None


def require_roboflow_trackers():
    """roboflow's ``trackers`` package (the ``track`` extra), or one line
    saying how to install it."""
    try:
        import supervision
        import trackers
    except ImportError as e:
        raise UsageError("the motion-only trackers need the optional "
                         "package 'trackers' (roboflow), which is not "
                         f"installed: {mot_sequences.INSTALL_HINT}") from e
    return trackers, supervision


def _motion_tracker(class_name):
    """A runner of roboflow's ``trackers.<class_name>`` at its own
    defaults (a frame rate of 30, so its lost-track buffer counts frames):
    motion alone, the features unused. Its result rows are the boxes of
    the detections each track took (what the library returns; Deep SORT's
    are its Kalman states), ids from 1."""
    def run(rows, features, num_frames, matches=None):
        trackers, sv = require_roboflow_trackers()
        tracker = getattr(trackers, class_name)()
        results = []
        for frame in range(1, num_frames + 1):
            index = np.flatnonzero(rows[:, 0] == frame)
            boxes = rows[index, 2:6].astype(float)
            boxes[:, 2:] += boxes[:, :2]  # xyxy
            tracked = tracker.update(sv.Detections(
                xyxy=boxes.reshape(-1, 4), confidence=rows[index, 6],
                data={"row": index}))
            for box, track_id, row in zip(tracked.xyxy, tracked.tracker_id,
                                          tracked.data["row"]):
                if track_id < 0:  # not (yet) a track
                    continue
                left, top, right, bottom = (float(v) for v in box)
                results.append((frame, int(track_id) + 1, left, top,
                                right - left, bottom - top))
                if matches is not None:
                    matches.append((frame, int(track_id) + 1, int(row)))
        results.sort(key=lambda r: (r[0], r[1]))
        return results
    return run


DEEP_SORT = "deepsort"
TRACKERS = {
    DEEP_SORT: Tracker(
        DEEP_SORT, "Deep SORT (deep-sort-realtime's implementation)",
        TRACKER_PARAMETERS, "max_cosine_distance", run_tracker,
        {"max_cosine_distance": (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                                 0.3),
         "nn_budget": (100,)}, require=require_tracker),
    # motion alone, from roboflow's trackers 2.6 at their defaults
    **{name: Tracker(name, f"{title} (roboflow's trackers, motion alone, "
                     "at its defaults)", (), None, _motion_tracker(cls), {},
                     require=require_roboflow_trackers)
       for name, title, cls in (
           ("sort", "SORT", "SORTTracker"),
           ("bytetrack", "ByteTrack", "ByteTrackTracker"),
           ("ocsort", "OC-SORT", "OCSORTTracker"))},
    # with appearance, in a process of its own (BoxMOT brings PyTorch)
    **{name: Tracker(
        name, f"{title} (BoxMOT's, with re-identification from the "
        "model's features, at its defaults)", ("max_cosine_distance",),
        "max_cosine_distance", boxmot_trackers.runner(name), {
            "max_cosine_distance": (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4,
                                    0.5),
            "nn_budget": (100,)}, frames=True,
        require=functools.partial(boxmot_trackers.check, name))
       for name, title in ((boxmot_trackers.BOTSORT, "BoT-SORT"),
                           (boxmot_trackers.STRONGSORT, "StrongSORT"))},
}


def get_tracker(name):
    """The :class:`Tracker` registered as ``name``."""
    if name not in TRACKERS:
        raise ArgumentError("tracker", name,
                            f"expected one of {', '.join(TRACKERS)}")
    return TRACKERS[name]


def track(rows, features, num_frames, settings, tracker=DEEP_SORT,
          matches=None, sequence=None):
    """Run the ``tracker`` (a name of :data:`TRACKERS`) with the settings
    it takes of ``settings`` (a dict of :data:`DEFAULTS`' keys, more
    allowed), and the ``sequence`` where it reads the frames: the one
    seam every command tracks through."""
    entry = get_tracker(tracker)
    extra = {"sequence": sequence} if entry.frames else {}
    return entry.run(rows, features, num_frames, matches=matches, **extra,
                     **{k: settings[k] for k in entry.parameters})


def track_and_score(encoder, sequences, parameters=None):
    """Track the sequences' detections with ``encoder`` (an
    :class:`encoder.Encoder`) at ``parameters`` (default
    :data:`DEFAULTS`) and score them: the combined metrics of the
    sequences that have ground truth (checked by
    :func:`mot_sequences.check_ground_truth`; None if none has)."""
    parameters = {**DEFAULTS, **(parameters or {})}
    check_parameters(parameters)
    scored = [s for s in sequences if s.ground_truth is not None]
    if not scored:
        return None
    rows_of = {s.name: detection_rows(s, "det", parameters["min_confidence"],
                                      parameters["nms_max_overlap"])
               for s in scored}
    return track_and_score_features(scored, rows_of, {
        s.name: encode_rows(encoder, s, rows_of[s.name]) for s in scored},
        parameters)


def track_and_score_features(sequences, rows_of, features_of, parameters):
    """The combined metrics of tracking each sequence's ``rows_of[name]``
    with ``features_of[name]`` at ``parameters`` (the keys of
    :data:`DEFAULTS`)."""
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for sequence in sequences:
            tracked = track(rows_of[sequence.name],
                            features_of[sequence.name], sequence.num_frames,
                            parameters)
            results[sequence.name] = os.path.join(tmp, f"{sequence.name}.txt")
            write_results(results[sequence.name], tracked)
        return score(sequences, results)["COMBINED"]
