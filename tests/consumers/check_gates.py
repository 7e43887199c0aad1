"""The self-calibrated gate as the commands print it for other trackers
(``cosine_metric_learning.gates.GATE_CONVENTIONS``), run through each
tracker's own association: the printed setting must accept a track's
detection whose cosine distance lies just inside the gate and reject one
just outside.
BoxMOT and Ultralytics bring PyTorch, so this runs only in the
consumers' virtualenv (``make test-consumers``)::

    python -m pytest --noconftest tests/consumers/check_gates.py

Each scene makes appearance decide: the detection moves so far from
the track (IoU distance 0.4) that the tracker's matching threshold
(0.3 here) rejects it on motion alone, while the IoU stays within the
proximity at which BoT-SORT consults appearance.
"""

import torch  # noqa: F401  (before TensorFlow: see check_peers.py)

import os
import tempfile

import numpy as np
import pytest

from tests.helpers import gates

# BoxMOT and Ultralytics keep their settings in the user's folders
os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp())

GATES = (0.1, 0.25)
FRAME = np.full((480, 640, 3), 114, np.uint8)
# a box, and the box moved right by 12.5 of its 50 pixels: IoU 0.6
BOX = (100.0, 100.0, 150.0, 200.0)
MOVED = (112.5, 100.0, 162.5, 200.0)
# below the moved box's IoU distance (0.4): motion alone rejects it
MATCH_THRESH = 0.3


def _accepted(distances, check):
    """``check(distance)`` for the distance just inside and just outside
    each gate; returns the outcomes, expected (True, False)."""
    return [check(d) for d in distances]


def _boxmot_update(tracker, boxes, features):
    """BoxMOT 25's ``update`` on ``boxes`` (xyxy, confidence 0.9) with
    their precomputed ``features``: the ids of the tracks it reports."""
    from boxmot.structures.detections import Detections
    from boxmot.structures.geometry import Boxes
    count = len(boxes)
    tracker.frames = getattr(tracker, "frames", 0) + 1
    detections = Detections(
        geometry=Boxes(torch.tensor(np.reshape(boxes, (count, 4)),
                                    dtype=torch.float32)),
        scores=torch.full((count,), 0.9), class_ids=torch.zeros(
            count, dtype=torch.int64),
        sample_id=f"frame-{tracker.frames}",
        embeddings=torch.tensor(np.reshape(features, (count, gates.DIM)),
                                dtype=torch.float32))
    return tracker.update(detections, FRAME).track_ids.tolist()


def _boxmot_botsort(appearance_thresh, **settings):
    from boxmot.trackers.box.botsort.tracker import BotSort
    return BotSort(appearance_thresh=appearance_thresh, use_cmc=False,
                   match_thresh=MATCH_THRESH,
                   unconfirmed_match_thresh=MATCH_THRESH, **settings)


@pytest.mark.parametrize("gate", GATES)
def test_boxmot_botsort_first_association(gate):
    """A track of frame 1 (activated at once) takes frame 2's moved box
    where the printed ``appearance_thresh`` accepts its feature."""
    name, value = gates.printed_setting("BoxMOT BoT-SORT 25", gate)
    assert name == "appearance_thresh"

    def check(distance):
        seen, later = gates.pair_at(distance)
        tracker = _boxmot_botsort(value)
        first = _boxmot_update(tracker, [BOX], [seen])
        assert len(first) == 1
        return _boxmot_update(tracker, [MOVED], [later]) == first

    assert _accepted(gates.inside_and_outside(gate), check) == [True, False]


@pytest.mark.parametrize("gate", GATES[:1])
def test_boxmot_botsort_unconfirmed_stage_halves_the_distance(gate):
    """What the note says of the other stage: a track not yet confirmed
    (born in frame 2) compares half the distance with the same setting,
    so it takes up to twice the gate."""
    _, value = gates.printed_setting("BoxMOT BoT-SORT 25", gate)

    def check(distance):
        seen, later = gates.pair_at(distance)
        tracker = _boxmot_botsort(value)
        _boxmot_update(tracker, [], [])
        assert _boxmot_update(tracker, [BOX], [seen]) == []
        return len(_boxmot_update(tracker, [MOVED], [later])) == 1

    assert _accepted(gates.inside_and_outside(2 * gate), check) == [
        True, False]
    assert check(1.5 * gate)  # beyond the gate, taken by this stage


@pytest.mark.parametrize("gate", GATES)
def test_boxmot_strongsort_matching_cascade(gate):
    """A confirmed track missed for a frame (so only the appearance
    cascade can take it up) keeps the box where the printed
    ``max_cos_dist`` accepts its feature."""
    from boxmot.trackers.box.strongsort.tracker import StrongSort
    name, value = gates.printed_setting("BoxMOT StrongSORT 25", gate)
    assert name == "max_cos_dist"

    def check(distance):
        seen, later = gates.pair_at(distance)
        tracker = StrongSort(max_cos_dist=value)
        for _ in range(3):  # n_init=3 confirms it
            ids = _boxmot_update(tracker, [BOX], [seen])
        assert len(ids) == 1
        _boxmot_update(tracker, [], [])
        return _boxmot_update(tracker, [BOX], [later]) == ids

    assert _accepted(gates.inside_and_outside(gate), check) == [True, False]


def _ultralytics_botsort(appearance_thresh):
    from ultralytics.trackers.bot_sort import BOTSORT
    from ultralytics.utils import YAML, IterableSimpleNamespace
    from ultralytics.utils.checks import check_yaml
    settings = YAML.load(check_yaml("botsort.yaml"))
    settings.update(appearance_thresh=appearance_thresh, with_reid=True,
                    model="auto", gmc_method="none",
                    match_thresh=MATCH_THRESH)
    return BOTSORT(IterableSimpleNamespace(**settings))


def _ultralytics_boxes(box):
    from ultralytics.engine.results import Boxes
    return Boxes(np.asarray([[*box, 0.9, 0]], np.float32), FRAME.shape[:2])


@pytest.mark.parametrize("gate", GATES)
def test_ultralytics_botsort(gate):
    """A track of frame 1 takes frame 2's moved box where the printed
    ``appearance_thresh`` (a similarity) accepts its feature."""
    name, value = gates.printed_setting("Ultralytics BoT-SORT 8.4", gate)
    assert name == "appearance_thresh"

    def check(distance):
        seen, later = gates.pair_at(distance)
        tracker = _ultralytics_botsort(value)
        first = tracker.update(_ultralytics_boxes(BOX), FRAME, seen[None])
        assert first.reshape(-1, 8)[:, 4].tolist() == [1]
        second = tracker.update(_ultralytics_boxes(MOVED), FRAME,
                                later[None])
        return second.reshape(-1, 8)[:, 4].tolist() == [1]

    assert _accepted(gates.inside_and_outside(gate), check) == [True, False]
