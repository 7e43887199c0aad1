"""Re-identification metrics: distances, CMC and mAP, vectorised in NumPy.

Two protocols:

* **Validation** (the original's evaluator): random single-shot galleries,
  one probe and one gallery image per identity, CMC "Precision@k".
* **Standard test protocol** (Market-1501 and MARS evaluation kits): for each
  query, gallery entries with id -1 and those with the query's id *and*
  camera are junk and removed from the ranking; good matches have the
  query's id and another camera. On one's own data the same camera counts
  too, from ``min_frame_gap`` frames away (:func:`junk_mask`). CMC counts
  the first good match; AP is the kits' trapezoidal AP, and the
  non-interpolated AP that PyTorch toolkits print is reported beside it.
"""

import numpy as np
import tensorflow as tf

RANKS = (1, 5, 10, 20)
VALIDATION_GALLERY_SEED = 4321


def distance_matrix(query, gallery, dtype=tf.float32):
    """Cosine distances ``1 - cos(q, g)`` (Q, G) between the rows of
    ``query`` and ``gallery`` (normalised first).

    The features are unit-length, so every other distance (squared
    Euclidean is twice this one) ranks them alike: this one is the ranking
    of every loss mode, and its scale is Deep SORT's gate's. ``dtype`` is
    the precision they are computed in: the test protocol uses float64, as
    the kits compute in MATLAB doubles (in float32, near-tied distances of
    a weakly trained model round alike and ranks flip).
    """
    query = tf.math.l2_normalize(tf.cast(tf.convert_to_tensor(query), dtype),
                                 axis=1)
    gallery = tf.math.l2_normalize(tf.cast(tf.convert_to_tensor(gallery),
                                           dtype), axis=1)
    return (1.0 - tf.matmul(query, gallery, transpose_b=True)).numpy()


# Random single-shot galleries (validation) -----------------------------------

def single_shot_gallery(ids, cameras, seed):
    """Draw one probe and one gallery image per identity.

    For each identity, in sorted order: if it was seen by more than one
    camera, two cameras are drawn at random and one image of each; else two
    different images of its one camera. Identities with a single image are
    skipped. All draws come from ``np.random.RandomState(seed)``.

    Returns
    -------
    (probe_indices, gallery_indices)
        Index arrays into ``ids`` of equal length, one entry per identity.
    """
    ids, cameras = np.asarray(ids), np.asarray(cameras)
    rng = np.random.RandomState(seed)
    probes, galleries = [], []
    for identity in np.unique(ids):
        indices = np.flatnonzero(ids == identity)
        identity_cameras = np.unique(cameras[indices])
        if len(identity_cameras) > 1:
            probe_cam, gallery_cam = rng.choice(identity_cameras, 2,
                                                replace=False)
            probe = rng.choice(indices[cameras[indices] == probe_cam])
            gallery = rng.choice(indices[cameras[indices] == gallery_cam])
        elif len(indices) > 1:
            probe, gallery = rng.choice(indices, 2, replace=False)
        else:
            continue
        probes.append(probe)
        galleries.append(gallery)
    return np.asarray(probes, np.int64), np.asarray(galleries, np.int64)


def validation_cmc(features, ids, cameras, num_galleries, ranks=RANKS):
    """The original's validation metric over random single-shot galleries.

    Gallery ``i`` is drawn with seed ``4321 + i``. Precision@k is the
    fraction of probes whose match is among the ``k`` nearest of the
    gallery (one relevant image per probe, so ``min(k, 1) = 1``), averaged
    over the galleries; the mAP of a single-shot gallery is the mean of
    ``1 / rank`` of the match.

    Returns
    -------
    dict
        ``{"Precision@1": ..., ..., "mAP": ..., "mINP": ...}`` (with one
        relevant image per probe, mINP equals mAP).
    """
    features, ids = np.asarray(features), np.asarray(ids)
    sums = dict.fromkeys([f"Precision@{k}" for k in ranks] + ["mAP"], 0.0)
    for i in range(num_galleries):
        probes, galleries = single_shot_gallery(
            ids, cameras, VALIDATION_GALLERY_SEED + i)
        distances = distance_matrix(features[probes], features[galleries])
        # 0-based rank of each probe's match: gallery entries strictly closer
        match = np.diagonal(distances)[:, None]
        rank = np.sum(distances < match, axis=1)
        for k in ranks:
            sums[f"Precision@{k}"] += np.mean(rank < k)
        sums["mAP"] += np.mean(1.0 / (rank + 1))
    result = {name: value / num_galleries for name, value in sums.items()}
    # one relevant image per probe: its INP, 1 / rank, is its AP
    result["mINP"] = result["mAP"]
    return result


