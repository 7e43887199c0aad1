"""Tracks drawn on a sequence's frames, and the moments the tracker
lost a person.

:func:`render` streams the frames (decoded one at a time, memory flat in
their number) and writes a video with each confirmed track's box, its id
and a short trail, coloured per track. With ground truth, the frames
where a person's track changes (an identity switch) or a person has no
track are marked, and :func:`moments` lists them: what ``track --render``
writes beside the video and the report page links to.

The video is VP8 in WebM, which OpenCV's wheels write and browsers play
(their FFmpeg has no H.264 encoder), else H.264 in MP4 where OpenCV's
FFmpeg has one, else Motion-JPEG in AVI.
"""

import collections
import contextlib
import json
import os
import sys
import tempfile

import numpy as np
from absl import logging
from scipy.optimize import linear_sum_assignment

from cosine_metric_learning import files, frame_io, mot_sequences

# (fourcc, extension), the first OpenCV can write is used
# (VP8 first: browsers play it, and OpenCV's wheels write it)
CODECS = (("VP80", ".webm"), ("avc1", ".mp4"), ("MJPG", ".avi"))
# centres of a track's last boxes drawn as its trail
TRAIL = 12
# a tracked box is a person's where their overlap is at least this
MATCH_IOU = 0.5
SWITCH, MISSED = "switch", "missed"
MOMENTS = files.json_kind({"sequence", "frame_rate", "moments"},
                          "the moments of a rendered sequence (a JSON "
                          "object with 'sequence', 'frame_rate' and "
                          "'moments')")

_CODEC = []


