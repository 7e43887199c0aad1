"""MOTChallenge sequences: reading them, tracking them with Deep SORT,
and scoring the results.

A sequence folder holds ``seqinfo.ini``, ``img1/`` (the frames),
``det/det.txt`` (detections) and ``gt/gt.txt`` (ground truth), in the
layout of MOT16, MOT17 and MOT20 (or ``img1/`` and ``gt/gt.txt`` alone,
as annotation tools export MOT 1.1). :func:`read_sequence` reads one;
:func:`detection_rows`, :func:`encode_rows` and :func:`run_tracker` track
it with Deep SORT's association as ``deep-sort-realtime`` implements it;
:func:`score` scores tracking results with TrackEval, MOTChallenge's
reference implementation (HOTA with DetA and AssA, IDF1, MOTA, ID
switches), run on the same files a submission would hold.

The tracker and TrackEval are the optional ``track`` dependencies; the
functions that need them say how to install them when they are missing.
"""

import configparser
import contextlib
import dataclasses
import io
import logging as pylogging
import os
import tempfile
import time
from typing import Optional

import numpy as np
from absl import logging
from PIL import Image

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import files, preprocessing
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line

LAYOUT = ("a MOTChallenge sequence folder: seqinfo.ini, img1/, det/det.txt "
          "and gt/gt.txt")
# the metrics the tracking evaluation reports
METRICS = ("HOTA", "DetA", "AssA", "IDF1", "MOTA", "IDSW")
INSTALL_HINT = ("pip install 'cosine-metric-learning[track]' (in a source "
                "checkout: pip install -e '.[track]')")
# Deep SORT's application and README (MOT16): its defaults here
DEFAULTS = {"max_cosine_distance": 0.2, "nn_budget": 100,
            "max_iou_distance": 0.7, "max_age": 30, "n_init": 3,
            "min_confidence": 0.3, "nms_max_overlap": 1.0}
# what run_tracker takes of them
TRACKER_PARAMETERS = ("max_cosine_distance", "nn_budget", "max_iou_distance",
                      "max_age", "n_init")


@dataclasses.dataclass
class Sequence:
    """One MOTChallenge sequence.

    ``detections`` and ``ground_truth`` are float arrays of their files'
    rows (``frame, id, left, top, width, height, confidence/considered,
    ...``); ``ground_truth`` is None where the sequence has no ``gt.txt``.
    """
    name: str
    path: str
    num_frames: int
    image_shape: tuple  # (height, width, 3) of the frames
    frame_paths: list
    detections: np.ndarray
    ground_truth: Optional[np.ndarray]

    def has_frame(self, frame):
        """Whether frame ``frame`` (1-based) is within the sequence and its
        file is in the frame folder."""
        return 1 <= frame <= self.num_frames and os.path.isfile(
            self.frame_paths[frame - 1])


def is_sequence(folder):
    """Whether ``folder`` is a sequence: it has ``seqinfo.ini``, or (as
    annotation tools export MOT 1.1) ``img1/`` and ``gt/gt.txt``."""
    return os.path.isfile(os.path.join(folder, "seqinfo.ini")) or (
        os.path.isdir(os.path.join(folder, "img1"))
        and os.path.isfile(os.path.join(folder, "gt", "gt.txt")))


def find_sequences(sequences):
    """Sequence folders from ``sequences``: comma-separated folders (the
    text of ``--sequences``), each a sequence or a parent of sequences
    (the MOT17 ``train/`` layout)."""
    folders = []
    for entry in (e.strip() for e in sequences.split(",") if e.strip()):
        if not os.path.isdir(entry):
            raise ArgumentError("sequences", sequences, f"'{entry}' is not "
                                f"a folder; expected {LAYOUT}, or a folder "
                                "of them")
        if is_sequence(entry):
            folders.append(entry)
            continue
        children = sorted(os.path.join(entry, n) for n in os.listdir(entry)
                          if is_sequence(os.path.join(entry, n)))
        if not children:
            raise ArgumentError("sequences", sequences, f"'{entry}' holds no "
                                f"sequence; expected {LAYOUT}, or a folder "
                                "of them")
        folders.extend(children)
    if not folders:
        raise ArgumentError("sequences", sequences, "no sequence given")
    return folders


def _read_rows(path, min_columns, what):
    try:
        rows = np.loadtxt(path, delimiter=",", ndmin=2)
    except ValueError as e:
        raise UsageError(f"cannot read {what} '{path}': {e}") from e
    if rows.size and rows.shape[1] < min_columns:
        raise UsageError(f"{what} '{path}' has {rows.shape[1]} columns; "
                         f"expected at least {min_columns} (frame, id, left, "
                         "top, width, height, confidence, ...)")
    return rows if rows.size else np.zeros((0, min_columns))


