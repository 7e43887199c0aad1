"""MOTChallenge sequences: reading them.

A sequence folder holds ``seqinfo.ini``, ``img1/`` (the frames),
``det/det.txt`` (detections) and ``gt/gt.txt`` (ground truth), in the
layout of MOT16, MOT17 and MOT20 (or ``img1/`` and ``gt/gt.txt`` alone,
as annotation tools export MOT 1.1; 2D MOT 2015's ``gt.txt`` as it
comes). :func:`find_sequences` finds them, :func:`read_sequence` reads
one and checks its files, :meth:`Sequence.frames` decodes its frames as
the box encoder takes them; :mod:`tracking` tracks them.

A sequence's frames are the images of ``img1/``, or a video file that
``seqinfo.ini`` names (``video=``, with ``videoStart=``, the video frame
of the sequence's frame 1; :mod:`datasets.video` writes such folders):
its frames are decoded by OpenCV as they are needed, in order, one at a
time, never stored as images.
"""

import configparser
import dataclasses
import os
import warnings
from typing import Optional

import numpy as np
from absl import logging

from cosine_metric_learning import files, frame_io
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import first_line

# the optional dependencies of sequences: OpenCV (videos), the tracker
# and TrackEval
INSTALL_HINT = frame_io.INSTALL_HINT
LAYOUT = ("a MOTChallenge sequence folder: seqinfo.ini, img1/, det/det.txt "
          "and gt/gt.txt")
# MOT17's pedestrian class, the class scored and cut by default; gt.txt's
# columns
PEDESTRIAN = 1
PEDESTRIANS = (PEDESTRIAN,)
GT_COLUMNS = ("frame, id, left, top, width, height, considered, class, "
              "visibility")
NUM_GT_COLUMNS = 9
# seqinfo.ini's keys of a sequence whose frames are a video's
VIDEO_KEY = "video"
VIDEO_START_KEY = "videoStart"
# seqinfo.ini's key of the last frame the ground truth annotates, where it
# ends before the sequence (the frames after it are not scored)
GT_LAST_FRAME_KEY = "gtLastFrame"
# a gt.txt without it whose last row leaves more than this share of the
# frames after it gets a warning (a few last frames without people are
# common in fully annotated sequences)
GT_TAIL_SHARE = 0.1
# 2D MOT 2015's gt.txt: frame, id, left, top, width, height, considered
# and world coordinates x, y, z; no class and no visibility. It is read as
# TrackEval's MOT15 benchmark reads it: every box a pedestrian (and, for
# the converter's visibility filter, fully visible)
MOT15_GT_COLUMNS = 10
DET_COLUMNS = "frame, id, left, top, width, height, confidence, ..."


@dataclasses.dataclass
class Sequence:
    """One MOTChallenge sequence.

    ``detections`` and ``ground_truth`` are float arrays of their files'
    rows (``frame, id, left, top, width, height, confidence/considered,
    ...``); ``ground_truth`` is None where the sequence has no ``gt.txt``,
    and always in MOT17's 9 columns (``mot15``: its file is 2D MOT 2015's,
    read as :data:`MOT15_GT_COLUMNS` says).
    """
    name: str
    path: str
    num_frames: int
    image_shape: tuple  # (height, width, 3) of the frames
    frame_paths: list
    detections: np.ndarray
    ground_truth: Optional[np.ndarray]
    mot15: bool = False
    video: Optional[str] = None  # the frames' video file, if not img1/
    video_start: int = 1  # the video frame (from 1) of frame 1
    # the last frame the ground truth annotates (seqinfo.ini's gtLastFrame)
    gt_last_frame: Optional[int] = None

    @property
    def scored_frames(self):
        """The frames scored against the ground truth: 1 to this."""
        return min(self.gt_last_frame or self.num_frames, self.num_frames)

    def has_frame(self, frame):
        """Whether frame ``frame`` (1-based) is within the sequence and its
        file is in the frame folder (or the video holds it)."""
        if self.video is not None:
            return 1 <= frame <= self.num_frames
        return 1 <= frame <= self.num_frames and os.path.isfile(
            self.frame_paths[frame - 1])

    def frames(self, numbers):
        """``(number, frame)`` for each of the frame ``numbers`` in
        increasing order, each frame a uint8 BGR array (as Deep SORT's box
        encoder takes it) at its own size: read from its file
        (:func:`frame_io.read_frame`), or decoded from the video as the
        iteration reaches it."""
        numbers = sorted({int(n) for n in numbers})
        if self.video is None:
            for number in numbers:
                yield number, frame_io.read_frame(self.frame_paths[number - 1])
        else:
            yield from frame_io.video_frames(self.video, numbers,
                                             self.video_start)


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


