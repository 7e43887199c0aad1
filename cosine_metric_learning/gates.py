"""The gate on the cosine distance ``1 - a.b`` of unit features (Deep
SORT's ``--max_cosine_distance``): calibrated without labels on a
tracker's tracklets (boxes of one tracklet some frames apart are one
person, boxes of one frame are different people), and stated in each
tracker's own terms.

:func:`self_calibrated_gate` sets it from the two kinds of pairs
(:func:`pairs`, :func:`pair_distances`); :data:`GATE_CONVENTIONS` says
how other trackers take it, read from their code
(``tests/consumers/check_gates.py`` runs each printed setting through the
tracker itself).
"""

import dataclasses

import numpy as np

from cosine_metric_learning import metrics

# the self-calibrated gate: the share of different-people pairs it
# accepts, the share of same-tracklet pairs it may cut, and the frames
# between a tracklet's two boxes of a same pair
GATE_FALSE_ACCEPT = 0.01
GATE_FALSE_REJECT = 0.1
GATE_FRAME_GAP = 10
# pairs drawn at most, of each kind
MAX_PAIRS = 200_000
# the gate asked for as this (--max_cosine_distance=auto): each model's
# self-calibrated gate
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class GateConvention:
    """How a tracker states a gate on the cosine distance ``1 - a.b`` of
    unit features (Deep SORT's ``--max_cosine_distance``), read from
    that tracker's code (``tests/consumers/check_gates.py`` runs each
    printed setting through the tracker itself).

    ``versions``: the releases whose code it was read from;
    ``value(g)``: the value of ``setting`` that accepts the distances
    up to ``g`` and rejects those beyond; ``written``: how the tracker's
    configuration takes it; ``note``: where the equivalence holds (which
    stage, what else enters the cost).
    """
    tracker: str
    versions: str
    setting: str
    value: object
    written: str
    note: str

    def format(self, gate):
        return self.written.format(setting=self.setting,
                                   value=f"{self.value(gate):.4g}")


GATE_CONVENTIONS = (
    GateConvention(
        "Deep SORT", "", "max_cosine_distance", lambda g: g,
        "--{setting}={value}", "the matching cascade's gate"),
    GateConvention(
        "BoxMOT BoT-SORT", "25", "appearance_thresh", lambda g: g,
        "{setting}={value}",
        "the full distance in the first association; the unconfirmed "
        "tracks' stage halves it, accepting up to 2 x the gate"),
    GateConvention(
        "BoxMOT StrongSORT", "25", "max_cos_dist", lambda g: g,
        "{setting}={value}",
        "it gates 0.98 x distance + 0.02 x motion (mc_lambda): about "
        "gate / 0.98 at the predicted box"),
    GateConvention(
        "Ultralytics BoT-SORT", "8.4", "appearance_thresh",
        lambda g: 1 - g / 2, "{setting}: {value}",
        "a similarity of half the distance: 1 - gate / 2"),
)


def gate_settings(gate, notes=False):
    """The gate ``gate`` as each tracker of :data:`GATE_CONVENTIONS`
    states it: ``[(tracker, setting)]``, the setting followed by the
    convention's note in brackets with ``notes``."""
    return [(" ".join(filter(None, (c.tracker, c.versions))),
             c.format(gate) + (f" ({c.note})" if notes else ""))
            for c in GATE_CONVENTIONS]