# The standard test protocol ---------------------------------------------------

def _hit_positions(distances, good, junk):
    """Every good match ("hit") of a chunk of queries in rank order: its
    row, its 0-based position in the ranking with junk removed, and i for
    the i-th hit of its row (1-based).

    Nearest first; ties keep gallery order, as MATLAB's sort does. The
    positions are counted, not found by sorting indices: junk is moved past
    every hit (infinite distance), each row's distances are sorted as
    values, and a hit's position is the number of distances below it plus
    the entries at its very distance with a lower gallery index.
    """
    distances = np.where(junk, np.inf, distances)
    nearest = np.sort(distances, axis=1)  # values only: a fast SIMD sort
    rows, positions, ranks = [], [], []
    for r in np.flatnonzero(good.any(axis=1)):
        hits = np.flatnonzero(good[r])
        values = distances[r, hits]
        order = np.argsort(values, kind="stable")  # ties: gallery order
        hits, values = hits[order], values[order]
        below = np.searchsorted(nearest[r], values, side="left")
        level = np.searchsorted(values, values, side="left")
        tied = np.searchsorted(nearest[r], values, side="right") - below
        position = below + np.arange(len(hits)) - level
        others = tied > np.searchsorted(values, values, side="right") - level
        for k in np.flatnonzero(others):  # entries other than hits tie
            same = np.flatnonzero(distances[r, :hits[k]] == values[k])
            position[k] = below[k] + len(same)
        rows.append(np.full(len(hits), r))
        positions.append(position)
        ranks.append(np.arange(1, len(hits) + 1))
    if not rows:
        return (np.zeros(0, np.int64),) * 3
    return (np.concatenate(rows), np.concatenate(positions),
            np.concatenate(ranks))


def _rank_chunk(distances, good, junk):
    """Rank a chunk of queries: ``(first_hits, ap, ap_plain, inp)``, the
    count of first good matches at each position (junk removed), and the
    kits' AP, the non-interpolated AP and the INP of every query with a
    good match."""
    num_queries, num_gallery = distances.shape
    row, position, i = _hit_positions(distances, good, junk)
    position, i = position.astype(np.float64), i.astype(np.float64)
    num_good = np.bincount(row, minlength=num_queries)

    # CMC: the first hit of every query with a good match
    first_hits = np.bincount(position[i == 1].astype(np.int64),
                             minlength=num_gallery)
    # AP, the kits' version: each hit adds (1/ngood) * (p_prev + p) / 2
    # with p_prev the precision one position up (1 at the top)
    precision = i / (position + 1.0)
    previous = np.where(position > 0, (i - 1) / np.maximum(position, 1), 1.0)
    valid = num_good > 0
    ap = np.bincount(row, (previous + precision) / 2, num_queries)
    ap_plain = np.bincount(row, precision, num_queries)
    # INP: the precision at the last hit, num_good / (its position + 1)
    last = i == num_good[row]
    inp = np.zeros(num_queries)
    inp[row[last]] = precision[last]
    return (first_hits, ap[valid] / num_good[valid],
            ap_plain[valid] / num_good[valid], inp[valid])


def junk_mask(query_ids, gallery_ids, query_cameras, gallery_cameras,
              query_frames=None, gallery_frames=None, min_frame_gap=None):
    """``(Q, G)`` bool: the gallery entries left out of each query's
    ranking: id -1, and the query's id in the query's camera (the kits'
    rule), or with ``min_frame_gap``, only those of them fewer than
    ``min_frame_gap`` frames from the query (``query_frames``,
    ``gallery_frames``): near-duplicate frames of one track."""
    query_ids, gallery_ids = np.asarray(query_ids), np.asarray(gallery_ids)
    same = (gallery_ids[None, :] == query_ids[:, None]) & (
        np.asarray(gallery_cameras)[None, :]
        == np.asarray(query_cameras)[:, None])
    if min_frame_gap is not None:
        same &= np.abs(np.asarray(gallery_frames, np.int64)[None, :]
                       - np.asarray(query_frames, np.int64)[:, None]
                       ) < min_frame_gap
    return (gallery_ids == -1)[None, :] | same


