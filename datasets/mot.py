"""Tracking annotations to a re-identification training set.

    python -m cosine_metric_learning.datasets.mot \
        --sequences=./MOT17/train --output_dir=./my_people/

Every kept ground-truth box of each MOTChallenge sequence (MOT16/17/20,
or ``img1/`` and ``gt/gt.txt`` as annotation tools export MOT 1.1) is cut
if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

from its frame into ``OUT/<sequence>_<track id>/<frame>.jpg``: one folder
per track, the frame number in the name, the layout ``train_custom.py``
reads (a track is an identity; each sequence is its own camera, so a
person seen in two sequences is two identities unless their folders are
merged). Only ``img1/`` and ``gt/gt.txt`` are read: ``det/`` may be
absent, or list frames that were not kept.

A box is kept when its numbers are finite, its frame whole and its size
positive, its row is marked to be considered, its class is in
``--classes``, its visibility is at least ``--min_visibility``, it is
not entirely outside the frame, its part inside the frame (boxes are
clipped to it) is at least ``--min_height`` pixels tall, its frame is in
``img1/``, and at least ``--frame_stride`` frames passed since the
track's previous kept box (frames of ``gt.txt`` missing from ``img1/``
are counted in one warning per sequence). Tracks left with fewer than
two crops are skipped. Each box is counted under the first reason that
drops it; the counts, the filters and the sources are printed and
written to ``OUT/manifest.json``.

The output folder is written whole or not at all (Ctrl-C leaves nothing);
an existing one is replaced only if it is empty or an earlier output of
this command with nothing added to it.
"""

import collections
import json
import math
import os
import re
import time

import numpy as np
from absl import logging
from PIL import Image

from cosine_metric_learning import files, mot_sequences
from cosine_metric_learning.errors import ArgumentError, UsageError

NUM_COLUMNS = mot_sequences.NUM_GT_COLUMNS
DEFAULTS = {"classes": mot_sequences.PEDESTRIANS, "min_visibility": 0.25,
            "min_height": 32, "frame_stride": 1}
MANIFEST = "manifest.json"
# the reasons a box is dropped, in the order they are tested
REASONS = collections.OrderedDict([
    ("not_a_number", "a value is not a number, or the frame is fractional"),
    ("empty", "zero or negative width or height"),
    ("not_considered", "marked not to be considered"),
    ("class", "a class not in --classes"),
    ("visibility", "visibility below --min_visibility"),
    ("outside", "entirely outside the frame"),
    ("height", "shorter than --min_height inside the frame"),
    ("frame_missing", "its frame is missing from img1/"),
    ("stride", "within --frame_stride frames of the track's previous crop"),
    ("single", "its track has a single crop left"),
])


def _is_own_output(path):
    """An empty folder, or the manifest and the identity folders it lists,
    each holding as many crops as it says and nothing else."""
    names = set(os.listdir(path))
    if not names:
        return True
    with open(os.path.join(path, MANIFEST)) as f:
        identities = json.load(f)["identities"]
    if not names <= {MANIFEST, *identities}:
        return False
    for name in names - {MANIFEST}:
        folder = os.path.join(path, name)
        crops = os.listdir(folder)  # raises where it is not a folder
        if len(crops) != identities[name] or not all(
                CROP_NAME.fullmatch(c) and not os.path.islink(os.path.join(
                    folder, c)) and os.path.isfile(os.path.join(folder, c))
                for c in crops):
            return False
    return True


# a crop's name: its frame
CROP_NAME = re.compile(r"\d{6,}\.jpg")
OUTPUT = files.Kind("an empty folder or crops written by this command "
                    f"(identity folders of its crops alone, and its "
                    f"{MANIFEST})", _is_own_output, is_dir=True)


