"""A video file and its detections as a MOTChallenge sequence folder.

    python -m cosine_metric_learning.datasets.video --video=vtest.avi \
        --detections=det.txt [--gt=gt.txt] --output_dir=./videos/PETS09-S2L1

writes ``seqinfo.ini`` (the video's frame size, its length counted by
decoding it, and its frame rate, or ``--frame_rate`` where the header is
wrong), ``det/det.txt`` and, given ``--gt``, ``gt/gt.txt``: a sequence
that every command taking ``--sequences`` reads (``track``, the tracklets,
``adapt``, the converter). The frames stay in the video: ``seqinfo.ini``
names it (``video=``, its absolute path), and the commands decode the
frames they need with OpenCV, in order, one at a time (an hour of 1080p
video never becomes 30 GB of JPEG files); ``--frames=jpg`` writes them to
``img1/`` instead, for tools that want the image folder. Video frame
``k`` (counting from 1) is the sequence's frame ``k``, or, with
``--first_frame=F`` (and ``--last_frame``), video frame ``F + k - 1``:
the files' rows in that range are renumbered from 1.

``--detections`` and ``--gt`` are MOTChallenge text files (``frame, id,
left, top, width, height, confidence`` or ``considered, ...``; ``--gt``
in MOT16/17/20's 9 columns or 2D MOT 2015's 10): a detector's output in
another layout becomes one by writing those columns, one box a line,
frames counted from 1 (YOLO's ``class cx cy w h conf`` per image, in
shares of the frame: ``left = (cx - w / 2) * width``, ``top = (cy - h /
2) * height``, ``width = w * width``, ``height = h * height``, the id
-1). Before anything is written, the video is decoded once to count its
frames (a progress line now and then) and the files are checked: a video
OpenCV cannot decode, a row that is not numbers, a frame past the
video's end, or a box that lies outside the frame or has no area is one
line, and nothing is written, as is a ground truth that gives one
identity two boxes in a frame (a ``det.txt`` passed as ``--gt``). The
folder is written whole (missing parent folders are created), and
replaces only an earlier output of this command to which nothing was
added.

A ground truth that ends before the sequence (annotations of frames 1 to
400 of a longer video) is recorded as such (``seqinfo.ini``'s
``gtLastFrame``, its last row's frame or ``--gt_last_frame``): the
tracking evaluation scores those frames only, and says so. One with no
row in the sequence's frames writes no ``gt/gt.txt`` (the sequence is
tracked unscored), with a line saying so.
"""

if __name__ == "__main__":  # Ctrl-C while the imports load: one line
    from cosine_metric_learning import errors as _errors
    _errors.quiet_ctrl_c_while_starting()

import configparser
import dataclasses
import math
import os
import time
from typing import Optional

import numpy as np
from absl import app, logging

from cosine_metric_learning import commands, files, frame_io, mot_sequences
from cosine_metric_learning.commands import one_of, setting
from cosine_metric_learning.errors import ArgumentError, UsageError
from cosine_metric_learning.errors import parse_flags

FRAMES = ("video", "jpg")
# marks the seqinfo.ini this command writes, and records whether it wrote
# gt/gt.txt
WRITER = "cosine_metric_learning.datasets.video"
GT_KEY = "gtWritten"
# the detector that found the boxes of det/det.txt, where one did
DETECTOR_KEY = "detector"


def _written(info):
    """``{folder or file: the names in it it wrote}`` of an output whose
    ``seqinfo.ini`` section is ``info``."""
    written = {"seqinfo.ini": None, "det": {"det.txt"}}
    if info.get(GT_KEY) == "yes":
        written["gt"] = {"gt.txt"}
    if info.get("imDir") == "img1":
        written["img1"] = None  # its frames: checked by name
    return written