@contextlib.contextmanager
def _quiet_stderr():
    """OpenCV's FFmpeg writer says on stderr that WebM stores VP8 under
    another tag than its fourcc, and then writes it: not a user's
    concern."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _writer(cv2, path, fourcc, rate, size):
    with _quiet_stderr():
        return cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), rate,
                               size)


def codec():
    """``(fourcc, extension)`` of the first codec of :data:`CODECS` this
    OpenCV writes (probed once, on a tiny file)."""
    if not _CODEC:
        cv2 = frame_io.require_opencv("drawing tracks on a video")
        with tempfile.TemporaryDirectory() as tmp:
            for fourcc, extension in CODECS:
                path = os.path.join(tmp, "probe" + extension)
                writer = _writer(cv2, path, fourcc, 7.0, (64, 64))
                ok = writer.isOpened()
                if ok:
                    writer.write(np.zeros((64, 64, 3), np.uint8))
                writer.release()
                if ok and os.path.getsize(path) > 0:
                    _CODEC.append((fourcc, extension))
                    break
        if not _CODEC:
            raise RuntimeError("OpenCV writes none of the video codecs "
                               f"{', '.join(c for c, _ in CODECS)}")
    return _CODEC[0]


def colour(track_id):
    """A BGR colour of its own for each track id (hues a golden angle
    apart)."""
    import colorsys
    hue = (int(track_id) * 0.618033988749895) % 1.0
    r, g, b = colorsys.hsv_to_rgb(hue, 0.85, 1.0)
    return int(255 * b), int(255 * g), int(255 * r)


def _iou(a, b):
    """IoU of ``(N, 4)`` and ``(M, 4)`` boxes ``(left, top, width,
    height)``."""
    inter = frame_io.box_intersections(a, b)
    area_a = a[:, 2] * a[:, 3]
    area_b = b[:, 2] * b[:, 3]
    return inter / np.maximum(area_a[:, None] + area_b[None] - inter, 1e-9)


def correspondence(results, ground_truth, num_frames):
    """``{person: [(frame, track or None), ...]}``: the track each person
    of ``ground_truth`` (rows ``(frame, person, left, top, width, height,
    ...)`` of the people to score) has in each frame they are in, None
    where none; ``results``: rows ``(frame, track, left, top, width,
    height)``. A person's box and a track's are matched in each frame by
    overlap (IoU :data:`MATCH_IOU` or more): a person keeps the last
    frame's track where it still overlaps, as CLEAR MOT matches, the
    others as many as possible."""
    results = np.asarray(results, np.float64).reshape(-1, 6)
    ground_truth = np.asarray(ground_truth, np.float64).reshape(
        -1, max(6, np.shape(ground_truth)[-1] if np.size(ground_truth)
                else 6))
    last, found = {}, collections.defaultdict(list)
    for frame in range(1, num_frames + 1):
        truth = ground_truth[ground_truth[:, 0] == frame]
        tracked = results[results[:, 0] == frame]
        people = [int(p) for p in truth[:, 1]]
        matched = {}
        if len(truth) and len(tracked):
            overlap = _iou(truth[:, 2:6], tracked[:, 2:6])
            tracks = [int(t) for t in tracked[:, 1]]
            for r, person in enumerate(people):
                if last.get(person) in tracks:
                    c = tracks.index(last[person])
                    if overlap[r, c] >= MATCH_IOU:
                        matched[person] = last[person]
            free_r = [r for r, p in enumerate(people) if p not in matched]
            taken = set(matched.values())
            free_c = [c for c, t in enumerate(tracks) if t not in taken]
            if free_r and free_c:
                sub = overlap[np.ix_(free_r, free_c)]
                rows, cols = linear_sum_assignment(-sub)
                matched.update({people[free_r[r]]: tracks[free_c[c]]
                                for r, c in zip(rows, cols)
                                if sub[r, c] >= MATCH_IOU})
        for person in people:
            found[person].append((frame, matched.get(person)))
            if person in matched:
                last[person] = matched[person]
    return dict(found)


def moments(results, ground_truth, num_frames, matched=None):
    """The frames where the tracker lost a person: ``[{"frame", "kind",
    "person", "track", "was"}]`` in frame order, ``kind`` :data:`SWITCH`
    (the person is matched to another track than the last one that had
    them: ``was``) or :data:`MISSED` (the first frame of a run of frames
    where the person has no track; ``track`` None); matched as
    :func:`correspondence` matches (``matched``: its result, where the
    caller has it)."""
    if matched is None:
        matched = correspondence(results, ground_truth, num_frames)
    found = []
    for person, frames in matched.items():
        last, missing = None, False
        for frame, track in frames:
            if track is None:
                if not missing:
                    found.append({"frame": frame, "kind": MISSED,
                                  "person": person, "track": None,
                                  "was": last})
                missing = True
                continue
            missing = False
            if last is not None and track != last:
                found.append({"frame": frame, "kind": SWITCH,
                              "person": person, "track": track,
                              "was": last})
            last = track
    return sorted(found, key=lambda m: (m["frame"], m["person"]))


def timelines(results, ground_truth, num_frames, matched=None):
    """``{person: [[first, last, track or None], ...]}``: each person's
    frames in runs of one track (None: no track), as the report draws
    them (``matched``: :func:`correspondence`'s result, where the caller
    has it)."""
    if matched is None:
        matched = correspondence(results, ground_truth, num_frames)
    spans = {}
    for person, frames in matched.items():
        runs = []
        for frame, track in frames:
            if runs and runs[-1][2] == track and runs[-1][1] == frame - 1:
                runs[-1][1] = frame
            else:
                runs.append([frame, frame, track])
        spans[person] = runs
    return spans


def render(sequence, results, path, ground_truth=None, log=None,
           matched=None):
    """Write the frames of ``sequence`` with the tracks ``results`` (rows
    ``(frame, track, left, top, width, height)``) drawn on them to the
    video ``path`` (its extension :func:`codec`'s), at the sequence's
    frame rate; with ``ground_truth`` (rows of the people scored) the
    moments of :func:`moments` are marked on their frames (and their
    people's boxes drawn dashed where they have no track; ``matched``:
    :func:`correspondence`'s result, where the caller has it). Returns the
    moments (empty without ground truth)."""
    cv2 = frame_io.require_opencv("drawing tracks on a video")
    results = np.asarray(results, np.float64).reshape(-1, 6)
    found = ([] if ground_truth is None else
             moments(results, ground_truth, sequence.num_frames, matched))
    at = collections.defaultdict(list)
    for moment in found:
        at[moment["frame"]].append(moment)
    height, width = sequence.image_shape[:2]
    fourcc, _ = codec()
    writer = _writer(cv2, path, fourcc, mot_sequences.frame_rate(sequence),
                     (width, height))
    if not writer.isOpened():
        raise OSError(f"OpenCV cannot write the video '{path}'")
    trails = {}
    try:
        for number, frame in sequence.frames(range(1, sequence.num_frames
                                                   + 1)):
            frame = np.ascontiguousarray(frame)
            here = results[results[:, 0] == number]
            for row in here:
                track = int(row[1])
                left, top, w, h = (int(round(v)) for v in row[2:6])
                trail = trails.setdefault(track, collections.deque(
                    maxlen=TRAIL))
                trail.append((left + w // 2, top + h))
                bgr = colour(track)
                cv2.rectangle(frame, (left, top), (left + w, top + h), bgr, 2)
                cv2.putText(frame, str(track), (left, max(top - 4, 12)),
                            cv2.FONT_HERSHEY_SIMPLEX, 0.6, bgr, 2)
                if len(trail) > 1:
                    cv2.polylines(frame, [np.array(trail, np.int32)], False,
                                  bgr, 2)
            # a track ended or missed here: its trail starts anew
            present = set(here[:, 1].astype(int).tolist())
            trails = {t: trail for t, trail in trails.items()
                      if t in present}
            if ground_truth is not None:
                _mark(cv2, frame, number, ground_truth, at.get(number, []))
            writer.write(frame)
            if log is not None and number % 100 == 0:
                log(f"{sequence.name}: drew {number}/{sequence.num_frames} "
                    "frames")
    finally:
        writer.release()
    return found


def _mark(cv2, frame, number, ground_truth, here):
    """The moments of this frame: a red border and a line each; the
    people missed drawn dashed."""
    for moment in here:
        if moment["kind"] == MISSED:
            box = ground_truth[(ground_truth[:, 0] == number)
                               & (ground_truth[:, 1] == moment["person"])]
            if len(box):
                left, top, w, h = (int(round(v)) for v in box[0, 2:6])
                for x in range(left, left + w, 8):
                    cv2.line(frame, (x, top), (min(x + 4, left + w), top),
                             (255, 255, 255), 2)
                    cv2.line(frame, (x, top + h),
                             (min(x + 4, left + w), top + h),
                             (255, 255, 255), 2)
    if here:
        cv2.rectangle(frame, (0, 0), (frame.shape[1] - 1,
                                      frame.shape[0] - 1), (0, 0, 255), 6)
        for k, moment in enumerate(here[:4]):
            cv2.putText(frame, describe(moment), (10, 28 + 24 * k),
                        cv2.FONT_HERSHEY_SIMPLEX, 0.7, (0, 0, 255), 2)


def describe(moment):
    """One line of a moment: ``person 3: track 7 -> 9`` or ``person 3:
    no track``."""
    if moment["kind"] == SWITCH:
        return (f"person {moment['person']}: track {moment['was']} -> "
                f"{moment['track']}")
    return f"person {moment['person']}: no track"


def write_moments(path, sequence, found):
    """The moments as JSON: each with its time in seconds."""
    rate = mot_sequences.frame_rate(sequence)
    listed = [{**m, "time": round((m["frame"] - 1) / rate, 3)}
              for m in found]
    with open(path, "w") as f:
        json.dump({"sequence": sequence.name, "frame_rate": rate,
                   "moments": listed}, f, indent=1)
    return listed


def draw(sequence, tracked, folder, written, classes):
    """``track --render``: the tracks drawn on the sequence's frames
    (``FOLDER/SEQUENCE`` and the video's extension) and, with ground truth
    (the rows of ``classes`` it scores), the moments the tracker lost a
    person (``FOLDER/SEQUENCE.moments.json``); the files through
    ``written(*parts)``, which gives the path to write; returns what the
    report page needs of them."""
    _, extension = codec()
    truth = None
    if sequence.ground_truth is not None:
        truth = sequence.ground_truth[mot_sequences.considered(
            sequence.ground_truth, classes)]
        truth = truth[truth[:, 0] <= sequence.scored_frames]
    logging.info("%s: drawing the tracks of %s", sequence.name, folder)
    # truth ends at the scored frames: one matching serves the whole video
    matched = (None if truth is None else
               correspondence(tracked, truth, sequence.num_frames))
    found = render(sequence, tracked, written(
        folder, sequence.name + extension), truth, matched=matched)
    one = {"video": f"{folder}/{sequence.name}{extension}",
           "num_frames": sequence.num_frames,
           "frame_rate": mot_sequences.frame_rate(sequence),
           "moments": [], "timelines": {}}
    if truth is not None:
        one["moments"] = write_moments(
            written(folder, f"{sequence.name}.moments.json"), sequence,
            found)
        one["timelines"] = timelines(tracked, truth, sequence.num_frames,
                                     matched)
    return one