def select_boxes(rows, frame_shape, frame_exists, classes=DEFAULTS["classes"],
                 min_visibility=DEFAULTS["min_visibility"],
                 min_height=DEFAULTS["min_height"],
                 frame_stride=DEFAULTS["frame_stride"]):
    """Which ground-truth boxes become crops.

    Parameters
    ----------
    rows : ndarray (N, >= 9)
        ``gt.txt``'s rows (see :data:`mot_sequences.GT_COLUMNS`).
    frame_shape : (height, width, ...)
    frame_exists : callable
        ``frame_exists(frame number)``: whether ``img1/`` has the frame.
    classes : tuple of int or None
        None keeps every class.

    Returns
    -------
    (crops, counts)
        ``crops``: ``(track id, frame, (left, top, right, bottom))`` of
        every kept box, the pixel rectangle clipped to the frame;
        ``counts``: boxes dropped for each of :data:`REASONS`.
    """
    rows = np.asarray(rows, np.float64)
    counts = dict.fromkeys(REASONS, 0)
    candidates = collections.defaultdict(list)  # track -> [(frame, box)]
    for row in rows:
        frame, track, left, top, box_w, box_h, considered, label, \
            visibility = row[:NUM_COLUMNS]
        box = None
        if not np.all(np.isfinite(row[:NUM_COLUMNS])) or frame != int(frame):
            reason = "not_a_number"
        elif box_w <= 0 or box_h <= 0:
            reason = "empty"
        elif considered == 0:
            reason = "not_considered"
        elif classes is not None and int(label) not in classes:
            reason = "class"
        elif visibility < min_visibility:
            reason = "visibility"
        else:
            box = clip_box((left, top, box_w, box_h), frame_shape)
            if box is None:
                reason = "outside"
            elif box[3] - box[1] < min_height:
                reason = "height"
            elif not frame_exists(int(frame)):
                reason = "frame_missing"
            else:
                reason = None
        if reason:
            counts[reason] += 1
        else:
            candidates[int(track)].append((int(frame), box))
    crops = []
    for track in sorted(candidates):
        kept, last = [], None
        # by frame; rows of one frame in file order
        for frame, box in sorted(candidates[track], key=lambda c: c[0]):
            if last is not None and frame - last < frame_stride:
                counts["stride"] += 1
                continue
            kept.append((track, frame, box))
            last = frame
        if len(kept) < 2:
            counts["single"] += len(kept)
        else:
            crops.extend(kept)
    return crops, counts


def clip_box(box, frame_shape):
    """The pixel rectangle ``(left, top, right, bottom)`` of a box
    ``(left, top, width, height)`` clipped to the frame, or None where
    nothing of it is inside."""
    height, width = frame_shape[:2]
    left, top, box_w, box_h = box
    clipped = (max(0, round(left)), max(0, round(top)),
               min(width, round(left + box_w)),
               min(height, round(top + box_h)))
    if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
        return None
    return clipped


def _check_rows(sequence):
    rows = sequence.ground_truth
    if rows is None:
        raise UsageError(f"sequence {sequence.name}: no gt/gt.txt; the "
                         "crops are cut from the ground truth")
    return rows


def write_crops(sequence, crops, output_dir, progress_secs=10.0):
    """Cut ``crops`` (``(track, frame, (left, top, right, bottom))``)
    from the sequence's frames into ``output_dir/<sequence>_<track>/``,
    each frame read once."""
    by_frame = collections.defaultdict(list)
    for track, frame, box in crops:
        by_frame[frame].append((track, box))
    logging.info("%s: cutting %d crops from %d frames", sequence.name,
                 len(crops), len(by_frame))
    start = last = time.time()
    for n, (frame, image) in enumerate(sequence.frames(by_frame)):
        image = Image.fromarray(image[..., ::-1])  # BGR to RGB
        for track, box in by_frame[frame]:
            folder = os.path.join(output_dir, identity_name(sequence.name,
                                                            track))
            os.makedirs(folder, exist_ok=True)
            image.crop(box).save(os.path.join(folder, f"{frame:06d}.jpg"),
                                 quality=files.JPEG_QUALITY)
        if time.time() - last >= progress_secs:
            last = time.time()
            logging.info("%s: cut frame %d/%d (%.1f frames/s)",
                         sequence.name, n + 1, len(by_frame),
                         (n + 1) / (last - start))