def _is_own_output(path):
    """An empty folder, or a sequence folder written by this command and
    holding nothing else: a file added there since (a hand-made
    ``gt/gt.txt``, notes, results) makes it the user's."""
    if not os.listdir(path):
        return True
    info = configparser.ConfigParser()
    info.read(os.path.join(path, "seqinfo.ini"))
    if info.get("Sequence", "writtenBy", fallback=None) != WRITER:
        return False
    written = _written(info["Sequence"])
    for name in os.listdir(path):
        if name not in written:
            return False
        inside = written[name]
        full = os.path.join(path, name)
        if name == "img1":
            if not os.path.isdir(full) or not all(
                    f.endswith(".jpg") and f[:-4].isdigit()
                    for f in os.listdir(full)):
                return False
        elif inside is not None and (not os.path.isdir(full) or set(
                os.listdir(full)) - inside):
            return False
    return True


OUTPUT = files.Kind("an empty folder or a sequence folder written by this "
                    f"command (its seqinfo.ini says writtenBy={WRITER}) with "
                    "nothing added to it", _is_own_output, is_dir=True)


def count_frames(path, progress_secs=10.0):
    """``(frames, (height, width, 3), frames per second, frames the header
    promises)`` of a video, its frames counted by decoding every one
    (headers can be wrong); a progress line now and then."""
    cv2 = frame_io.require_opencv()
    capture = frame_io.open_video(path)
    try:
        fps = capture.get(cv2.CAP_PROP_FPS)
        header = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        count, shape = 0, None
        start = last = time.time()
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            count += 1
            shape = shape or frame.shape
            if time.time() - last >= progress_secs:
                last = time.time()
                logging.info("%s: decoded %d of about %d frames (%.0f "
                             "frames/s)", path, count, header,
                             count / (last - start))
    finally:
        capture.release()
    if not count:
        raise UsageError(f"cannot decode the video '{path}': OpenCV opens "
                         "it but decodes no frame")
    if header > count:
        logging.warning("%s: its header promises %d frames but %d decode: "
                        "the file is truncated", path, header, count)
    return count, tuple(int(d) for d in shape), fps, header


def read_rows(path, argument, min_columns, what, columns, count, shape,
              first=1, last=None, header=None, one_box_an_identity=False):
    """The rows of a MOTChallenge text file of the frames ``first`` to
    ``last`` (default: ``count``) of a video of ``count`` frames of
    ``shape``, renumbered from 1; UsageError for a row that is not
    numbers, ArgumentError (naming ``argument``) for a frame past the
    video's end or a box outside the frame or without area (``header``:
    the frames the video's header promises, to tell a truncated file),
    and, with ``one_box_an_identity``, for an identity with two boxes in
    a frame."""
    if not os.path.isfile(path):
        raise ArgumentError(argument, path, "no such file")
    rows = mot_sequences.read_table(path, min_columns, what, columns)
    bad = mot_sequences.bad_row(rows, path, what, min_columns)
    if bad:
        raise UsageError(bad)
    height, width = shape[:2]
    index = np.arange(len(rows))
    if len(rows) and rows[:, 0].max() > count:
        i = int(index[rows[:, 0] > count][0])
        why = (f"the video file is truncated (its header promises {header} "
               f"frames, {count} decode)" if header and header > count else
               "the wrong video, or frames counted from 0?")
        raise ArgumentError(argument, path, f"row {i + 1} is of frame "
                            f"{rows[i, 0]:g}, past the video's last frame "
                            f"({count}); {why}")
    no_area = (rows[:, 4] <= 0) | (rows[:, 5] <= 0)
    outside = ((rows[:, 2] >= width) | (rows[:, 3] >= height)
               | (rows[:, 2] + rows[:, 4] <= 0)
               | (rows[:, 3] + rows[:, 5] <= 0))
    for wrong, problem in ((no_area, "has no area (width or height 0 or "
                            "less)"),
                           (outside, f"lies outside the {width}x{height} "
                            "frame (boxes are left, top, width, height in "
                            "pixels)")):
        if np.any(wrong):
            i = int(index[wrong][0])
            values = ",".join(f"{v:g}" for v in rows[i, 2:6])
            raise ArgumentError(argument, path, f"row {i + 1}'s box "
                                f"({values}) {problem}")
    twice = one_box_an_identity and mot_sequences.duplicate_identity(rows)
    if twice:
        raise ArgumentError(argument, path, twice)
    last = count if last is None else last
    rows = rows[(rows[:, 0] >= first) & (rows[:, 0] <= last)].copy()
    rows[:, 0] -= first - 1
    return rows


