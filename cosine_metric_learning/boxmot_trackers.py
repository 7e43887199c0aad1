"""Trackers with appearance that users run today, from BoxMOT, fed with
any model's precomputed features: ``track --tracker=botsort`` is BoxMOT
25's BoT-SORT with re-identification (its camera motion compensation on
the sequence's frames), ``--tracker=strongsort`` its StrongSORT (its
camera motion compensation too, its appearance gate mixed with motion
by ``mc_lambda``), each at its own defaults but for the appearance gate,
which is the model's gate in the tracker's terms
(:data:`gates.GATE_CONVENTIONS`: ``appearance_thresh`` and
``max_cos_dist`` are the cosine distance itself).

BoxMOT brings PyTorch, which must be loaded before TensorFlow in a
process (torchvision loaded after it crashes the process): the tracker
runs in a process of its own (this module as a command), which reads the
rows, the features and the sequence's frames and writes the result rows.
It needs BoxMOT installed (a virtualenv of its own, as ``make
test-consumers`` makes it); ``make test`` never installs PyTorch. ::

    python -m cosine_metric_learning.boxmot_trackers --sequence=SEQ \\
        --rows=rows.npy --features=features.npy --output=results.npy
"""

if __name__ == "__main__":  # PyTorch before anything loads TensorFlow
    import importlib
    importlib.import_module("torch")

import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
from absl import app

from cosine_metric_learning import commands
from cosine_metric_learning.errors import UsageError

BOTSORT = "botsort"
STRONGSORT = "strongsort"
INSTALL_HINT = ("pip install 'boxmot==25.*' in a virtualenv of its own (it "
                "brings PyTorch; make test-consumers makes one)")
# BoT-SORT's default appearance gate, as a cosine distance
APPEARANCE_THRESH = 0.25
# each tracker: BoxMOT's class, the setting that takes the gate (the
# cosine distance itself in both: gates.GATE_CONVENTIONS), its default
TRACKERS = {BOTSORT: ("BotSort", "appearance_thresh", APPEARANCE_THRESH),
            STRONGSORT: ("StrongSort", "max_cos_dist", 0.2)}


def check(name=BOTSORT):
    """A UsageError naming what to install where BoxMOT cannot be loaded
    here for the tracker ``name``; nothing is loaded."""
    missing = [m for m in ("torch", "boxmot")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"--tracker={name} (BoxMOT's {TRACKERS[name][0]}) "
                         f"needs {' and '.join(missing)}, not installed "
                         f"here: {INSTALL_HINT}")


def runner(name):
    """The tracker seam's runner (:class:`tracking.Tracker`) of BoxMOT's
    tracker ``name`` (:data:`TRACKERS`)."""
    def run(rows, features, num_frames, matches=None, sequence=None,
            max_cosine_distance=TRACKERS[name][2]):
        return run_in_process(name, rows, features, num_frames, matches,
                              sequence, max_cosine_distance)
    return run


