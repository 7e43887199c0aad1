"""A model's appearance features of a sequence's boxes, and its
self-calibrated gate: the library that ``track``, ``adapt`` and the
real-video benchmark share.

A "model" here is a path :func:`encoder.load` opens, or one of the
names :data:`MOTION` (one unit vector for every box: appearance
neutral, the Kalman gate and the matching cascade decide: Deep SORT as a
motion tracker at its strongest), :data:`NONE` (random unit vectors:
appearance rejects every pair, so only Deep SORT's IoU stage matches, for
tentative tracks and tracks missed for one frame), :data:`IDENTITY`
(each box's ground-truth identity: the most appearance
can give) and :data:`peers.NAMES` (another project's embedder).
:class:`FeatureCache` computes each model's features of a sequence's
boxes once, however many settings track them.
"""

import numpy as np
import scipy.optimize

from cosine_metric_learning import encoder as encoder_lib
from cosine_metric_learning import frame_io, gates, mot_sequences, peers
from cosine_metric_learning import metrics, tracking
from cosine_metric_learning.datasets import tracklets

MOTION = "motion"
NONE = "none"
# the models whose features carry no appearance: no gate to calibrate,
# sweep or find on the ground truth
NO_APPEARANCE = (MOTION, NONE)
# a box's feature is its ground-truth track's (a seeded random unit vector
# per track; a detection that overlaps no ground-truth box by
# IDENTITY_MIN_IOU gets one of its own)
IDENTITY = "identity"
IDENTITY_MIN_IOU = 0.5
# the boxes a model's features are of
DETECTIONS, GROUND_TRUTH = "detections", "ground truth"


class FeatureCache:
    """Each model's encoder, loaded once, its features of each sequence's
    boxes, encoded once, and each sequence's motion-only tracklets, cut
    once per setting."""

    def __init__(self):
        self._encoders = {}
        self._features = {}
        self._pieces = {}

    def encoder(self, path, backend="auto"):
        """The encoder of ``path``, loaded on ``backend`` (its first load
        decides)."""
        if path not in self._encoders:
            self._encoders[path] = encoder_lib.load(path, backend=backend)
        return self._encoders[path]

    def features(self, model, sequence, rows, boxes=DETECTIONS):
        """Features of ``rows``, the sequence's ``boxes`` (the tracked
        detections, or the ground truth), with ``model`` (None or
        :data:`NONE`: random unit vectors, whose cosine distances, about
        1, lie beyond every gate)."""
        key = (model, sequence.name, boxes)
        if key not in self._features:
            if model in (None, NONE):
                features = tracking.random_features(len(rows))
            elif model == MOTION:
                features = neutral_features(len(rows))
            elif model == IDENTITY:
                features = identity_features(sequence, rows,
                                             boxes == DETECTIONS)
            elif peers.is_peer(model):
                features = peers.encode_rows(model, sequence, rows)
            else:
                features = tracking.encode_rows(self.encoder(model),
                                                sequence, rows)
            self._features[key] = features
        return self._features[key]

    def motion_pieces(self, sequence, rows, parameters=None, **cut):
        """:func:`tracklets.motion_pieces` of ``rows``, cut once per
        sequence, tracker setting and cut."""
        key = (sequence.name, tuple(sorted((parameters or {}).items())),
               tuple(sorted(cut.items())))
        if key not in self._pieces:
            self._pieces[key] = tracklets.motion_pieces(
                sequence, rows, parameters, **cut)[0]
        return self._pieces[key]


def neutral_features(count, dim=128):
    """The same unit vector ``count`` times: every cosine distance 0, so
    Deep SORT's appearance term neither rejects nor prefers a pair."""
    features = np.zeros((count, dim), np.float32)
    features[:, 0] = 1.0
    return features


def identity_features(sequence, rows, detections=True):
    """The :data:`IDENTITY` features of ``rows``: each row's ground-truth
    track's unit vector (seeded by the track's number). ``detections``:
    the rows are detections, each given the track of the ground-truth box
    of its frame it is matched to (the most overlap in total, at least
    :data:`IDENTITY_MIN_IOU`; boxes to be considered, of any class), and
    an unmatched one a random vector of its own; else the rows are the
    ground truth's (their track in column 2)."""
    tracks = np.full(len(rows), -1, np.int64)
    if not detections:
        tracks[:] = rows[:, 1]
    else:
        gt = sequence.ground_truth
        gt = gt[mot_sequences.considered(gt, None)]
        for frame in np.unique(rows[:, 0]):
            mine = np.flatnonzero(rows[:, 0] == frame)
            theirs = gt[gt[:, 0] == frame]
            if not len(theirs):
                continue
            overlap = frame_io.box_overlaps(
                rows[mine, 2:6], theirs[:, 2:6])
            r, c = scipy.optimize.linear_sum_assignment(-overlap)
            matched = overlap[r, c] >= IDENTITY_MIN_IOU
            tracks[mine[r[matched]]] = theirs[c[matched], 1]
    features = tracking.random_features(len(rows))
    for track in np.unique(tracks[tracks >= 0]):
        vector = np.random.default_rng([1, int(track)]).normal(
            size=features.shape[1])
        features[tracks == track] = vector / np.linalg.norm(vector)
    return features


def calibrate(model, sequences, rows_of, parameters, cache):
    """The self-calibrated gate of ``model`` on the sequences
    (:func:`gates.self_calibrated_gate`, with the gate in each
    tracker's convention), from the motion-only tracklets of their
    tracked detections ``rows_of[name]``, tracked at ``parameters``;
    None without pairs. ``cache``: a :class:`FeatureCache`."""
    # motion alone: any gate
    setting = {**parameters, "max_cosine_distance":
               tracking.DEFAULTS["max_cosine_distance"]}
    gate = gates.pooled_gate(
        (cache.features(model, s, rows_of[s.name]), rows_of[s.name],
         cache.motion_pieces(s, rows_of[s.name], setting))
        for s in sequences)
    if gate is not None:
        gate["conventions"] = dict(gates.gate_settings(gate["gate"]))
    return gate


# the visibility a ground-truth box needs to be used for the gate found
# on the ground truth
GATE_MIN_VISIBILITY = 0.5


def ground_truth_gate(sequence, model, cache,
                      classes=mot_sequences.PEDESTRIANS):
    """The equal-error cosine gate on the ground truth: a track's own
    boxes ``gates.GATE_FRAME_GAP`` frames apart against different tracks' boxes
    in the same frame (boxes of ``classes`` to be considered, at least
    ``GATE_MIN_VISIBILITY`` visible); None where there are no such
    pairs."""
    gt = sequence.ground_truth
    if gt is None:
        return None
    rows = gt[mot_sequences.considered(gt, classes) & (gt[:, 8] >=
                                                       GATE_MIN_VISIBILITY)]
    features = cache.features(model, sequence, rows[:, :7], GROUND_TRUTH)
    where = {(int(f), int(t)): i for i, (f, t) in enumerate(rows[:, :2])}
    same, different = [], []
    for (frame, track), i in where.items():
        later = where.get((frame + gates.GATE_FRAME_GAP, track))
        if later is not None:
            same.append((i, later))
    for frame in np.unique(rows[:, 0]):
        index = np.flatnonzero(rows[:, 0] == frame)
        different += [(index[a], index[b]) for a in range(len(index))
                      for b in range(a + 1, len(index))]
    if not same or not different:
        return None
    distances = metrics.pair_cosine_distances(features, same + different)
    labels = np.array([True] * len(same) + [False] * len(different))
    return metrics.equal_error_gate(distances, labels)["threshold"]