def evaluate_ranking(distances, query_ids, gallery_ids, query_cameras,
                     gallery_cameras, ranks=RANKS, chunk_size=256,
                     query_frames=None, gallery_frames=None,
                     min_frame_gap=None):
    """CMC and mAP with the Market-1501 / MARS evaluation-kit protocol.

    Parameters
    ----------
    distances : ndarray (Q, G)
    query_ids, query_cameras : ndarray (Q,)
    gallery_ids, gallery_cameras : ndarray (G,)
    ranks : tuple of int
    chunk_size : int
        Queries processed at once (bounds memory to chunk_size x G).
    query_frames, gallery_frames, min_frame_gap
        Given, the junk is that of :func:`junk_mask` with them: entries of
        the query's id and camera count as good matches when at least
        ``min_frame_gap`` frames from the query (own data, split by time).

    Returns
    -------
    dict
        ``rank-k`` CMC for each k, ``mAP`` (the kits' trapezoidal AP),
        ``mAP_noninterpolated`` (AP as PyTorch re-id toolkits compute it),
        ``mINP`` (Ye et al., 2021: the mean over queries of the number of
        good matches over the position of the last one, junk removed: how
        far down the hardest match is), ``num_queries`` (queries with at
        least one good match; the others are left out, as they have no
        answer) and ``cmc`` (the full curve).
    """
    distances = np.asarray(distances)
    query_ids, gallery_ids = np.asarray(query_ids), np.asarray(gallery_ids)
    query_cameras = np.asarray(query_cameras)
    num_gallery = distances.shape[1]
    first_hits = np.zeros(num_gallery)
    ap_sum = ap_plain_sum = inp_sum = 0.0
    num_valid = 0
    for start in range(0, len(query_ids), chunk_size):
        rows = slice(start, start + chunk_size)
        same_id = gallery_ids[None, :] == query_ids[rows, None]
        junk = junk_mask(
            query_ids[rows], gallery_ids, query_cameras[rows],
            gallery_cameras, None if query_frames is None
            else np.asarray(query_frames)[rows], gallery_frames,
            min_frame_gap)
        hits, aps, aps_plain, inps = _rank_chunk(distances[rows],
                                                 same_id & ~junk, junk)
        first_hits += hits
        ap_sum += aps.sum()
        ap_plain_sum += aps_plain.sum()
        inp_sum += inps.sum()
        num_valid += len(aps)
    if num_valid == 0:
        raise ValueError("no query has a good match in the gallery")
    cmc = np.cumsum(first_hits) / num_valid
    result = {f"rank-{k}": float(cmc[min(k, num_gallery) - 1]) for k in ranks}
    result.update(mAP=ap_sum / num_valid,
                  mAP_noninterpolated=ap_plain_sum / num_valid,
                  mINP=inp_sum / num_valid,
                  num_queries=num_valid, cmc=cmc)
    return result


# The tracker's gate -------------------------------------------------------------

MAX_GATE_NEGATIVES = 2_000_000


def equal_error_gate(distances, same, seed=0):
    """The distance that best separates same-identity from different-
    identity pairs: the threshold where the false-accept rate (different
    pairs at or below it) meets the false-reject rate (same pairs above it).

    Parameters
    ----------
    distances : ndarray
        Pair distances (any shape).
    same : bool ndarray of the same shape
        Whether each pair shows one identity.
    seed : int
        Above 2,000,000 different-identity pairs a seeded random sample of
        that many stands for them (the rate changes by well under 0.1 %).

    Returns
    -------
    dict
        ``threshold``, ``false_accept_rate``, ``false_reject_rate``.
    """
    distances, same = np.ravel(distances), np.ravel(same)
    positives = np.sort(distances[same])
    negatives = distances[~same]
    if not len(positives) or not len(negatives):
        raise ValueError("the gate needs same- and different-identity pairs")
    if len(negatives) > MAX_GATE_NEGATIVES:
        negatives = np.random.default_rng(seed).choice(
            negatives, MAX_GATE_NEGATIVES, replace=False)
    negatives = np.sort(negatives)
    # candidate thresholds: every same-identity distance
    frr = 1.0 - np.searchsorted(positives, positives, side="right") / len(
        positives)
    far = np.searchsorted(negatives, positives, side="right") / len(negatives)
    best = int(np.argmin(np.abs(far - frr)))
    return {"threshold": float(positives[best]),
            "false_accept_rate": float(far[best]),
            "false_reject_rate": float(frr[best])}


def pair_distances(features, ids):
    """The cosine distance of every pair of rows (``i < j``) and whether
    each pair shows one identity: the evaluator's distance histograms and
    gate (:func:`equal_error_gate`)."""
    distances = distance_matrix(features, features, tf.float64)
    ids = np.asarray(ids)
    upper = np.triu_indices(len(ids), k=1)
    return distances[upper], (ids[:, None] == ids[None, :])[upper]