def read_sequences(sequences, detections=True):
    """The :class:`Sequence` objects of ``sequences`` (the text of
    ``--sequences``, see :func:`find_sequences`; ``detections`` as
    :func:`read_sequence` takes it); a sequence given twice, or two named
    alike, is an ArgumentError: their results would share files."""
    folders = find_sequences(sequences)
    seen = {}
    for folder in folders:
        real = os.path.realpath(folder)
        if real in seen:
            raise ArgumentError("sequences", sequences, f"'{folder}' is "
                                f"given twice (as '{seen[real]}' too)")
        seen[real] = folder
    read = [read_sequence(f, detections) for f in folders]
    check_distinct(read, "sequences", sequences)
    return read


def check_distinct(sequences, argument, value):
    """ArgumentError (naming ``argument``) if two of the :class:`Sequence`
    objects have one name: their outputs would share files."""
    names = [s.name for s in sequences]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        paths = [s.path for s in sequences if s.name == repeated[0]]
        raise ArgumentError(argument, value, f"two sequences are named "
                            f"{repeated[0]} ('{paths[0]}' and '{paths[1]}'); "
                            "their outputs would share files")


def read_table(path, min_columns, what, columns):
    """The rows of a MOTChallenge text file (``what``, with at least
    ``min_columns`` columns named by ``columns``) as a float array;
    UsageError for text or too few columns."""
    try:
        with warnings.catch_warnings():  # an empty file is said below
            warnings.simplefilter("ignore", UserWarning)
            rows = np.loadtxt(path, delimiter=",", ndmin=2)
    except ValueError as e:
        raise UsageError(f"cannot read {what} '{path}': {e}") from e
    if rows.size and rows.shape[1] < min_columns:
        raise UsageError(f"{what} '{path}' has {rows.shape[1]} columns; "
                         f"expected {min_columns} ({columns}), as MOT16, "
                         "MOT17, MOT20 and MOT 1.1 write them")
    return rows if rows.size else np.zeros((0, min_columns))


def bad_row(rows, path, what, first_columns):
    """UsageError text for the first row whose ``first_columns`` numbers
    are not all finite or whose frame is not a whole number from 1, or
    None."""
    finite = np.all(np.isfinite(rows[:, :first_columns]), axis=1)
    numbers = rows[:, 0]
    whole = finite & (numbers >= 1) & (numbers == np.round(numbers))
    if np.all(whole):
        return None
    i = int(np.flatnonzero(~whole)[0])
    values = ",".join(f"{v:g}" for v in rows[i, :first_columns])
    problem = ("a number is missing or not finite" if not finite[i]
               else f"frame {numbers[i]:g} is not a frame number (1, 2, ...)")
    return f"{what} '{path}', row {i + 1} ({values}): {problem}"