def read_sequence(folder, detections=True):
    """The :class:`Sequence` in ``folder``; UsageError naming what is
    missing or malformed.

    Without ``seqinfo.ini`` (MOT 1.1 as annotation tools export it:
    ``img1/`` and ``gt/gt.txt``), frame ``n`` is the n-th image of
    ``img1/`` in name order. With ``detections`` False, ``det/`` is not
    opened (it may be absent or list frames that ``img1/`` lacks) and the
    sequence's ``detections`` are None.
    """
    if os.path.isfile(os.path.join(folder, "seqinfo.ini")) or not \
            is_sequence(folder):
        name, image_dir, num_frames, image_shape, frame_paths = \
            _read_sequence_info(folder)
    else:
        name, image_dir, num_frames, image_shape, frame_paths = \
            _list_frames(folder)
    sequence = Sequence(name, folder, num_frames, image_shape, frame_paths,
                        None, None)
    if detections:
        det_path = os.path.join(folder, "det", "det.txt")
        if not os.path.isfile(det_path):
            raise UsageError(f"sequence {name}: no '{det_path}'; expected "
                             f"{LAYOUT}")
        sequence.detections = _read_rows(det_path, 7, "detection file")
        missing = sorted(f for f in {int(f) for f in
                                     sequence.detections[:, 0]}
                         if not sequence.has_frame(f))
        if missing:
            raise UsageError(
                f"sequence {name}: {len(missing)} frames listed in "
                f"'{det_path}' are missing from '{image_dir}' (e.g. frame "
                f"{missing[0]})")
    gt_path = os.path.join(folder, "gt", "gt.txt")
    if os.path.isfile(gt_path):
        sequence.ground_truth = _read_rows(gt_path, 6, "ground-truth file")
    return sequence


def _read_sequence_info(folder):
    """Name, frame folder, length, frame shape and frame paths from
    ``seqinfo.ini``."""
    info_path = os.path.join(folder, "seqinfo.ini")
    info = configparser.ConfigParser()
    if not info.read(info_path) or "Sequence" not in info:
        raise UsageError(f"'{info_path}' is missing or has no [Sequence]; "
                         f"expected {LAYOUT}")
    section = info["Sequence"]
    name = section.get("name", os.path.basename(os.path.normpath(folder)))
    image_dir = os.path.join(folder, section.get("imDir", "img1"))
    if not os.path.isdir(image_dir):
        raise UsageError(f"sequence {name}: '{image_dir}' is not a folder; "
                         f"expected {LAYOUT}")
    extension = section.get("imExt", ".jpg")
    try:
        num_frames = int(section["seqLength"])
    except (KeyError, ValueError):
        raise UsageError(f"'{info_path}' has no seqLength (the number of "
                         "frames)") from None
    try:
        image_shape = (int(section["imHeight"]), int(section["imWidth"]), 3)
    except (KeyError, ValueError):
        raise UsageError(f"'{info_path}' has no imWidth and imHeight (the "
                         "frame size)") from None
    frame_paths = [os.path.join(image_dir, f"{i:06d}{extension}")
                   for i in range(1, num_frames + 1)]
    return name, image_dir, num_frames, image_shape, frame_paths


def _list_frames(folder):
    """The same for a folder without ``seqinfo.ini``: the images of
    ``img1/`` in name order, the frame shape read from the first."""
    name = os.path.basename(os.path.normpath(folder))
    image_dir = os.path.join(folder, "img1")
    frame_paths = sorted(
        os.path.join(image_dir, n) for n in os.listdir(image_dir)
        if n.lower().endswith(preprocessing.IMAGE_EXTENSIONS))
    if not frame_paths:
        raise UsageError(f"sequence {name}: no images in '{image_dir}'; "
                         f"expected {LAYOUT}")
    try:
        with Image.open(frame_paths[0]) as image:
            width, height = image.size
    except OSError as e:
        raise UsageError(f"cannot read frame '{frame_paths[0]}': "
                         f"{first_line(e)}") from e
    return name, image_dir, len(frame_paths), (height, width, 3), frame_paths


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


def require_trackeval():
    try:
        import trackeval
    except ImportError as e:
        raise UsageError("scoring tracks needs the optional package "
                         f"'trackeval', which is not installed: "
                         f"{INSTALL_HINT}") from e
    return trackeval