def pair_cosine_distances(features, pairs):
    """The cosine distance ``1 - a.b`` of the unit ``features`` of each
    pair of rows ``pairs`` (``(P, 2)`` indices): Deep SORT's distance,
    the one every gate is stated in."""
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    return 1.0 - np.sum(features[pairs[:, 0]] * features[pairs[:, 1]],
                        axis=1)


# the held-out check: resamples of the held-out tracklets, and the
# interval of the difference in their ranking that counts as a difference
BOOTSTRAP_RESAMPLES = 500
INTERVAL = 0.95
# fewer held-out tracklets than this give no verdict
MIN_HELD_OUT_TRACKLETS = 5


def ranking_score(same, different, same_weights=None,
                  different_weights=None):
    """The probability that a same-tracklet pair is closer than a
    same-frame pair (the area under the ROC curve of the distance as a
    test of "different people"), each pair weighted; ties count half."""
    same, different = np.asarray(same, float), np.asarray(different, float)
    if not len(same) or not len(different):
        return None
    ws = np.ones(len(same)) if same_weights is None else same_weights
    wd = np.ones(len(different)) if different_weights is None \
        else different_weights
    order = np.argsort(different, kind="stable")
    sorted_d, cumulative = different[order], np.cumsum(wd[order])
    total = cumulative[-1] if len(cumulative) else 0.0

    def weight_below(values, side):  # of the different pairs
        index = np.searchsorted(sorted_d, values, side=side)
        return np.where(index > 0, cumulative[np.maximum(index - 1, 0)], 0.0)

    above = total - weight_below(same, "right")
    tied = weight_below(same, "right") - weight_below(same, "left")
    denominator = ws.sum() * total
    return float(np.sum(ws * (above + tied / 2)) / denominator) \
        if denominator else None


def held_out_check(before, after, same_piece, different_pieces, pieces,
                   resamples=BOOTSTRAP_RESAMPLES, interval=INTERVAL, seed=0):
    """Does the adapted model rank the held-out pairs better or worse?

    ``before`` and ``after`` are each model's ``(same, different)``
    distances of the same pairs; ``same_piece`` and ``different_pieces``
    the tracklets the pairs belong to, of ``pieces`` tracklets in all.
    The tracklets are resampled with replacement (a pair weighs as often
    as its tracklets were drawn) to give the difference of
    :func:`ranking_score` an ``interval``; the verdict is ``better`` or
    ``worse`` where the interval lies on one side of 0, else ``no clear
    difference``; ``unchecked`` without pairs of both kinds or with fewer
    than :data:`MIN_HELD_OUT_TRACKLETS` tracklets."""
    score = {when: ranking_score(*pair) for when, pair in
             (("before", before), ("after", after))}
    if score["before"] is None or pieces < MIN_HELD_OUT_TRACKLETS:
        return {"verdict": "unchecked", "score": score,
                "why": f"the held-out frames have {pieces} tracklets "
                f"({len(before[0])} same-tracklet and {len(before[1])} "
                f"same-frame pairs); a verdict needs pairs of both kinds "
                f"from {MIN_HELD_OUT_TRACKLETS} tracklets at least"}
    rng = np.random.default_rng(seed)
    differences = []
    for _ in range(resamples):
        drawn = np.bincount(rng.integers(0, pieces, pieces),
                            minlength=pieces).astype(float)
        ws = drawn[same_piece]
        wd = drawn[different_pieces[:, 0]] * drawn[different_pieces[:, 1]]
        if ws.sum() and wd.sum():
            differences.append(ranking_score(*after, ws, wd)
                               - ranking_score(*before, ws, wd))
    tail = 100 * (1 - interval) / 2
    low, high = np.percentile(differences, [tail, 100 - tail])
    difference = score["after"] - score["before"]
    verdict = ("better" if low > 0 else "worse" if high < 0 else
               "no clear difference")
    return {"verdict": verdict, "score": score,
            "difference": difference,
            "interval": [float(low), float(high)],
            "why": (f"on the held-out frames a same-tracklet pair is closer "
                    f"than a same-frame pair with probability "
                    f"{score['before']:.4f} before and {score['after']:.4f} "
                    f"after ({difference:+.4f}, {100 * interval:g} % "
                    f"interval {low:+.4f} to {high:+.4f} over "
                    f"{resamples} resamples of the {pieces} tracklets)")}
