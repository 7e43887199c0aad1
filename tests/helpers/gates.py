"""Feature pairs at a chosen cosine distance, and the printed gate
settings parsed back, for the tests that run each tracker's setting
through the tracker's own association (``tests/test_tracklets.py`` for
Deep SORT, ``tests/consumers/check_gates.py`` for BoxMOT and
Ultralytics)."""

import re

import numpy as np

from cosine_metric_learning import gates as gate_lib

DIM = 128
# distances this much inside and outside a gate: the accepted and the
# rejected pair (StrongSORT's 0.98 weight moves its edge by 2 %)
MARGIN = 0.05


def pair_at(distance, dim=DIM):
    """Two unit vectors whose cosine distance ``1 - a.b`` is
    ``distance`` (float32, as trackers take features)."""
    first = np.zeros(dim)
    first[0] = 1.0
    second = np.zeros(dim)
    second[0] = 1.0 - distance
    second[1] = np.sqrt(1.0 - (1.0 - distance) ** 2)
    pair = np.stack([first, second]).astype(np.float32)
    return pair[0], pair[1]


def inside_and_outside(gate):
    """The distances the setting of ``gate`` must accept and reject."""
    return gate * (1 - MARGIN), gate * (1 + MARGIN)


def printed_setting(tracker, gate):
    """``(setting name, value)`` of the line the commands print for
    ``tracker`` (a key of :func:`gate_lib.gate_settings`)."""
    text = dict(gate_lib.gate_settings(gate))[tracker]
    match = re.fullmatch(r"(?:--)?(\w+)(?:=|: )([0-9.eE+-]+)", text)
    assert match, text
    return match.group(1), float(match.group(2))
