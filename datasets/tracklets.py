"""Unlabeled video to a re-identification training set: a tracker's
confident tracklets as identities, and a gate chosen without ground truth.

    python -m cosine_metric_learning.datasets.tracklets \
        --sequences=./my_videos --model=none --output_dir=./my_tracklets

Each MOTChallenge sequence (``img1/`` and ``det/det.txt``; ``gt/`` is
never read) is tracked by Deep SORT (:mod:`tracking`) on its detections at or
above ``--track_min_confidence``: by motion alone with ``--model=none``,
or with the model's features at its self-calibrated gate. Each
sequence's score range, and how many detections each threshold keeps,
is logged before the work (detectors score on scales of their own).
Every tracklet is cut where it cannot be trusted to stay on one
person: where its box overlaps another box of the frame by more than
``--max_overlap`` of its area (crossings, occlusion), where the tracker
lost it and took it up again, and at a detection below
``--min_confidence``. Pieces shorter than ``--min_length`` frames are
dropped, and a crop is kept every ``--frame_stride`` frames. Each piece is
an identity folder ``OUT/<sequence>_<tracklet>/<frame>.jpg``, the layout
``train_custom.py`` reads, with ``manifest.json`` as the annotated
converter (:mod:`datasets.mot`) writes it; two pieces may be the same
person (one lost behind a pillar, or seen in two sequences), except the
pairs seen in one frame, which the manifest lists as ``seen_together``.

The gate: boxes of one tracklet some frames apart are (almost surely) the
same person, boxes of one frame are different people. The self-calibrated
gate is the cosine distance below which only ``GATE_FALSE_ACCEPT`` of the
different-people pairs fall (the tracker wants few false accepts: motion
covers the rest), raised where that would cut more than
``GATE_FALSE_REJECT`` of the same-tracklet pairs (a person it cannot take
up again after an occlusion costs the tracker more than a look-alike in
its motion gate); :func:`self_calibrated_gate` reports both error rates.
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import collections
import dataclasses
import json
import math
import os

import numpy as np
from absl import logging

from cosine_metric_learning import files, frame_io, gates
from cosine_metric_learning import mot_sequences
from cosine_metric_learning import tracking
from cosine_metric_learning.commands import setting
from cosine_metric_learning.datasets import mot as mot_crops
from cosine_metric_learning.errors import ArgumentError, UsageError

DEFAULTS = {"min_confidence": 0.5, "max_overlap": 0.1, "min_length": 8,
            "frame_stride": 2, "min_height": 32}
# detections below this are not given to the tracker (Deep SORT's
# --min_confidence)
TRACK_MIN_CONFIDENCE = tracking.DEFAULTS["min_confidence"]
# the reasons a tracked box is not a crop, in the order they are tested
REASONS = collections.OrderedDict([
    ("untracked", "not on a confirmed track"),
    ("confidence", "a detection below --min_confidence (the tracklet is "
     "cut)"),
    ("overlap", "overlaps another box by more than --max_overlap (the "
     "tracklet is cut)"),
    ("outside", "entirely outside the frame (the tracklet is cut)"),
    ("height", "shorter than --min_height inside the frame"),
    ("short", "its piece of tracklet is shorter than --min_length frames"),
    ("stride", "within --frame_stride frames of the piece's previous crop"),
])


def coverage(rows):
    """For each row of ``rows`` (``frame, id, left, top, width, height,
    ...``), the largest share of its box's area that another box of the
    same frame covers."""
    covered = np.zeros(len(rows))
    for frame in np.unique(rows[:, 0]):
        index = np.flatnonzero(rows[:, 0] == frame)
        boxes = rows[index, 2:6]
        share = frame_io.box_intersections(boxes, boxes) / np.maximum(
            boxes[:, 2] * boxes[:, 3], 1e-9)[:, None]
        np.fill_diagonal(share, 0.0)
        covered[index] = share.max(axis=1) if len(index) > 1 else 0.0
    return covered


def cut_tracklets(rows, matches, frame_shape,
                  min_confidence=DEFAULTS["min_confidence"],
                  max_overlap=DEFAULTS["max_overlap"],
                  min_length=DEFAULTS["min_length"],
                  frame_stride=DEFAULTS["frame_stride"],
                  min_height=DEFAULTS["min_height"]):
    """The trustworthy pieces of a tracker's tracks.

    Parameters
    ----------
    rows : ndarray (N, >= 7)
        The tracked detections (``det.txt``'s rows).
    matches : list of (frame, track, row index)
        Which detection each confirmed track was updated with
        (:func:`tracking.run_tracker`'s ``matches``).
    frame_shape : (height, width, ...)

    Returns
    -------
    (pieces, crops, counts)
        ``pieces``: a list of row indices per piece (every frame of it);
        ``crops``: ``(piece number from 1, frame, (left, top, right,
        bottom))`` of the kept crops, the rectangle clipped to the frame;
        ``counts``: rows not kept for each of :data:`REASONS`.
    """
    counts = dict.fromkeys(REASONS, 0)
    matched = {index for _, _, index in matches}
    counts["untracked"] = len(rows) - len(matched)
    covered = coverage(rows)
    by_track = collections.defaultdict(list)
    for frame, track, index in matches:
        by_track[track].append((frame, index))
    candidates = []  # each: [(frame, index, box)]
    for track in sorted(by_track):
        piece, previous = [], None
        for frame, index in sorted(by_track[track]):
            if previous is not None and frame != previous + 1:
                candidates.append(piece)  # lost, then taken up again
                piece = []
            previous = frame
            row = rows[index]
            box = mot_crops.clip_box(row[2:6], frame_shape)
            reason = None
            if row[6] < min_confidence:
                reason = "confidence"
            elif covered[index] > max_overlap:
                reason = "overlap"
            elif box is None:
                reason = "outside"
            if reason:
                counts[reason] += 1
                candidates.append(piece)
                piece = []
                continue
            if box[3] - box[1] < min_height:
                counts["height"] += 1
                continue
            piece.append((frame, index, box))
        candidates.append(piece)
    pieces, crops = [], []
    for piece in candidates:
        if not piece:
            continue
        if piece[-1][0] - piece[0][0] + 1 < min_length:
            counts["short"] += len(piece)
            continue
        kept, last = [], None
        for frame, index, box in piece:
            if last is not None and frame - last < frame_stride:
                counts["stride"] += 1
                continue
            kept.append((frame, box))
            last = frame
        if len(kept) < 2:
            counts["short"] += len(piece)
            continue
        pieces.append([index for _, index, _ in piece])
        crops.extend((len(pieces), frame, box) for frame, box in kept)
    return pieces, crops, counts


def seen_together(rows, pieces):
    """The pairs ``(a, b)``, ``a < b``, of piece numbers (from 1, as
    :func:`cut_tracklets` numbers its crops) whose rows share a frame:
    two detections of one frame, so two different people."""
    frames = [set(rows[np.asarray(piece, int), 0].astype(int).tolist())
              for piece in pieces]
    return [(a + 1, b + 1) for a in range(len(frames))
            for b in range(a + 1, len(frames)) if frames[a] & frames[b]]


def motion_pieces(sequence, rows, parameters=None, **cut):
    """The pieces of ``rows``' motion-only tracks (appearance off: random
    features), cut as :func:`cut_tracklets` cuts; the tracklets a gate is
    calibrated on, whatever model is calibrated."""
    parameters = {**tracking.DEFAULTS, **(parameters or {})}
    matches = []
    tracking.track(rows, tracking.random_features(len(rows)),
                   sequence.num_frames, parameters, matches=matches)
    return cut_tracklets(rows, matches, sequence.image_shape, **cut)


def check_track_min_confidence(value):
    """ArgumentError unless the tracker's detection threshold is finite."""
    if not math.isfinite(value):
        raise ArgumentError("track_min_confidence", value,
                            "expected a finite confidence")


def check_cut(min_confidence, max_overlap, min_length, frame_stride,
              min_height):
    """ArgumentError naming a cutting parameter out of its range."""
    if not math.isfinite(min_confidence):
        raise ArgumentError("min_confidence", min_confidence,
                            "expected a finite confidence")
    if not math.isfinite(max_overlap) or not 0 <= max_overlap <= 1:
        raise ArgumentError("max_overlap", max_overlap, "expected a share "
                            "of the box from 0 to 1")
    if min_length < 2:
        raise ArgumentError("min_length", min_length,
                            "expected at least 2 frames")
    if frame_stride < 1:
        raise ArgumentError("frame_stride", frame_stride,
                            "expected at least 1 (every frame)")
    if min_height < 0:
        raise ArgumentError("min_height", min_height,
                            "expected 0 or more pixels")


def _check_detections(sequence):
    rows = sequence.detections
    path = os.path.join(sequence.path, "det", "det.txt")
    if not len(rows):
        raise UsageError(f"sequence {sequence.name}: '{path}' is empty; the "
                         "tracklets are made of its detections")
    height, width = sequence.image_shape[:2]
    outside = np.flatnonzero(
        (rows[:, 2] >= width) | (rows[:, 3] >= height)
        | (rows[:, 2] + rows[:, 4] <= 0) | (rows[:, 3] + rows[:, 5] <= 0))
    if len(outside) == len(rows):
        raise UsageError(
            f"sequence {sequence.name}: every box of '{path}' lies outside "
            f"the {width}x{height} frames (e.g. row {outside[0] + 1}); are "
            "they in pixels, as left, top, width, height?")


def read_checked(sequence_folders, track_min_confidence, cut):
    """The :class:`mot_sequences.Sequence` objects of the folders, their
    detections checked; each one's score range and what
    ``--track_min_confidence`` and the cut's ``--min_confidence`` keep of
    them is logged."""
    sequences = [mot_sequences.read_sequence(f) for f in sequence_folders]
    mot_sequences.check_distinct(
        sequences, "sequence_folders", sequence_folders)
    for sequence in sequences:
        _check_detections(sequence)
        logging.info("%s", tracking.describe_scores(sequence, [
            ("--track_min_confidence", track_min_confidence),
            ("--min_confidence", cut["min_confidence"])]))
    return sequences


def tracked_rows(sequence, track_min_confidence):
    """The detections the tracker is given (no suppression)."""
    return tracking.detection_rows(sequence, "det", track_min_confidence, 1.0,
                                   argument="track_min_confidence")


def extract(sequence_folders, output_dir, model="none",
            track_min_confidence=TRACK_MIN_CONFIDENCE, **cut):
    """Cut the confident tracklets of the sequences into ``output_dir``
    (see the module's docstring), tracking their detections at or above
    ``track_min_confidence``; ``cut`` are :func:`cut_tracklets`'
    keywords. Returns the manifest (as :func:`datasets.mot.convert`'s,
    with ``gate``: the model's self-calibrated gate, None for none)."""
    cut = {**DEFAULTS, **cut}
    check_cut(**cut)
    check_track_min_confidence(track_min_confidence)
    files.check_output(output_dir, mot_crops.OUTPUT)  # before reading
    return extract_sequences(
        read_checked(sequence_folders, track_min_confidence, cut),
        output_dir, model, track_min_confidence, **cut)


def encoder_crops(sequence, rows, pieces, crops, patch_shape):
    """``crops`` of :func:`cut_tracklets` cut as the box encoder cuts their
    detections for a model of input ``patch_shape``: the width set to its
    aspect ratio about the box's centre, clipped to the frame
    (:func:`encoder.patch_region`)."""
    from cosine_metric_learning import encoder as encoder_lib
    row_of = {(number, int(rows[index, 0])): index
              for number, piece in enumerate(pieces, 1) for index in piece}
    out = []
    for number, frame, box in crops:
        region = encoder_lib.patch_region(
            sequence.image_shape, rows[row_of[number, frame], 2:6],
            patch_shape)
        out.append((number, frame, box if isinstance(region, str)
                    else region))
    return out


def extract_sequences(sequences, output_dir, model="none",
                      track_min_confidence=TRACK_MIN_CONFIDENCE,
                      patch_shape=None, **cut):
    """:func:`extract` of sequences read by :func:`read_checked`; with
    ``patch_shape``, each crop is the patch the box encoder cuts for the
    detection (:func:`encoder_crops`), not its own rectangle: a model
    fitted to them is fitted to what the tracker will give it."""
    from cosine_metric_learning import encoder as encoder_lib
    cut = {**DEFAULTS, **cut}
    encoder = None if model == "none" else encoder_lib.load(model)
    tracked = []  # (sequence, rows, features, motion pieces)
    for sequence in sequences:
        rows = tracked_rows(sequence, track_min_confidence)
        features = None if encoder is None else tracking.encode_rows(
            encoder, sequence, rows)
        tracked.append((sequence, rows, features,
                        motion_pieces(sequence, rows, **cut)))
    gate = None
    if encoder is not None:
        gate = gates.pooled_gate((features, rows, result[0])
                                 for _, rows, features, result in tracked)
        if gate is None:
            raise UsageError("no tracklet pairs to calibrate the gate on: "
                             "the sequences are too short or too crowded")
        logging.info("self-calibrated gate %.4g from %d same and %d "
                     "different pairs", gate["gate"], gate["same_pairs"],
                     gate["different_pairs"])
    manifest = {"sources": [], "filters": {
        **cut, "track_min_confidence": track_min_confidence}, "model": model,
                # the crops: the detections' rectangles, or (a shape) the
                # box encoder's patches for a model of that input
                "patch_shape": None if patch_shape is None else
                list(patch_shape),
                "gate": gate, "counts": dict.fromkeys(["kept", *REASONS], 0),
                "identities": {},
                # the pairs of identities seen in one frame: different
                # people (any other two may be one person)
                "seen_together": [],
                # each identity's sequence, first and last frame
                "spans": {}}
    selected = []
    for sequence, rows, features, result in tracked:
        if encoder is not None:  # tracked again, with the model
            matches = []
            tracking.track(rows, features, sequence.num_frames, {
                **tracking.DEFAULTS, "max_cosine_distance": gate["gate"]},
                matches=matches)
            result = cut_tracklets(rows, matches, sequence.image_shape, **cut)
        pieces, crops, counts = result
        selected.append((sequence, crops if patch_shape is None else
                         encoder_crops(sequence, rows, pieces, crops,
                                       patch_shape)))
        for number, piece in enumerate(pieces, 1):
            frames = rows[np.asarray(piece, int), 0]
            manifest["spans"][mot_crops.identity_name(
                sequence.name, number)] = [sequence.name, int(frames.min()),
                                           int(frames.max())]
        numbers = collections.Counter(piece for piece, _, _ in crops)
        manifest["sources"].append({
            "sequence": sequence.name,
            "path": os.path.abspath(sequence.path), "boxes": len(rows),
            "kept": len(crops), "identities": len(numbers),
            "dropped": counts})
        manifest["counts"]["kept"] += len(crops)
        for reason, count in counts.items():
            manifest["counts"][reason] += count
        for piece, count in sorted(numbers.items()):
            manifest["identities"][mot_crops.identity_name(
                sequence.name, piece)] = count
        manifest["seen_together"].extend(
            [mot_crops.identity_name(sequence.name, a),
             mot_crops.identity_name(sequence.name, b)]
            for a, b in seen_together(rows, pieces))
    if not manifest["identities"]:
        raise UsageError(
            "no tracklet is left after the cuts (" + ", ".join(
                f"{manifest['counts'][r]} {t}" for r, t in REASONS.items()
                if manifest["counts"][r]) + "); loosen --min_confidence, "
            "--max_overlap or --min_length")

    def write(tmp):
        for sequence, crops in selected:
            mot_crops.write_crops(sequence, crops, tmp)
        with open(os.path.join(tmp, mot_crops.MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)

    files.replace_dir_atomically(output_dir, write, mot_crops.OUTPUT)
    return manifest


@dataclasses.dataclass
class CutConfig:
    """The thresholds applied to the detections: the tracker's and the
    cuts' (``adapt`` takes them too)."""
    track_min_confidence: float = setting(
        TRACK_MIN_CONFIDENCE, "Track only detections scored at or above "
        "this (Deep SORT's --min_confidence; the log says each sequence's "
        "score range).")
    min_confidence: float = setting(
        DEFAULTS["min_confidence"],
        "Cut a tracklet at a detection below this.")
    max_overlap: float = setting(
        DEFAULTS["max_overlap"], "Cut a tracklet where another box of the "
        "frame covers more than this share of its box.")
    min_length: int = setting(
        DEFAULTS["min_length"],
        "Drop pieces of tracklets shorter than this many frames.")
    frame_stride: int = setting(
        DEFAULTS["frame_stride"],
        "Keep a crop every this many frames of a piece.")
    min_height: int = setting(
        DEFAULTS["min_height"],
        "Drop boxes shorter than this many pixels inside the frame.")

    @property
    def cuts(self):
        """The cuts' thresholds as :func:`extract` takes them."""
        return {name: getattr(self, name) for name in DEFAULTS}


if __name__ == "__main__":  # the command: tracklets_command.py
    from cosine_metric_learning.datasets import tracklets_command
    tracklets_command.run_command()