def check_name(name):
    """Refuse a sequence name that is not one folder name (``cam/01``):
    the commands write files named by it."""
    if name is not None and (not name or name in (".", "..") or any(
            sep in name for sep in ("/", "\\", os.sep))):
        raise ArgumentError("name", name, "expected a sequence name without "
                            "path separators (it names files and folders)")


def _write_rows(path, rows):
    os.makedirs(os.path.dirname(path))
    np.savetxt(path, rows, delimiter=",", fmt="%.10g")


def detect_rows(detector, video, first, last, log=logging.info,
                progress_secs=10.0):
    """``det.txt`` rows of the video frames ``first`` to ``last`` (the
    sequence's frames 1 to ``last - first + 1``) by ``detector`` (a
    :class:`detector.Detector`), with a progress line now and then."""
    rows, count = [], last - first + 1
    start = done = time.time()
    for number, frame in frame_io.video_frames(
            video, range(1, count + 1), first):
        for box in detector(frame):
            rows.append([number, -1, *box])
        if time.time() - done >= progress_secs or number == count:
            done = time.time()
            rate = number / max(done - start, 1e-9)
            log(f"detected frame {number}/{count} ({rate:.1f} frames/s, "
                f"{len(rows)} boxes)")
    return np.asarray(rows, float).reshape(-1, 7)