def read_sequence(folder, detections=True):
    """The :class:`Sequence` in ``folder``; UsageError naming what is
    missing or malformed.

    The frames of ``img1/`` are the truth: where ``seqinfo.ini``'s frame
    size or length disagrees with them, a warning says so and the
    frames' are used. Without ``seqinfo.ini`` (MOT 1.1 as annotation
    tools export it: ``img1/`` and ``gt/gt.txt``), frame ``n`` is the
    n-th image of ``img1/`` in name order. ``det.txt``'s rows must be
    numbers with frames of ``img1/``; with ``detections`` False, ``det/``
    is not opened (it may be absent or list frames that ``img1/`` lacks)
    and the sequence's ``detections`` are None. ``gt.txt`` must have
    :data:`NUM_GT_COLUMNS` columns, or :data:`MOT15_GT_COLUMNS` (2D MOT
    2015's, read into MOT17's columns); :func:`check_ground_truth` checks
    its rows for scoring.
    """
    gt_last = None
    if os.path.isfile(os.path.join(folder, "seqinfo.ini")) or not \
            is_sequence(folder):
        name, num_frames, image_shape, frame_paths, video, start, gt_last = \
            _read_sequence_info(folder)
    else:
        name, num_frames, image_shape, frame_paths = _list_frames(folder)
        video, start = None, 1
    sequence = Sequence(name, folder, num_frames, image_shape, frame_paths,
                        None, None, video=video, video_start=start,
                        gt_last_frame=gt_last)
    if detections:
        det_path = os.path.join(folder, "det", "det.txt")
        if not os.path.isfile(det_path):
            raise UsageError(f"sequence {name}: no '{det_path}'; expected "
                             f"its detections there ({DET_COLUMNS}, one "
                             "box a line)")
        sequence.detections = read_table(
            det_path, 7, "detection file", DET_COLUMNS)
        bad = bad_row(sequence.detections, det_path, "detection file", 7)
        if bad:
            raise UsageError(f"sequence {name}: {bad}")
        _check_frames(sequence, sequence.detections, det_path)
    gt_path = os.path.join(folder, "gt", "gt.txt")
    if os.path.isfile(gt_path):
        rows = read_table(gt_path, NUM_GT_COLUMNS, "ground-truth file",
                          GT_COLUMNS)
        if rows.shape[1] == MOT15_GT_COLUMNS:
            ones = np.ones((len(rows), 1))
            rows = np.hstack([rows[:, :7], ones, ones])
            sequence.mot15 = True
            logging.info("%s: %s has 2D MOT 2015's 10 columns: every box "
                         "is a pedestrian, the 7th column says whether it "
                         "is considered", name, gt_path)
        sequence.ground_truth = rows
        last = int(np.max(rows[:, 0])) if len(rows) else num_frames
        if gt_last is None and num_frames - last > \
                GT_TAIL_SHARE * num_frames and not _said(folder):
            logging.warning(
                "%s: %s ends at frame %d of %d: the frames after it are "
                "scored as frames without people; if they are not annotated, "
                "add %s=%d to seqinfo.ini's [Sequence]", name, gt_path,
                last, num_frames, GT_LAST_FRAME_KEY, last)
    return sequence


_SAID = set()


def _said(key):
    """Whether a once-per-process note about ``key`` was given already
    (and remember it now)."""
    said = key in _SAID
    _SAID.add(key)
    return said


def _check_frames(sequence, rows, path):
    """UsageError naming the frames the rows of ``path`` list that the
    sequence's frame folder (or video) lacks."""
    missing = sorted(f for f in {int(f) for f in rows[:, 0]}
                     if not sequence.has_frame(f))
    if missing:
        where = (sequence.video if sequence.video is not None
                 else os.path.dirname(sequence.frame_paths[0]))
        raise UsageError(
            f"sequence {sequence.name}: {len(missing)} frames listed in "
            f"'{path}' are missing from '{where}' (e.g. frame "
            f"{missing[0]}; its frames are 1 to {sequence.num_frames})")


