"""One person's tracklets found again across short gaps, and the
pseudo-identities of a fine-tuning on tracklets (``adapt``).

The tracklets' manifest (:mod:`datasets.tracklets`) records each
tracklet's frames (``spans``) and the pairs seen in one frame
(``seen_together``: different people for sure). :func:`link_tracklets`
joins a tracklet to the next of the same person after an occlusion,
:func:`pseudo_identities` relabels the training split with the chains,
and the pairs seen together stay the fine-tuning's only negatives.
"""

import dataclasses

import numpy as np

from cosine_metric_learning import tracking
from cosine_metric_learning.errors import UsageError

# one person's tracklets before and after an occlusion, linked into one
# identity of the fine-tuning: two tracklets of one sequence, the second
# starting at most LINK_MAX_GAP frames after the first ends (a gap Deep
# SORT bridges), each the other's nearest such under the re-estimated
# model, their mean features closer than all but LINK_FALSE_ACCEPT of the
# pairs seen together (different people)
LINK_MAX_GAP = tracking.DEFAULTS["max_age"]
LINK_FALSE_ACCEPT = 0.05


def link_tracklets(features, spans, seen_together, max_gap=LINK_MAX_GAP,
                   false_accept=LINK_FALSE_ACCEPT):
    """One person's tracklets found again across short gaps.

    ``features``: ``(C, D)`` unit features of the tracklets; ``spans``:
    ``(sequence, first frame, last frame)`` of each; ``seen_together``: bool
    ``(C, C)``, the pairs seen together. A tracklet is linked to a later
    one of its sequence that starts 1 to ``max_gap`` frames after it ends
    where each is the other's nearest such, not seen together, and their
    cosine distance is below the ``false_accept`` quantile of the pairs
    seen together (different people for sure). Returns ``(identity,
    links, threshold)``: the pseudo-identity of each tracklet (``(C,)``,
    0..K-1, chains of linked tracklets as one), the links ``(a, b,
    distance)``, and the threshold (None where no pair was seen together:
    nothing linked)."""
    count = len(features)
    distances = 1.0 - features @ features.T
    different = distances[np.triu(seen_together, 1)]
    identity = np.arange(count)
    if not len(different):
        return identity, [], None
    threshold = float(np.quantile(different, false_accept))
    sequence, first, last = (np.asarray(column) for column in zip(*spans))
    gap = first[None, :] - last[:, None]  # from the end of a to b's start
    allowed = (sequence[:, None] == sequence[None, :]) & (gap >= 1) & \
        (gap <= max_gap) & ~seen_together & (distances < threshold)
    masked = np.where(allowed, distances, np.inf)
    following, preceding = masked.argmin(axis=1), masked.argmin(axis=0)
    links = [(a, int(following[a]), float(masked[a, following[a]]))
             for a in range(count) if np.isfinite(masked[a, following[a]])
             and preceding[following[a]] == a]
    for a, b, _ in sorted(links, key=lambda link: spans[link[0]][1]):
        identity[b] = identity[a]  # chains go forward in time
    return np.unique(identity, return_inverse=True)[1], links, threshold


def pseudo_identities(identities, seen_together, identity):
    """``identities`` (a training split of tracklets) and ``seen_together``
    (their pairs seen together) relabelled with the tracklets'
    ``identity`` of :func:`link_tracklets`: each linked chain one label,
    named by its tracklets joined with ``+``; two identities were seen
    together where any of their tracklets were."""
    count = int(identity.max()) + 1
    names = ["+".join(n for n, i in zip(identities.label_names, identity)
                      if i == k) for k in range(count)]
    members = np.eye(count, dtype=int)[identity]  # (C, K)
    together = (members.T @ seen_together.astype(int) @ members) > 0
    return dataclasses.replace(identities, ids=identity[identities.ids],
                               label_names=names), together


def tracklet_spans(label_names, manifest):
    """``(sequence, first frame, last frame)`` of each of the tracklets
    ``label_names``, as the tracklets' manifest records them."""
    if "spans" not in manifest:
        raise UsageError("the tracklets' manifest.json does not record the "
                         "tracklets' frames (written by an earlier "
                         "version); give a new --output_dir")
    return [tuple(manifest["spans"][name]) for name in label_names]


def seen_together_labels(label_names, manifest):
    """bool ``(C, C)`` over the tracklets ``label_names``: the pairs the
    tracklets' manifest lists as seen in one frame (different people),
    the fine-tuning's only negatives; two tracklets not seen together may
    be one person lost and found again, and are not pushed apart."""
    if "seen_together" not in manifest:
        raise UsageError("the tracklets' manifest.json does not list the "
                         "tracklets seen together (written by an earlier "
                         "version); give a new --output_dir")
    label = {name: i for i, name in enumerate(label_names)}
    seen_together = np.zeros((len(label_names),) * 2, bool)
    for a, b in manifest["seen_together"]:
        seen_together[label[a], label[b]] = True
        seen_together[label[b], label[a]] = True
    return seen_together