def write_sequence(video, detections, output_dir, gt=None, name=None,
                   frame_rate=None, frames="video", first_frame=1,
                   last_frame=None, gt_last_frame=None, log=logging.info,
                   detector=None,
                   detector_min_confidence=None):
    """Write the sequence folder of the module's docstring; returns its
    ``seqinfo.ini`` values. ``gt_last_frame``: the last video frame the
    ground truth annotates (default: its last row's); where it ends
    before the sequence, ``seqinfo.ini`` records it and only the frames
    up to it are scored. ``log`` gets a line on what the ground truth
    covers. ``detector`` (an OpenVINO IR, :mod:`detector`; instead of
    ``detections``) finds the boxes in the frames, keeping those of
    ``detector_min_confidence`` and above."""
    if (detections is None) == (detector is None):
        raise ArgumentError("detections", detections, "expected a "
                            "detections file or a detector, one of them")
    if detector_min_confidence is not None and detector is None:
        raise ArgumentError("detector_min_confidence",
                            detector_min_confidence, "without a detector")
    if frames not in FRAMES:
        raise ArgumentError("frames", frames,
                            f"expected one of {', '.join(FRAMES)}")
    if frame_rate is not None and not (math.isfinite(frame_rate)
                                       and frame_rate > 0):
        raise ArgumentError("frame_rate", frame_rate, "expected frames per "
                            "second above 0")
    if first_frame < 1:
        raise ArgumentError("first_frame", first_frame,
                            "expected a video frame from 1")
    check_name(name)
    if gt_last_frame is not None and gt is None:
        raise ArgumentError("gt_last_frame", gt_last_frame, "without a "
                            "ground truth (gt) to annotate frames")
    if not os.path.isfile(video):
        raise ArgumentError("video", video, "no such file")
    files.check_output(output_dir, OUTPUT)  # before decoding the video
    if detector is not None:  # loaded before the work
        from cosine_metric_learning import detector as detector_lib
        if not os.path.isfile(detector):
            raise ArgumentError("detector", detector, "no such file")
        detector = detector_lib.Detector(
            detector, detector_lib.DEFAULT_MIN_CONFIDENCE
            if detector_min_confidence is None else detector_min_confidence,
            argument="detector")
    count, shape, fps, header = count_frames(video)
    last = count if last_frame is None else last_frame
    truncated = (f"; its header promises {header}: the file is truncated"
                 if header > count else "")
    if first_frame > count:
        raise ArgumentError("first_frame", first_frame, f"the video has "
                            f"{count} frames{truncated}")
    if not first_frame <= last <= count:
        raise ArgumentError(
            "last_frame" if last_frame is not None else "first_frame",
            last_frame if last_frame is not None else first_frame,
            f"expected frames {first_frame} to {count} of the video (it "
            f"has {count}{truncated})")
    det_rows = None if detections is None else read_rows(
        detections, "detections", 7, "detection file",
        mot_sequences.DET_COLUMNS, count, shape, first_frame, last, header)
    gt_rows = None if gt is None else read_rows(
        gt, "gt", mot_sequences.NUM_GT_COLUMNS, "ground-truth file",
        mot_sequences.GT_COLUMNS, count, shape, first_frame, last, header,
        one_box_an_identity=True)
    length = last - first_frame + 1
    gt_last = None
    if gt_rows is not None:
        if gt_last_frame is not None and not (
                first_frame <= gt_last_frame <= last):
            raise ArgumentError("gt_last_frame", gt_last_frame, "expected a "
                                f"video frame of the sequence ({first_frame} "
                                f"to {last})")
        if not len(gt_rows):
            log(f"the ground truth {gt} has no row in video frames "
                f"{first_frame}-{last}: no gt/gt.txt written, the sequence "
                "is tracked unscored")
            gt_rows = None
        else:
            gt_last = (gt_last_frame - first_frame + 1 if gt_last_frame
                       else int(np.max(gt_rows[:, 0])))
            if np.max(gt_rows[:, 0]) > gt_last:
                raise ArgumentError("gt_last_frame", gt_last_frame,
                                    "the ground truth has rows after it")
            log(f"the ground truth annotates frames 1-{gt_last} of the "
                f"sequence's {length}" + (
                    f": only those are scored (seqinfo.ini's "
                    f"{mot_sequences.GT_LAST_FRAME_KEY}={gt_last}; "
                    "--gt_last_frame if it annotates later frames without "
                    "people)" if gt_last < length else ""))
    if frame_rate is None:
        if not (math.isfinite(fps) and fps > 0):
            raise ArgumentError("frame_rate", frame_rate, f"the video "
                                f"'{video}' states no frame rate; give it")
        frame_rate = fps
    name = name or os.path.basename(os.path.normpath(output_dir))
    info = {"name": name, "frameRate": f"{frame_rate:g}",
            "seqLength": str(length),
            "imWidth": str(shape[1]), "imHeight": str(shape[0]),
            "writtenBy": WRITER}
    if detector is not None:  # the last check passed: now the work
        det_rows = detect_rows(detector, video, first_frame, last, log)
        info.update({DETECTOR_KEY: os.path.abspath(detector.path),
                     "detectorMinConfidence": f"{detector.min_confidence:g}"})
    if gt_rows is not None:
        info[GT_KEY] = "yes"
        if gt_last < length:
            info[mot_sequences.GT_LAST_FRAME_KEY] = str(gt_last)
    if frames == "video":
        info[mot_sequences.VIDEO_KEY] = os.path.abspath(video)
        info[mot_sequences.VIDEO_START_KEY] = str(first_frame)
    else:
        info.update(imDir="img1", imExt=".jpg")

    def write(tmp):
        parser = configparser.ConfigParser()
        parser.optionxform = str  # MOTChallenge's keys are camelCase
        parser["Sequence"] = info
        with open(os.path.join(tmp, "seqinfo.ini"), "w") as f:
            parser.write(f, space_around_delimiters=False)
        _write_rows(os.path.join(tmp, "det", "det.txt"), det_rows)
        if gt_rows is not None:
            _write_rows(os.path.join(tmp, "gt", "gt.txt"), gt_rows)
        if frames == "jpg":
            _write_jpegs(video, first_frame, last, os.path.join(tmp, "img1"))

    files.replace_dir_atomically(output_dir, write, OUTPUT,
                                 errors=(UsageError,))
    return info