def check_ground_truth(sequence, classes=PEDESTRIANS):
    """UsageError (one line) unless the sequence's ``gt.txt`` can be
    scored: every row numbers, every frame one of ``img1/``, and a box of
    ``classes`` (None: every class) marked to be considered. A sequence
    without ``gt.txt`` passes (it is not scored)."""
    rows = sequence.ground_truth
    if rows is None:
        return
    path = os.path.join(sequence.path, "gt", "gt.txt")
    if not len(rows):
        raise UsageError(f"sequence {sequence.name}: '{path}' is empty; "
                         "there is nothing to score")
    bad = bad_row(rows, path, "ground-truth file", NUM_GT_COLUMNS)
    if bad:
        raise UsageError(f"sequence {sequence.name}: {bad}")
    _check_frames(sequence, rows, path)
    twice = duplicate_identity(rows)
    if twice:
        raise UsageError(f"sequence {sequence.name}: '{path}', {twice}")
    if not np.any(considered(rows, classes)):
        found = ", ".join(f"{c:g}" for c in np.unique(rows[:, 7])[:10])
        raise ArgumentError(
            "classes", classes, f"sequence {sequence.name}: no box of these "
            f"classes is marked to be considered in '{path}' (its classes: "
            f"{found})")


def duplicate_identity(rows):
    """Text naming the first row whose identity already has a box in its
    frame (ground truth gives each person one box a frame; a detection
    file's ids are all -1), or None."""
    keys = rows[:, 0] * (2 ** 32) + rows[:, 1]
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    if np.all(counts == 1):
        return None
    i = int(np.setdiff1d(np.arange(len(rows)), first)[0])
    hint = (": a detection file, not ground truth?" if rows[i, 1] == -1
            else "")
    return (f"row {i + 1}: identity {rows[i, 1]:g} has two boxes in frame "
            f"{rows[i, 0]:g} (ground truth gives each person one box a "
            f"frame{hint})")


def _frame_number(path):
    """The frame number of a file of ``img1/`` named by it (``000042.jpg``),
    or None."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return int(stem) if stem.isdigit() else None


def frame_rate(sequence, default=25.0):
    """The sequence's frames per second (``seqinfo.ini``'s ``frameRate``),
    ``default`` where it has none."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(sequence.path, "seqinfo.ini"))
    try:
        rate = float(parser["Sequence"]["frameRate"])
    except (KeyError, ValueError):
        return default
    return rate if rate > 0 else default


def _read_sequence_info(folder):
    """Name, length, frame shape and frame paths from
    ``seqinfo.ini`` and the frames it names."""
    info_path = os.path.join(folder, "seqinfo.ini")
    info = configparser.ConfigParser()
    try:
        found = info.read(info_path)
    except configparser.Error as e:
        raise UsageError(f"cannot read '{info_path}': "
                         f"{first_line(e)}") from e
    if not found or "Sequence" not in info:
        raise UsageError(f"'{info_path}' is missing or has no [Sequence]; "
                         f"expected {LAYOUT}")
    section = info["Sequence"]
    name = section.get("name", os.path.basename(os.path.normpath(folder)))
    gt_last = _info_int(section, GT_LAST_FRAME_KEY, info_path, "the last "
                        "annotated frame") if GT_LAST_FRAME_KEY in section \
        else None
    if VIDEO_KEY in section:
        return (name, *_video_info(folder, info_path, section), gt_last)
    image_dir = os.path.join(folder, section.get("imDir", "img1"))
    if not os.path.isdir(image_dir):
        raise UsageError(f"sequence {name}: '{image_dir}' is not a folder; "
                         f"expected {LAYOUT}")
    extension = section.get("imExt", ".jpg")
    try:
        length = int(section["seqLength"])
    except (KeyError, ValueError):
        raise UsageError(f"'{info_path}' has no seqLength (the number of "
                         "frames)") from None
    try:
        size = (int(section["imHeight"]), int(section["imWidth"]), 3)
    except (KeyError, ValueError):
        raise UsageError(f"'{info_path}' has no imWidth and imHeight (the "
                         "frame size)") from None
    numbers = sorted(n for n in (
        _frame_number(f) for f in os.listdir(image_dir)
        if f.endswith(extension)) if n is not None and n >= 1)
    if not numbers:
        raise UsageError(f"sequence {name}: no frames in '{image_dir}' "
                         f"(expected 000001{extension}, 000002{extension}, "
                         "... as seqinfo.ini's imExt says)")
    num_frames = numbers[-1]
    frame_paths = [os.path.join(image_dir, f"{i:06d}{extension}")
                   for i in range(1, num_frames + 1)]
    image_shape = frame_io.frame_size(frame_paths[numbers[0] - 1])
    if (length, size) != (num_frames, image_shape):
        logging.warning(
            "%s: seqinfo.ini says %d frames of %dx%d, but %s holds frames "
            "up to %d of %dx%d: the frames' are used", name, length,
            size[1], size[0], image_dir, num_frames, image_shape[1],
            image_shape[0])
    return name, num_frames, image_shape, frame_paths, None, 1, gt_last