def _remembered(predicate):
    """``predicate`` asked once per value; its ``answers`` attribute maps
    each value asked to the answer."""
    answers = {}

    def remembered(value):
        if value not in answers:
            answers[value] = predicate(value)
        return answers[value]

    remembered.answers = answers
    return remembered


def identity_name(sequence_name, track):
    """The folder of a track: ``<sequence>_<track id>``."""
    return f"{sequence_name}_{track}"


def convert(sequence_folders, output_dir, **filters):
    """Cut the kept boxes of the sequences into ``output_dir`` (see the
    module's docstring); ``filters`` are :func:`select_boxes`' keywords.

    Returns
    -------
    dict
        The manifest: ``sources``, ``filters``, ``counts`` (``kept`` and
        each of :data:`REASONS`, over every sequence), ``identities``
        (folder name -> number of crops).
    """
    filters = {**DEFAULTS, **filters}
    check_filters(**filters)
    files.check_output(output_dir, OUTPUT)  # before reading anything
    # only img1/ and gt/gt.txt are read: det/ may be absent, or list
    # frames that were not kept
    sequences = [mot_sequences.read_sequence(f, detections=False)
                 for f in sequence_folders]
    mot_sequences.check_distinct(
        sequences, "sequence_folders", sequence_folders)
    manifest = {"sources": [], "filters": {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in filters.items()},
        "counts": dict.fromkeys(["kept", *REASONS], 0), "identities": {}}
    selected = []
    for sequence in sequences:
        rows = _check_rows(sequence)
        has_frame = _remembered(sequence.has_frame)  # a file looked up once
        crops, counts = select_boxes(rows, sequence.image_shape, has_frame,
                                     **filters)
        missing = sorted(f for f, there in has_frame.answers.items()
                         if not there)
        if missing:
            logging.warning(
                "%s: %d frames of gt/gt.txt are missing from img1/ (e.g. "
                "frame %d): their %d boxes are skipped", sequence.name,
                len(missing), missing[0], counts["frame_missing"])
        selected.append((sequence, crops))
        tracks = collections.Counter(track for track, _, _ in crops)
        manifest["sources"].append({
            "sequence": sequence.name, "path": os.path.abspath(sequence.path),
            "boxes": len(rows), "kept": len(crops),
            "identities": len(tracks), "missing_frames": len(missing),
            "dropped": counts})
        manifest["counts"]["kept"] += len(crops)
        for reason, count in counts.items():
            manifest["counts"][reason] += count
        for track, count in sorted(tracks.items()):
            manifest["identities"][identity_name(sequence.name, track)] = \
                count
    if not manifest["identities"]:
        raise UsageError(
            "no track has two crops left after the filters ("
            + _dropped_text(manifest["counts"]) + "); loosen the filters "
            "classes, min_visibility, min_height or frame_stride")

    def write(tmp):
        for sequence, crops in selected:
            write_crops(sequence, crops, tmp)
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)

    files.replace_dir_atomically(output_dir, write, OUTPUT)
    return manifest


def _dropped_text(counts):
    return ", ".join(f"{counts[r]} {text}" for r, text in REASONS.items()
                     if counts[r]) or "none dropped"


def check_filters(min_visibility, min_height, frame_stride, classes=None):
    """ArgumentError naming a filter value out of its range."""
    if not math.isfinite(min_visibility) or not 0 <= min_visibility <= 1:
        raise ArgumentError("min_visibility", min_visibility,
                            "expected a fraction from 0 to 1")
    if min_height < 0:
        raise ArgumentError("min_height", min_height,
                            "expected 0 or more pixels")
    if frame_stride < 1:
        raise ArgumentError("frame_stride", frame_stride,
                            "expected at least 1 (every frame)")
    mot_sequences.check_classes(classes)


if __name__ == "__main__":  # the command: mot_command.py
    from cosine_metric_learning.datasets import mot_command
    mot_command.run_command()