def score(sequences, results):
    """TrackEval's HOTA, DetA, AssA, IDF1, MOTA and ID switches.

    ``sequences``: the scored :class:`Sequence` objects (with
    ``gt.txt``); ``results``: ``{sequence name: results file}``. Returns
    ``{sequence name or "COMBINED": {metric: value}}``, as MOTChallenge
    computes them for MOT17 (its preprocessing: distractor classes and
    rows not to be considered are left out).
    """
    trackeval = require_trackeval()
    with tempfile.TemporaryDirectory() as tmp:
        gt_dir = os.path.join(tmp, "gt")
        tracker_dir = os.path.join(tmp, "trackers", "model")
        os.makedirs(gt_dir)
        os.makedirs(tracker_dir)
        for sequence in sequences:
            os.symlink(os.path.abspath(sequence.path),
                       os.path.join(gt_dir, sequence.name))
            os.symlink(os.path.abspath(results[sequence.name]),
                       os.path.join(tracker_dir, f"{sequence.name}.txt"))
        dataset = trackeval.datasets.MotChallenge2DBox({
            "GT_FOLDER": gt_dir, "TRACKERS_FOLDER": os.path.join(
                tmp, "trackers"), "TRACKERS_TO_EVAL": ["model"],
            "TRACKER_SUB_FOLDER": "", "OUTPUT_FOLDER": tmp,
            "SKIP_SPLIT_FOL": True, "PRINT_CONFIG": False,
            "SEQ_INFO": {s.name: s.num_frames for s in sequences},
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


# Tracking -------------------------------------------------------------------

def require_tracker():
    try:
        from deep_sort_realtime.deepsort_tracker import DeepSort
    except ImportError as e:
        raise UsageError("the tracking evaluation needs the optional package "
                         "'deep-sort-realtime', which is not installed: "
                         f"{INSTALL_HINT}") from e
    return DeepSort



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


def considered_pedestrians(rows):
    """Which ground-truth rows MOT17 scores: marked to be considered
    (column 7) and of the pedestrian class (column 8)."""
    return (rows[:, 6] != 0) & (rows[:, 7] == 1)


def detection_rows(sequence, detections, min_confidence, nms_max_overlap):
    """The rows the tracker sees: ``det.txt`` above ``min_confidence``
    after non-maximum suppression per frame, or the ground-truth boxes to
    be considered (confidence 1): ``detections`` is "det" or "gt"."""
    if detections not in ("det", "gt"):
        raise ArgumentError("detections", detections, "expected 'det' (the "
                            "sequence's det/det.txt) or 'gt' (its ground "
                            "truth)")
    if detections == "gt":
        if sequence.ground_truth is None:
            raise ArgumentError("detections", detections, f"sequence "
                                f"{sequence.name} has no gt/gt.txt")
        rows = sequence.ground_truth.copy()
        if rows.shape[1] > 7:  # MOT17: only pedestrians to be considered
            rows = rows[considered_pedestrians(rows)]
        rows[:, 6] = 1.0
        return rows[:, :7]
    if sequence.detections is None:
        raise ArgumentError("detections", detections, f"sequence "
                            f"{sequence.name} has no det/det.txt")
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


def run_tracker(rows, features, num_frames, max_cosine_distance, nn_budget,
                max_iou_distance, max_age, n_init):
    """Deep SORT (``deep-sort-realtime``) over the detections ``rows``
    with their ``features``; returns the result rows ``(frame, track,
    left, top, width, height)`` of the confirmed tracks updated in that
    frame, as Deep SORT's application writes them."""
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
                                       embeds=list(features[index]))
        for track in tracks:
            if not track.is_confirmed() or track.time_since_update > 1:
                continue
            results.append((frame, int(track.track_id),
                            *track.to_ltwh(orig=False)))
    return results


def track_and_score(encoder, sequences, parameters=None):
    """Track the sequences' detections with ``encoder`` (an
    :class:`encoder.Encoder`) at ``parameters`` (default
    :data:`DEFAULTS`) and score them: the combined metrics of the
    sequences that have ground truth (None if none has)."""
    parameters = {**DEFAULTS, **(parameters or {})}
    scored = [s for s in sequences if s.ground_truth is not None]
    if not scored:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for sequence in scored:
            rows = detection_rows(sequence, "det",
                                  parameters["min_confidence"],
                                  parameters["nms_max_overlap"])
            tracked = run_tracker(
                rows, encode_rows(encoder, sequence, rows),
                sequence.num_frames,
                **{k: parameters[k] for k in TRACKER_PARAMETERS})
            results[sequence.name] = os.path.join(tmp, f"{sequence.name}.txt")
            write_results(results[sequence.name], tracked)
        return score(scored, results)["COMBINED"]