def _info_int(section, key, info_path, what, low=1):
    try:
        value = int(section[key])
    except (KeyError, ValueError):
        raise UsageError(f"'{info_path}' has no {key} ({what})") from None
    if value < low:
        raise UsageError(f"'{info_path}': {key}={value}; expected {what} "
                         f"of at least {low}")
    return value


def _video_info(folder, info_path, section):
    """Length, frame shape, no frame paths, the video and its start
    frame, of a sequence whose ``seqinfo.ini`` names a video."""
    video = os.path.join(folder, section[VIDEO_KEY])  # relative: to it
    length = _info_int(section, "seqLength", info_path, "the number of "
                       "frames")
    start = _info_int(section, VIDEO_START_KEY, info_path, "the video "
                      "frame of the sequence's frame 1") if \
        VIDEO_START_KEY in section else 1
    size = (_info_int(section, "imHeight", info_path, "the frame height"),
            _info_int(section, "imWidth", info_path, "the frame width"), 3)
    if not os.path.isfile(video):
        raise UsageError(f"'{info_path}' names the video '{video}', which "
                         "is not a file")
    cv2 = frame_io.require_opencv()
    capture = frame_io.open_video(video)
    shape = (int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
             int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), 3)
    capture.release()
    if shape != size:
        logging.warning("%s: seqinfo.ini says frames of %dx%d, but the "
                        "video '%s' holds %dx%d: the video's are used",
                        info_path, size[1], size[0], video, shape[1],
                        shape[0])
    return length, shape, [], video, start


def _list_frames(folder):
    """The same for a folder without ``seqinfo.ini``: the images of
    ``img1/`` in name order, the frame shape read from the first."""
    name = os.path.basename(os.path.normpath(folder))
    image_dir = os.path.join(folder, "img1")
    frame_paths = sorted(
        os.path.join(image_dir, n) for n in os.listdir(image_dir)
        if n.lower().endswith(files.IMAGE_EXTENSIONS))
    if not frame_paths:
        raise UsageError(f"sequence {name}: no images in '{image_dir}'; "
                         f"expected {LAYOUT}")
    shape = frame_io.frame_size(frame_paths[0])
    return name, len(frame_paths), shape, frame_paths


def considered(rows, classes=PEDESTRIANS):
    """Which ground-truth rows are scored: marked to be considered
    (column 7) and of one of ``classes`` (column 8; None: every class),
    as MOT17 scores its pedestrians."""
    keep = rows[:, 6] != 0
    if classes is not None:
        keep &= np.isin(rows[:, 7], classes)
    return keep


def parse_classes(text):
    """``--classes``: a tuple of class numbers, or None for ``all``."""
    if text.strip().lower() == "all":
        return None
    try:
        classes = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--classes={text}: expected comma-separated class "
                         "numbers (MOT17: 1 is a pedestrian) or all") \
            from None
    return classes


def check_classes(classes):
    """ArgumentError unless ``classes`` is a tuple of class numbers or
    None."""
    if classes is not None and (not classes or not all(
            isinstance(c, (int, np.integer)) for c in classes)):
        raise ArgumentError("classes", classes, "expected a tuple of class "
                            "numbers (MOT17: 1 is a pedestrian), or None "
                            "for every class")