def pairs(rows, pieces, frame_gap=GATE_FRAME_GAP):
    """The pairs the gate is calibrated on: ``(same, same_piece, different,
    different_pieces)``, row indices ``(N, 2)`` of rows of one piece at
    least ``frame_gap`` frames apart with their piece's number ``(N,)``,
    and of rows of different pieces in one frame with their pieces'
    numbers ``(M, 2)``."""
    same, same_piece, piece_of = [], [], {}
    for number, piece in enumerate(pieces):
        index = np.asarray(piece)
        frames = rows[index, 0]
        a, b = np.nonzero(frames[None, :] - frames[:, None] >= frame_gap)
        same.append(np.stack([index[a], index[b]], axis=1))
        same_piece.append(np.full(len(a), number))
        piece_of.update((i, number) for i in piece)
    in_pieces = np.asarray(sorted(piece_of), int)
    different = []
    for frame in np.unique(rows[in_pieces, 0]):
        index = in_pieces[rows[in_pieces, 0] == frame]
        a, b = np.triu_indices(len(index), 1)
        different.append(np.stack([index[a], index[b]], axis=1))

    def stacked(parts, shape):
        return np.concatenate(parts).astype(int) if parts else \
            np.zeros(shape, int)

    same = stacked(same, (0, 2))
    different = stacked(different, (0, 2))
    of = np.vectorize(piece_of.get, otypes=[int])
    return (same, stacked(same_piece, (0,)), different,
            of(different) if len(different) else np.zeros((0, 2), int))


def pair_distances(features, rows, pieces, frame_gap=GATE_FRAME_GAP,
                   max_pairs=MAX_PAIRS, seed=0):
    """``(same, different)``: cosine distances between the unit
    ``features`` of :func:`pairs`' pairs; at most ``max_pairs`` of each,
    drawn at random where there are more."""
    rng = np.random.default_rng(seed)
    same, _, different, _ = pairs(rows, pieces, frame_gap)

    def distances(chosen):
        if len(chosen) > max_pairs:
            chosen = chosen[rng.choice(len(chosen), max_pairs,
                                       replace=False)]
        return metrics.pair_cosine_distances(features, chosen)

    return distances(same), distances(different)


def self_calibrated_gate(same, different, false_accept=GATE_FALSE_ACCEPT,
                         false_reject=GATE_FALSE_REJECT):
    """The gate (a cosine distance) that accepts ``false_accept`` of the
    ``different`` pairs' distances, raised where that cuts more than
    ``false_reject`` of the ``same`` pairs to the gate that keeps all but
    that share of them; and what it does to both kinds.

    Returns
    -------
    dict or None
        ``gate``, ``false_accept`` and ``false_reject`` (the shares of
        different pairs at or below the gate and of same pairs above it),
        ``bound`` (which of the two set the gate: ``false accepts`` or
        ``false rejects``), ``same_pairs``, ``different_pairs``; None
        without pairs of both kinds.
    """
    same, different = np.asarray(same), np.asarray(different)
    if not len(same) or not len(different):
        return None
    gate = float(np.quantile(different, false_accept, method="lower"))
    bound = "false accepts"
    if false_reject is not None:
        # the least distance that at least 1 - false_reject of them reach
        keeping = float(np.quantile(same, 1.0 - false_reject,
                                    method="inverted_cdf"))
        if keeping > gate:
            gate, bound = keeping, "false rejects"
    return {"gate": gate,
            "false_accept": float(np.mean(different <= gate)),
            "false_reject": float(np.mean(same > gate)),
            "bound": bound,
            "same_pairs": int(len(same)),
            "different_pairs": int(len(different))}


def pooled_gate(sequences, false_accept=GATE_FALSE_ACCEPT,
                false_reject=GATE_FALSE_REJECT):
    """:func:`self_calibrated_gate` of the pairs of every ``(features,
    rows, pieces)`` of ``sequences`` together."""
    same, different = zip(*(pair_distances(features, rows, pieces)
                            for features, rows, pieces in sequences))
    return self_calibrated_gate(np.concatenate(same),
                                np.concatenate(different), false_accept,
                                false_reject)


def describe_gate(gate):
    """One line of a :func:`self_calibrated_gate`: the value, its pairs,
    its error rates and which of them set it."""
    return (f"{gate['gate']:.4g} (from {gate['same_pairs']} same-tracklet "
            f"and {gate['different_pairs']} same-frame pairs: false accepts "
            f"{100 * gate['false_accept']:.1f} %, false rejects "
            f"{100 * gate['false_reject']:.1f} %; set by the "
            f"{gate['bound']})")