def _write_jpegs(video, first, last, folder, progress_secs=10.0):
    cv2 = frame_io.require_opencv()
    os.makedirs(folder)
    count = last - first + 1
    start = done = time.time()
    for number, frame in frame_io.video_frames(
            video, range(1, count + 1), first):
        cv2.imwrite(os.path.join(folder, f"{number:06d}.jpg"), frame,
                    [cv2.IMWRITE_JPEG_QUALITY, files.JPEG_QUALITY])
        if time.time() - done >= progress_secs:
            done = time.time()
            logging.info("wrote %d/%d frames (%.0f frames/s)", number,
                         count, number / (done - start))


def main(argv):
    def run():
        config = commands.values(VideoConfig)
        info = write_sequence(
            config.video, config.detections, config.output_dir, config.gt,
            config.name, config.frame_rate, config.frames, config.first_frame,
            config.last_frame, config.gt_last_frame, log=print,
            detector=config.detector,
            detector_min_confidence=config.detector_min_confidence)
        print(f"wrote {config.output_dir}: {info['name']}, "
              f"{info['seqLength']} frames of {info['imWidth']}x"
              f"{info['imHeight']} at {info['frameRate']} frames/s, "
              + ("frames decoded from " + info[mot_sequences.VIDEO_KEY]
                 if config.frames == "video" else "frames in img1/"))
        return 0

    return commands.run(argv, run, [VideoConfig])


@dataclasses.dataclass
class VideoConfig:
    """The flags of the command."""
    video: str = setting(None, "The video file (anything OpenCV decodes: "
                         ".avi, .mp4, .mkv, ...).", required=True)
    detections: Optional[str] = setting(
        None, "Its detections, as MOTChallenge's det.txt (frame from 1, -1, "
        "left, top, width, height, confidence); or --detector.")
    detector: Optional[str] = setting(
        None, "Instead of --detections: an OpenVINO IR of a pedestrian "
        "detector in Open Model Zoo's SSD layout "
        "(pedestrian-detection-adas-0002) to find the boxes in the frames.")
    detector_min_confidence: Optional[float] = setting(
        None, "--detector: the boxes kept, this confidence and above "
        "(default 0.3, as Deep SORT's application keeps).")
    gt: Optional[str] = setting(
        None, "Its ground truth, as MOTChallenge's gt.txt (9 columns, or 2D "
        "MOT 2015's 10), if any.")
    output_dir: str = setting(
        None, "The sequence folder to write (new, empty, or an earlier "
        "output).", required=True)
    name: Optional[str] = setting(
        None, "The sequence's name (default: the folder's).")
    frame_rate: Optional[float] = setting(
        None, "Frames per second, where the video's header is wrong "
        "(default: the header's).")
    frames: str = setting(
        "video", "video: the frames stay in the video, decoded when needed; "
        "jpg: also written to img1/.", one_of(FRAMES))
    first_frame: int = setting(
        1, "The video frame (from 1) that is the sequence's frame 1.")
    last_frame: Optional[int] = setting(
        None, "The video frame the sequence ends at (default: the video's "
        "last).")
    gt_last_frame: Optional[int] = setting(
        None, "The last video frame the ground truth annotates (default: "
        "its last row's); later frames are not scored.")


if __name__ == "__main__":
    commands.define([VideoConfig])
    app.run(main, flags_parser=parse_flags)
