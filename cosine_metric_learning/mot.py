"""MOTChallenge sequences: reading them, and scoring tracking results.

A sequence folder holds ``seqinfo.ini``, ``img1/`` (the frames),
``det/det.txt`` (detections) and ``gt/gt.txt`` (ground truth), in the
layout of MOT16, MOT17 and MOT20. :func:`read_sequence` reads one;
:func:`score` scores tracking results with TrackEval, MOTChallenge's
reference implementation (HOTA with DetA and AssA, IDF1, MOTA, ID
switches), run on the same files a submission would hold.

TrackEval is the optional ``track`` dependency; :func:`score` says how to
install it when it is missing.
"""

import configparser
import contextlib
import dataclasses
import io
import os
import tempfile
from typing import Optional

import numpy as np

from cosine_metric_learning import files
from cosine_metric_learning.errors import UsageError

LAYOUT = ("a MOTChallenge sequence folder: seqinfo.ini, img1/, det/det.txt "
          "and gt/gt.txt")
# the metrics the tracking evaluation reports
METRICS = ("HOTA", "DetA", "AssA", "IDF1", "MOTA", "IDSW")
INSTALL_HINT = ("pip install 'cosine-metric-learning[track]' (in a source "
                "checkout: pip install -e '.[track]')")


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


def find_sequences(text):
    """Sequence folders from ``--sequences``: comma-separated folders, each
    a sequence or a parent of sequences (the MOT17 ``train/`` layout)."""
    folders = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        if not os.path.isdir(entry):
            raise UsageError(f"--sequences: '{entry}' is not a folder; "
                             f"expected {LAYOUT}, or a folder of them")
        if os.path.isfile(os.path.join(entry, "seqinfo.ini")):
            folders.append(entry)
            continue
        children = sorted(os.path.join(entry, n) for n in os.listdir(entry)
                          if os.path.isfile(os.path.join(entry, n,
                                                         "seqinfo.ini")))
        if not children:
            raise UsageError(f"--sequences: '{entry}' holds no sequence; "
                             f"expected {LAYOUT}, or a folder of them")
        folders.extend(children)
    if not folders:
        raise UsageError("--sequences: no sequence given")
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
    return rows.reshape(-1, max(rows.shape[1], min_columns)) \
        if rows.size else np.zeros((0, min_columns))


def read_sequence(folder):
    """The :class:`Sequence` in ``folder``; UsageError naming what is
    missing or malformed."""
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
    det_path = os.path.join(folder, "det", "det.txt")
    if not os.path.isfile(det_path):
        raise UsageError(f"sequence {name}: no '{det_path}'; expected "
                         f"{LAYOUT}")
    detections = _read_rows(det_path, 7, "detection file")
    missing = sorted({int(f) for f in detections[:, 0]
                      if not 1 <= f <= num_frames
                      or not os.path.isfile(frame_paths[int(f) - 1])})
    if missing:
        raise UsageError(
            f"sequence {name}: {len(missing)} frames listed in '{det_path}' "
            f"are missing from '{image_dir}' (e.g. frame {missing[0]})")
    gt_path = os.path.join(folder, "gt", "gt.txt")
    ground_truth = (_read_rows(gt_path, 6, "ground-truth file")
                    if os.path.isfile(gt_path) else None)
    return Sequence(name, folder, num_frames, image_shape, frame_paths,
                    detections, ground_truth)


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


def _require_trackeval():
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
    trackeval = _require_trackeval()
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