def run_in_process(name, rows, features, num_frames, matches=None,
                   sequence=None, max_cosine_distance=APPEARANCE_THRESH):
    """BoxMOT's tracker ``name`` over the detection ``rows`` with their
    ``features`` in a process of its own, the frames of ``sequence`` for
    its camera motion compensation; the gate ``max_cosine_distance`` is
    its own (``appearance_thresh``, ``max_cos_dist``). Returns the result
    rows ``(frame, track, left, top, width, height)`` (the boxes it
    reports, ids from 1); ``matches`` gets ``(frame, track, row
    index)``."""
    check(name)
    if sequence is None:
        raise ValueError(f"{name} reads the sequence's frames")
    with tempfile.TemporaryDirectory(prefix="botsort-") as tmp:
        paths = {name: os.path.join(tmp, name + ".npy")
                 for name in ("rows", "features", "output")}
        np.save(paths["rows"], np.asarray(rows, np.float64))
        np.save(paths["features"], np.asarray(features, np.float32))
        child = subprocess.run(
            [sys.executable, "-m", __name__, f"--sequence={sequence.path}",
             f"--rows={paths['rows']}", f"--features={paths['features']}",
             f"--output={paths['output']}", f"--num_frames={num_frames}",
             f"--tracker={name}", f"--gate={max_cosine_distance}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if child.returncode != 0 or not os.path.isfile(paths["output"]):
            last = (child.stderr.strip().splitlines() or [""])[-1]
            raise UsageError(f"--tracker={name} failed on sequence "
                             f"{sequence.name}: {last} (exit status "
                             f"{child.returncode})")
        found = np.load(paths["output"])
    if matches is not None:
        matches.extend((int(f), int(t), int(r)) for f, t, r in found[:, 6:9])
    return [(int(r[0]), int(r[1]), *map(float, r[2:6])) for r in found]


# In the tracker's own process ------------------------------------------------

def make_tracker(name, gate):
    """BoxMOT's tracker ``name`` at its defaults, embeddings given (no
    model of its own), ``gate`` its gate on the cosine distance."""
    import boxmot
    cls, setting, _ = TRACKERS[name]
    extra = {"use_embeddings": True} if name == BOTSORT else {}
    return getattr(boxmot, cls)(**{setting: gate}, **extra)


def track(tracker, rows, features, frames, num_frames):
    """Run ``tracker`` (:func:`make_tracker`) frame by frame: ``frames``
    iterates ``(number, BGR frame)`` of every frame 1..num_frames. BoxMOT
    takes scores from 0 to 1: a detector's on another scale (2D MOT
    2015's ACF detections score 20 to 150) are clipped to it, so every
    detection kept by ``--min_confidence`` counts as a confident one.
    Returns rows ``(frame, track, left, top, width, height, frame, track,
    row index)`` of the tracks it reports, ids from 1."""
    import torch
    from boxmot.structures.detections import Detections
    from boxmot.structures.geometry import Boxes
    found = []
    for number, image in frames:
        index = np.flatnonzero(rows[:, 0] == number)
        boxes = rows[index, 2:6].astype(np.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]  # xyxy
        detections = Detections(
            geometry=Boxes(torch.from_numpy(boxes)),
            scores=torch.from_numpy(np.clip(rows[index, 6], 0.0, 1.0).astype(
                np.float32)),
            class_ids=torch.zeros(len(index), dtype=torch.int64),
            sample_id=f"frame-{number}",
            embeddings=torch.from_numpy(np.asarray(
                features[index], np.float32).reshape(len(index),
                                                     features.shape[1])))
        out = tracker.update(detections, image)
        for track_id, box, det in zip(out.track_ids.tolist(),
                                      out.geometry.values.tolist(),
                                      out.detection_indices.tolist()):
            left, top, right, bottom = box
            found.append((number, track_id + 1, left, top, right - left,
                          bottom - top, number, track_id + 1,
                          int(index[det]) if 0 <= det < len(index) else -1))
    return np.asarray(found, np.float64).reshape(-1, 9)


@dataclasses.dataclass
class BotSortConfig:
    """The flags of the trackers' process."""
    sequence: str = commands.setting(None, "The sequence folder.",
                                     required=True)
    rows: str = commands.setting(None, "A .npy of detection rows (frame, "
                                 "id, left, top, width, height, "
                                 "confidence).", required=True)
    features: str = commands.setting(None, "A .npy of their features.",
                                     required=True)
    num_frames: int = commands.setting(None, "Frames to track (1 to it).",
                                       required=True)
    tracker: str = commands.setting(BOTSORT, "BoxMOT's tracker.",
                                    commands.one_of(TRACKERS))
    gate: float = commands.setting(
        APPEARANCE_THRESH, "Its gate on the cosine distance.")
    output: str = commands.setting(None, "The result rows' .npy.",
                                   required=True)


def main(argv):
    def run():
        config = commands.values(BotSortConfig)
        from cosine_metric_learning import mot_sequences
        sequence = mot_sequences.read_sequence(config.sequence)
        found = track(make_tracker(config.tracker, config.gate),
                      np.load(config.rows), np.load(config.features),
                      sequence.frames(range(1, config.num_frames + 1)),
                      config.num_frames)
        np.save(config.output, found)
        return 0

    return commands.run(argv, run, [BotSortConfig])


if __name__ == "__main__":
    commands.define([BotSortConfig])
    app.run(main)
